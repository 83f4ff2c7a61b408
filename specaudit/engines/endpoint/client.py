"""`--engines endpoint`: audit live OpenAI-compatible servers (vLLM, SGLang, TGI, ...).

Two deployments of one model answer the same plan: `vanilla_url` with speculative decoding off
and `speculative_url` with it on (or one server twice with different settings). Each prompt is
sent as token ids (the tokenizer's chat template, as local runs) to `/v1/completions` with the
run's max_tokens, temperature, top_p, top_k and a per-(prompt, sample) seed, asking for the
top-N logprobs of every emitted token. Records are written exactly like local runs, engine
"vanilla" for the spec-OFF server and "speculative" for the spec-ON one, so every analysis applies
unchanged; they add `backend: "endpoint"`, `target_logprobs` (per position: the emitted token's
logprob and the top-N `[[token_id, logprob], ...]`, highest first; a null logprob is zero
probability) and `logprobs_mode`.

What a server does not show per request is recorded as not observed: steps, proposed, accepted,
their per-step lists and β are 0 / [], draft_s and verify_s null. The server's own acceptance
counters (vLLM's Prometheus `vllm:spec_decode_*`) are scraped from `metrics_url` before and
after the run, and their deltas go into the manifest under `server_metrics`.

Token ids come from the server (`return_tokens_as_token_ids`: vLLM then writes "token_id:123"
for every token); a server that returns only token text gets its output re-tokenised, which
the manifest says, and such records carry no logprobs (a text token cannot be mapped back to
an id safely).

llama-server (its /v1/models says `owned_by: llamacpp`) gets its own request: it fills every
sampling field a request leaves out from its defaults (min_p 0.05 among them), so the whole chain
is sent (engines.llama_sampling); its `logprobs.content` has no entry for a token whose
text ends inside a UTF-8 character, so the answer is not streamed and the ids are read from its
`__verbose.tokens` (`return_tokens`, `verbose`), and a record whose logprobs skip a token keeps
the ids but not the logprobs. Its logprobs are the model's softmax before the chain (raw).

`--prefix-cache` (docs/request-features.md, "Prefix caching"): a warm record's request is sent
again after a one-token request of the same prompt (to llama-server with `cache_prompt: true`; a
cold one with `cache_prompt: false`; to other servers with vLLM's `cache_salt`, one fresh salt per
cold request, so that it can share no cached block, and one shared by a warm request and its
priming request, so that it can share only theirs); what the server reports it reused is read from
`usage.prompt_tokens_details.cached_tokens` (vLLM with `--enable-prompt-tokens-details`,
llama-server, OpenAI's API), None where the answer does not say.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from specaudit._validation import typed_as
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.decoding._grammar_source import structured_outputs
from specaudit.engines.http.client import ZERO_LOGPROB, Completion, Endpoint, parse_token_id
from specaudit.engines.llama_sampling import sampling_fields
from specaudit.errors import InputError
from specaudit.execution.invariants import vocabulary_violations

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.decoding import SamplingSpec


# ----------------------------------------------------------------------------- token ids and logprobs
def _logprob(value: Any) -> float | None:
    """A returned logprob as a float, or None for zero probability (-inf, vLLM's -9999, null)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) and value > ZERO_LOGPROB else None


def output_tokens(completion: Completion, top_n: int) -> tuple[list[int] | None, list[dict] | None]:
    """(token ids, target_logprobs) from the server's answer; (None, None) when the server gave
    no token ids. `target_logprobs[t]["top"]` keeps the N highest entries only: vLLM adds the
    sampled token to the top list when it ranks lower, and the PIT needs the true top-N."""
    ids = None
    if completion.tokens is not None:
        parsed = [parse_token_id(t) for t in completion.tokens]
        ids = parsed if all(i is not None for i in parsed) else None
    if completion.all_token_ids is not None:  # llama-server: its logprobs name a subsequence of its tokens
        if ids != completion.all_token_ids:
            return list(completion.all_token_ids), None  # logprobs that skip a token cannot be placed
    if ids is None and completion.token_ids is not None:
        ids = list(completion.token_ids)
    if ids is None:
        return None, None
    if top_n == 0 or completion.tokens is None or completion.token_logprobs is None or completion.top_logprobs is None:
        return ids, None
    per_position = []
    for token_logprob, top in zip(completion.token_logprobs, completion.top_logprobs):
        entries = []
        for key, value in (top or {}).items():
            token_id = parse_token_id(key)
            if token_id is None:
                return ids, None  # text keys cannot be mapped to ids safely
            lp = _logprob(value)
            if lp is not None:  # zero-probability entries carry no mass
                entries.append((token_id, lp))
        entries.sort(key=lambda e: (-e[1], e[0]))
        per_position.append({"token_logprob": _logprob(token_logprob), "top": [[i, lp] for i, lp in entries[:top_n]]})
    return ids, per_position


def out_of_vocabulary(ids: list[int], logprobs: list[dict] | None, vocab_size: int) -> list[dict]:
    """Positions where the server emitted a token id outside [0, vocab_size), or ranked one in its
    top-N: a correct server cannot, so each is a finding against it. The position's
    `token_logprob` becomes null (probability 0 under the target), which the equivalence audit
    reports as an impossible token: the audit FAILs, naming the record and position."""
    emitted = {v["position"]: v["problem"] for v in vocabulary_violations(ids, vocab_size)}  # the one check every engine gets
    found = []
    for position in range(len(ids)):
        entry = logprobs[position] if logprobs is not None and position < len(logprobs) else None
        ranked = [int(i) for i, _ in (entry or {}).get("top") or [] if not 0 <= int(i) < vocab_size]
        if position not in emitted and not ranked:
            continue
        what = emitted.get(position) or f"top-N id {ranked[0]}, outside the vocabulary [0, {vocab_size})"
        found.append({"position": position, "problem": f"the server returned {what}"})
        if entry is not None:
            entry["token_logprob"] = None
    return found


FINISH_REASONS = {"stop": "eos", "eos": "eos", "eos_token": "eos", "length": "length", "max_tokens": "length"}


# ----------------------------------------------------------------------------- server metrics
# ----------------------------------------------------------------------------- the run
def resolve_model(endpoint: Endpoint, wanted: str | None, setting: str) -> tuple[str, list[str]]:
    served = endpoint.served_models()
    if wanted is not None:
        if served and wanted not in served:
            raise InputError(
                f"{endpoint._where(endpoint.base_url, '')} serves {', '.join(served)}, not {wanted!r}; "
                f"set {typed_as(f'endpoint.{setting}')} to one of them"
            )
        return wanted, served
    if len(served) != 1:
        raise InputError(
            f"{endpoint._where(endpoint.base_url, '')} serves {len(served)} models ({', '.join(served) or 'none'}); "
            f"name one with {typed_as(f'endpoint.{setting}')}"
        )
    return served[0], served


def request_features(spec: SamplingSpec) -> dict[str, Any]:
    """The request features as OpenAI's completion fields (presence_penalty, frequency_penalty,
    logit_bias with string ids, stop) and vLLM's and SGLang's extensions (min_p,
    repetition_penalty; a grammar as vLLM's `structured_outputs`, SGLang's fields through
    endpoint.extra_body), only those set; the registry refuses the one they lack (repeat_last_n)."""
    features = spec.features
    body: dict[str, Any] = {
        name: features[name] for name in ("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty") if name in features
    }
    if spec.logit_bias:
        body["logit_bias"] = {str(token): bias for token, bias in spec.logit_bias}
    if spec.stop:
        body["stop"] = list(spec.stop)
    if spec.grammar:
        body["structured_outputs"] = structured_outputs(spec.grammar)
    return body


def cached_prompt_tokens(completion: Completion) -> int | None:
    """The prompt tokens the server says it took from its prefix cache
    (`usage.prompt_tokens_details.cached_tokens`), None where it does not say."""
    details = completion.usage.get("prompt_tokens_details") if isinstance(completion.usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def request_body(
    cfg: RunConfig,
    settings: dict,
    model: str,
    prompt_ids: list[int],
    seed: int,
    max_tokens: int,
    *,
    llama_server: bool = False,
    cache_prompt: bool = False,
    cache_salt: str | None = None,
) -> dict:
    """The /v1/completions request of one plan item. Sampling settings are always sent, so a
    server's own defaults (vLLM applies the model's generation_config) cannot change them; to
    llama-server every stage of its chain (see the module docstring), unstreamed."""
    sampling = (
        sampling_fields(cfg, len(prompt_ids) + max_tokens)
        if llama_server
        else {
            "temperature": cfg.temperature,
            "top_p": cfg.top_p,
            "top_k": cfg.top_k if cfg.top_k > 0 else -1,  # vLLM / SGLang: -1 = off
            **request_features(cfg.sampling),
        }
    )
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        **sampling,
        "seed": seed,
        "return_tokens_as_token_ids": True,
    }
    if llama_server:  # every generated id in __verbose.tokens; no prefix reuse between requests but a warm record's
        body.update(return_tokens=True, verbose=True, cache_prompt=cache_prompt)
    elif cache_salt is not None:  # vLLM: a request reuses only cached blocks made under its own salt
        body["cache_salt"] = cache_salt
    if settings["logprobs"]:
        body["logprobs"] = settings["logprobs"]
    if settings["stream"] and not llama_server:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(settings["extra_body"])
    return {key: value for key, value in body.items() if value is not None}  # extra_body may drop a field with null


__all__ = [
    "cached_prompt_tokens",
    "out_of_vocabulary",
    "output_tokens",
    "request_body",
]


def api_key_of(settings: dict) -> str | None:
    if settings.get("api_key_env"):
        key = os.environ.get(settings["api_key_env"])
        if not key:
            raise InputError(
                f"{typed_as('endpoint.api_key_env')} names {settings['api_key_env']!r} but that environment variable is not set"
            )
        return key
    return settings.get("api_key")


def open_servers(settings: dict, timeout_s: float | None = None) -> tuple[dict[str, Endpoint], dict[str, str], dict[str, list[str]]]:
    """Both servers, each asked which models it serves: the health check of a run and of its dry run
    (which waits `timeout_s` at most), so an unset API key variable, a server that does not answer
    or a model it does not serve is refused before anything is written. (endpoints, the model each
    side audits, the models each side serves)."""
    api_key = api_key_of(settings)
    wait = min(timeout_s, settings["timeout_s"]) if timeout_s else settings["timeout_s"]
    endpoints = {
        engine: Endpoint(settings[f"{engine}_url"], setting=f"endpoint.{engine}_url", api_key=api_key, timeout_s=wait)
        for engine in (SPECULATIVE_ENGINE, CONTROL_ENGINE)
    }
    models, served = {}, {}
    for engine, endpoint in endpoints.items():
        models[engine], served[engine] = resolve_model(endpoint, settings[f"{engine}_model"], f"{engine}_model")
    return endpoints, models, served
