"""Talking to llama-server: the command lines of the two processes, the request of one plan item,
and its answer as a specaudit.decoding.Generation.

Requests go to llama-server's native `/completion` (prompt as token ids, `return_tokens` for the
output ids; see `complete` for why it is not streamed), over the endpoint
engine's HTTP client (specaudit.engines.http.client.Endpoint: its timeouts and its one-sentence
transport errors). Its OpenAI route `/v1/completions` takes the same sampling fields but returns
no token ids, so the endpoint engine's token-id path cannot be used on it unchanged.

Sampling is set explicitly on every request, as the in-process llama-cpp engine does
(engines.llama_sampling: the chain temperature, top_k, top_p, every other stage neutral;
llama-server takes the order per request, so temperature with top-p is allowed here, unlike in
the in-process engine).
`cache_prompt: false`: no prefix reuse between requests, so a record does not depend on which
request ran before it on the slot; with `--prefix-cache warm` a record's request is sent with
`cache_prompt: true` to the slot (`id_slot`) that an earlier request of the same prompt has just
filled, and the server's `timings.cache_n` (prompt tokens taken from the cache) is recorded. The seed is the record's seed cut to llama.cpp's uint32
(engines.llama_cpp_runtime.llama_seed), the same draws the in-process engine makes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit.engines.http.client import Endpoint
from specaudit.engines.llama_cpp_runtime import llama_seed
from specaudit.engines.llama_sampling import NEUTRAL_SAMPLING, SAMPLER_ORDER, request_features, sampling_fields
from specaudit.engines.llama_server.settings import NGRAM_LOOKUP, NGRAM_TYPES, LlamaServerSettings
from specaudit.engines.request_acceptance import RequestAcceptance, llama_server_acceptance
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.decoding import Generation

STOP_TYPES = {"eos": "eos", "limit": "length", "word": "stop"}  # llama-server's stop_type -> the record's finish_reason


def server_args(model: Path, settings: LlamaServerSettings, *, spec_type: str | None, draft: Path | None, k: int) -> list[str]:
    """llama-server's flags for one side: spec_type None is the spec-OFF server."""
    args = [
        "-m", str(model),
        "-np", str(settings.slots),
        "-c", str(settings.ctx_per_slot * settings.slots),
        "-t", str(settings.threads),
        "-tb", str(settings.threads),
        "--no-webui",
        "--no-warmup",
    ]  # fmt: skip
    if spec_type is not None:
        args += ["--spec-type", spec_type, "--spec-draft-n-max", str(k)]
        if spec_type == "draft-simple":
            if draft is None:
                raise InputError("llama-server's draft-simple speculation needs a GGUF --draft")
            args += ["--spec-draft-model", str(draft), "--spec-draft-n-min", "0", "-td", str(settings.threads)]
        elif spec_type == "ngram-simple":
            args += ["--spec-ngram-simple-size-n", str(NGRAM_LOOKUP), "--spec-ngram-simple-size-m", str(k)]
        elif spec_type not in NGRAM_TYPES:
            raise InputError(f"unknown llama-server --spec-type {spec_type!r}")
    return [*args, *settings.extra_args]


def request_body(cfg: RunConfig, prompt_ids: list[int], seed: int, max_tokens: int, logprobs: int = 0, *, slot: int | None = None) -> dict:
    """The /completion request of one plan item: every sampling stage set, none left to the server.
    `logprobs` > 0 asks for the emitted token's logprob (and the top `logprobs`) before sampling.
    `slot`: reuse the prompt's prefix cached on that slot (`cache_prompt: true`, `id_slot`);
    None: no reuse (`cache_prompt: false`)."""
    body = {
        "prompt": list(prompt_ids),
        "n_predict": max_tokens,
        **sampling_fields(cfg, len(prompt_ids) + max_tokens),
        "seed": llama_seed(seed),
        "cache_prompt": slot is not None,
        "return_tokens": True,
        "n_probs": logprobs,
        "post_sampling_probs": False,  # the target's own distribution, before the sampler chain
        "stream": False,
    }
    if slot is not None:
        body["id_slot"] = slot
    return body


def cached_tokens(answer: dict) -> int | None:
    """The prompt tokens the server took from its cache for this request (`timings.cache_n`), or
    None where the answer does not say."""
    value = (answer.get("timings") or {}).get("cache_n")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def complete(endpoint: Endpoint, body: dict) -> tuple[dict, list[int], float, float | None]:
    """POST /completion: (the answer, its output ids, wall seconds, time to first token).

    Not streamed: a streamed chunk carries only the token just sampled, and llama-server holds back
    a chunk while the text ends in an incomplete UTF-8 character, so a streamed answer can miss the
    ids of multi-byte characters; the whole answer's `tokens` has all of them. The time to first
    token is the server's own `timings.prompt_ms` (llama.cpp samples the first token from the
    prompt's last logits, in the same batch), which leaves out time queued for a slot."""
    url = f"{endpoint.base_url}/completion"
    start = time.perf_counter()
    with endpoint._request(url, body, stage="stopped answering") as response:
        answer = endpoint._json(response.read(), url)
    wall = time.perf_counter() - start
    tokens = answer.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise InputError(
            f"llama-server {url} answered without a list of token ids in `tokens` (return_tokens); is it llama.cpp's llama-server?"
        )
    prompt_ms = (answer.get("timings") or {}).get("prompt_ms")
    ttft = float(prompt_ms) / 1000.0 if isinstance(prompt_ms, (int, float)) and not isinstance(prompt_ms, bool) else None
    return answer, list(tokens), wall, ttft


LOWEST_LOGPROB = -3.0e38  # llama-server writes log(0) as the lowest float (JSON has no -inf)


def emitted_logprobs(answer: dict, tokens: list[int]) -> list[float | None] | None:
    """The server's logprob of each emitted token (`completion_probabilities`), None where it says
    zero probability; None when the answer has none, or not one per emitted token."""
    probs = answer.get("completion_probabilities")
    if not isinstance(probs, list) or not probs:
        return None
    values = []
    for entry, token in zip(probs, tokens):
        if not isinstance(entry, dict) or entry.get("id") != token:
            return None  # not aligned with the output: unusable, rather than misread
        value = entry.get("logprob")
        values.append(None if value is None or float(value) <= LOWEST_LOGPROB else float(value))
    return values if len(values) == len(probs) else None


def generation_of(
    final: dict, tokens: list[int], wall: float, ttft: float | None, eos_ids: set[int], max_tokens: int
) -> tuple[Generation, RequestAcceptance | None, dict[str, Any]]:
    """(a Generation, the server's RequestAcceptance or None) from one streamed answer.

    Where llama-server's tokens stop short of the end-of-sequence token it stopped on, the
    tokenizer's eos id is appended: the records of every engine end with it."""
    from specaudit.decoding import Generation

    stop = final.get("stop_type")
    finish = STOP_TYPES.get(str(stop))
    if finish is None:
        raise InputError(f"llama-server stopped a completion with stop_type {stop!r}, not eos or limit; check its log")
    if finish == "eos" and (not tokens or tokens[-1] not in eos_ids):
        if not eos_ids:
            raise InputError("llama-server stopped at an end-of-sequence token but the tokenizer names none; cannot record it")
        tokens = [*tokens, min(eos_ids)]
    if len(tokens) > max_tokens:
        raise InputError(f"llama-server returned {len(tokens)} tokens for n_predict {max_tokens}")
    acceptance = llama_server_acceptance(final)
    timings = final.get("timings") or {}
    steps = len(tokens)
    if acceptance is not None and acceptance.proposed:
        steps = max(len(tokens) - acceptance.accepted, 0)  # each step emits its accepted drafts plus one token
    generation = Generation(
        tokens=tokens,
        finish_reason=finish,
        wall_s=wall,
        ttft_s=ttft if ttft is not None else wall,
        steps=steps,
        proposed=acceptance.proposed if acceptance else 0,
        accepted=acceptance.accepted if acceptance else 0,
        draft_s=None,
        verify_s=None,
    )
    server_times = {key: timings[key] for key in ("prompt_ms", "predicted_ms", "predicted_n", "prompt_n") if key in timings}
    return generation, acceptance, server_times


__all__ = [
    "NEUTRAL_SAMPLING",  # defined in engines.llama_sampling, shared with the endpoint engine
    "SAMPLER_ORDER",
    "RequestAcceptance",
    "cached_tokens",
    "complete",
    "generation_of",
    "request_body",
    "request_features",
    "server_args",
]
