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
is sent (engines.llama_server.sampling); its `logprobs.content` has no entry for a token whose
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

import json
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from specaudit._validation import typed_as
from specaudit.decoding._grammar_source import grammar_format
from specaudit.engines.endpoint._deadline import deadline_transport, total_deadline
from specaudit.engines.endpoint._responses import (
    ANSWER_BYTES_BASE,
    ANSWER_BYTES_PER_TOKEN,
    TEXT_CHARS_PER_TOKEN,
    TOKEN_ID_PREFIX,
    CompletionPart,
    ModelList,
    problem,
)
from specaudit.engines.llama_server.sampling import sampling_fields
from specaudit.engines.request_acceptance import RequestAcceptance, request_acceptance
from specaudit.errors import EngineError, InputError
from specaudit.execution.invariants import vocabulary_violations

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import httpx

    from specaudit.config import RunConfig
    from specaudit.decoding import SamplingSpec

# vLLM writes -inf logprobs as -9999.0 in its JSON: at or below it a token has zero probability.
ZERO_LOGPROB = -9999.0
METRICS_PAGE_BYTES = 16 << 20  # a Prometheus page with many label sets is larger than any completion
LLAMA_SERVER_OWNER = "llamacpp"  # `owned_by` of llama-server's /v1/models entries


def _error_message(body: bytes) -> str:
    """The server's own error text (OpenAI's {"error": {"message": ...}} and common variants)."""
    text = body.decode("utf-8", "replace")
    try:
        payload = json.loads(text)
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        if isinstance(error, dict):
            text = str(error.get("message") or error.get("detail") or error)
        else:
            text = str(error)
    except ValueError:
        pass
    text = " ".join(text.split())
    return text[:200] + ("..." if len(text) > 200 else "")


@dataclass
class Completion:
    """One completion as the client saw it: what the server returned and when."""

    text: str
    finish_reason: str | None
    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict | None] | None = None
    token_ids: list[int] | None = None  # vLLM's `return_token_ids` field, when present
    all_token_ids: list[int] | None = None  # llama-server's `__verbose.tokens`: every token, where its logprobs skip some
    wall_s: float = 0.0
    ttft_s: float | None = None
    usage: dict = field(default_factory=dict)
    # The server's own per-request acceptance (llama-server timings, vLLM metrics, SGLang meta_info), if it reports one.
    acceptance: RequestAcceptance | None = None


class _DeadlinePassed(Exception):
    """The request's total deadline passed between two pieces of its answer."""


class Endpoint:
    """One OpenAI-compatible server: an httpx client keeping connections alive between requests
    (one pool per server, shared by the worker threads). Each request has a total deadline of
    `timeout_s` from its start, checked at every piece of the answer (connect and each read are
    bounded by it as well), at most MAX_REDIRECTS redirects, and a size bound; every answer is
    validated against the response models of specaudit.engines.endpoint._responses."""

    MAX_REDIRECTS = 5

    def __init__(self, base_url: str, *, setting: str, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        import httpx

        self.base_url = base_url
        self.setting = setting  # which setting named it (a config key such as endpoint.speculative_url), for error messages
        self.api_key = api_key
        self.timeout_s = timeout_s
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            timeout=timeout_s, headers=headers, follow_redirects=True, max_redirects=self.MAX_REDIRECTS, transport=deadline_transport()
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _where(self, url: str, request: str) -> str:
        return f"{typed_as(self.setting)} {url}" + (f" ({request})" if request else "")

    @contextmanager
    def _request(self, url: str, body: dict | None = None, *, stage: str = "did not answer", request: str = "") -> Iterator[httpx.Response]:
        """The open response of one request; every transport failure becomes one InputError
        sentence naming the setting, URL and request (`stage` says how far the answer got)."""
        import httpx

        method = "POST" if body is not None else "GET"
        where = self._where(url, request)
        try:
            with total_deadline(self.timeout_s), self._client.stream(method, url, json=body) as response:
                if response.status_code >= 400:
                    message = _error_message(response.read()[:65536] or b"")
                    # a server's own failure (5xx) on one request is a finding mid-run (execution.faults)
                    error = (EngineError if response.status_code >= 500 else InputError)(
                        f"{where} answered HTTP {response.status_code} "
                        f"({message or response.reason_phrase}); check the server log and the endpoint settings"
                    )
                    error.fault_kind = f"HTTP {response.status_code}"
                    raise error
                yield response
        except (httpx.TimeoutException, _DeadlinePassed):
            raise InputError(f"{where} {stage} within {self.timeout_s:g} s; check the server or raise endpoint.timeout_s") from None
        except httpx.ConnectError as err:
            raise InputError(f"{where} did not answer ({err}); start the server or fix the URL") from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as err:
            raise InputError(f"{where} is not a usable URL ({err}); fix the endpoint settings") from None
        except httpx.TooManyRedirects:
            raise InputError(
                f"{where} redirected more than {self.MAX_REDIRECTS} times (a redirect loop?); point the endpoint settings at the server itself"
            ) from None
        except httpx.DecodingError as err:
            raise InputError(f"{where} sent a body that cannot be decoded ({err}); check the server or its proxy") from None
        except httpx.TransportError as err:
            raise InputError(f"{where} dropped the connection ({err or type(err).__name__}); check the server log") from None
        except httpx.HTTPError as err:  # any other failure of the client is still the server's answer
            raise InputError(f"{where} failed ({type(err).__name__}: {err}); check the server log") from None

    def _pieces(self, response: httpx.Response, url: str, request: str, deadline: float, limit: int) -> Iterator[bytes]:
        """The body's bytes as they arrive, within the request's deadline and size bound."""
        size = 0
        for piece in response.iter_bytes():
            size += len(piece)
            if size > limit:
                raise InputError(
                    f"{self._where(url, request)} sent more than {limit // (1 << 20)} MiB; an answer of that size is not a "
                    "completion of the request (a server that does not stop?)"
                )
            if time.monotonic() > deadline:
                raise _DeadlinePassed
            yield piece

    def _read(self, response: httpx.Response, url: str, request: str = "", limit: int = ANSWER_BYTES_BASE) -> bytes:
        return b"".join(self._pieces(response, url, request, time.monotonic() + self.timeout_s, limit))

    def _json(self, raw: bytes | str, url: str, request: str = "") -> dict:
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            raise InputError(f"{self._where(url, request)} did not return JSON; is it the OpenAI-compatible /v1 base URL?") from None
        if not isinstance(payload, dict):
            raise InputError(
                f"{self._where(url, request)} returned {type(payload).__name__} JSON, not an object; "
                "is it the OpenAI-compatible /v1 base URL?"
            )
        return payload

    def _malformed(self, url: str, request: str, what: str) -> InputError:
        return InputError(
            f"{self._where(url, request)} answered with a malformed completion ({what}); check the server; "
            "the finished records are kept and the same command resumes"
        )

    def get_text(self, url: str) -> str:
        with self._request(url, stage="stopped answering") as response:
            return self._read(response, url, limit=METRICS_PAGE_BYTES).decode("utf-8", "replace")

    def served_models(self) -> list[str]:
        url = f"{self.base_url}/models"
        with self._request(url, stage="stopped answering") as response:
            payload = self._json(self._read(response, url), url)
        if not isinstance(payload.get("data"), list):
            raise InputError(f"{self._where(url, '')} did not list models (no `data` array); is it the OpenAI-compatible /v1 base URL?")
        try:
            listed = ModelList.model_validate(payload)
        except ValidationError as err:
            raise InputError(f"{self._where(url, '')} listed models malformed ({problem(err)}); check the server") from None
        self.model_entries = [entry for entry in payload["data"] if isinstance(entry, dict) and entry.get("id") is not None]
        return [entry.id for entry in listed.data]

    def is_llama_server(self) -> bool:
        """Whether the models listed (served_models first) are llama-server's."""
        return any(entry.get("owned_by") == LLAMA_SERVER_OWNER for entry in getattr(self, "model_entries", []))

    def advertised_context(self, model: str) -> int | None:
        """The context the server says `model` has (`max_model_len` in vLLM's /v1/models), if it says."""
        for entry in getattr(self, "model_entries", []):
            value = entry.get("max_model_len")
            if str(entry["id"]) == model and isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    def complete(self, body: dict, request: str = "") -> Completion:
        """One completion of `body`; `request` names it in errors (e.g. "prompt p1, sample 0")."""
        url = f"{self.base_url}/completions"
        max_tokens = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else 4096
        limit = ANSWER_BYTES_BASE + ANSWER_BYTES_PER_TOKEN * max_tokens
        start = time.perf_counter()
        deadline = time.monotonic() + self.timeout_s
        first = None
        stage = "did not finish streaming its answer" if body.get("stream") else "did not finish answering"
        with self._request(url, body, stage=stage, request=request) as response:
            pieces = self._pieces(response, url, request, deadline, limit)
            if body.get("stream"):
                chunks, first = self._read_stream(pieces, url, request)
            else:
                chunks = [self._json(b"".join(pieces), url, request)]
        wall = time.perf_counter() - start
        completion = self._merge(chunks, url, request, max_tokens)
        completion.wall_s = wall
        completion.ttft_s = _server_prompt_s(chunks) if first is None else first - start
        return completion

    def _read_stream(self, pieces: Iterable[bytes], url: str, request: str) -> tuple[list[dict], float | None]:
        """Server-sent events: `data: {chunk}` lines until `data: [DONE]`; the time of the first
        chunk that carries output is the time to first token."""
        chunks, first = [], None
        for line in _lines(pieces):
            if not line.startswith("data:"):
                continue  # comments, event names, keep-alive blank lines
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                break
            chunk = self._json(data, url, request)
            choices = chunk.get("choices")
            choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
            logprobs = choice.get("logprobs")
            if first is None and (
                choice.get("text") or (isinstance(logprobs, dict) and (logprobs.get("tokens") or logprobs.get("content")))
            ):
                first = time.perf_counter()
            chunks.append(chunk)
        return chunks, first

    def _merge(self, chunks: list[dict], url: str, request: str = "", max_tokens: int = 4096) -> Completion:
        """One Completion from a response (or the chunks of a stream, concatenated in order), each
        part validated against CompletionPart and the whole against the request."""
        merged = Completion(text="", finish_reason=None)
        lists: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
        present: set[str] = set()
        has_logprobs, token_ids = False, None
        for chunk in chunks:
            if "error" in chunk:
                raise InputError(
                    f"{self._where(url, request)} reported an error mid-answer ({_error_message(json.dumps(chunk).encode())}); "
                    "check the server log"
                )
            merged.acceptance = request_acceptance(chunk) or merged.acceptance  # a stream reports it on its last chunk
            try:
                part = CompletionPart.model_validate(chunk)
            except ValidationError as err:
                raise self._malformed(url, request, problem(err)) from None
            if part.usage:
                merged.usage = part.usage
            if part.choices is None:
                if part.usage:
                    continue  # the stream's final usage chunk has no choices
                raise InputError(f"{self._where(url, request)} answered without `choices`; is it an OpenAI-compatible completions server?")
            if not part.choices:
                continue
            choice = part.choices[0]
            merged.text += choice.text
            merged.finish_reason = choice.finish_reason or merged.finish_reason
            if choice.logprobs is not None:
                has_logprobs = True
                for name in lists:
                    values = getattr(choice.logprobs, name)
                    if values is not None:
                        present.add(name)
                        lists[name].extend(values)
            if choice.token_ids is not None:
                token_ids = (token_ids or []) + list(choice.token_ids)
            if part.verbose is not None and part.verbose.tokens is not None:
                merged.all_token_ids = list(part.verbose.tokens)
            if len(merged.text) > TEXT_CHARS_PER_TOKEN * max(max_tokens, 1):
                raise self._malformed(
                    url,
                    request,
                    f"{len(merged.text)} characters of text for at most {max_tokens} tokens (max_tokens); "
                    f"at most {TEXT_CHARS_PER_TOKEN} per token are taken",
                )
        if has_logprobs:
            merged.tokens = [str(t) for t in lists["tokens"]]
            n = len(merged.tokens)
            for name in ("token_logprobs", "top_logprobs"):
                if name in present and len(lists[name]) != n:
                    raise self._malformed(url, request, f"{len(lists[name])} {name} for {n} tokens; each token needs one")
            merged.token_logprobs = lists["token_logprobs"] if "token_logprobs" in present else None
            merged.top_logprobs = [None if t is None else dict(t) for t in lists["top_logprobs"]] if "top_logprobs" in present else None
            if n > max_tokens:
                raise self._malformed(url, request, f"{n} tokens for max_tokens {max_tokens}")
            prefixed = [t.startswith(TOKEN_ID_PREFIX) for t in merged.tokens]
            if any(prefixed) and not all(parse_token_id(t) is not None for t in merged.tokens):
                bad = next(t for t in merged.tokens if parse_token_id(t) is None)
                raise self._malformed(url, request, f"token {bad[:40]!r} among {TOKEN_ID_PREFIX}N tokens is not a token id")
        if merged.all_token_ids is not None and len(merged.all_token_ids) > max_tokens:
            raise self._malformed(url, request, f"{len(merged.all_token_ids)} __verbose.tokens for max_tokens {max_tokens}")
        if token_ids is not None:
            if len(token_ids) > max_tokens:
                raise self._malformed(url, request, f"{len(token_ids)} token_ids for max_tokens {max_tokens}")
            if merged.tokens is not None and len(token_ids) != len(merged.tokens):
                raise self._malformed(url, request, f"{len(token_ids)} token_ids for {len(merged.tokens)} logprobs tokens")
        merged.token_ids = token_ids
        return merged


def _server_prompt_s(chunks: list[dict]) -> float | None:
    """An unstreamed answer's time to first token as the server states it (llama-server's
    `timings.prompt_ms`: it samples the first token from the prompt's last logits), else None."""
    for chunk in chunks:
        timings = chunk.get("timings")
        value = timings.get("prompt_ms") if isinstance(timings, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            return float(value) / 1000.0
    return None


def _lines(pieces: Iterable[bytes]) -> Any:
    """Text lines of a byte stream (\\n or \\r\\n), decoded as UTF-8 with bad bytes replaced."""
    buffer = b""
    for piece in pieces:
        buffer += piece
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8", "replace")


# ----------------------------------------------------------------------------- token ids and logprobs
def parse_token_id(token: str) -> int | None:
    """123 from vLLM's "token_id:123"; None for a plain text token."""
    if isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX):
        digits = token[len(TOKEN_ID_PREFIX) :]
        if digits.isdigit():
            return int(digits)
    return None


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
    if spec.grammar:  # vLLM's structured outputs (v0.12 on): a JSON schema as `json`, GBNF as `grammar`
        is_schema = grammar_format(spec.grammar) == "json_schema"
        body["structured_outputs"] = {"json": json.loads(spec.grammar)} if is_schema else {"grammar": spec.grammar}
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
    "Completion",
    "Endpoint",
    "cached_prompt_tokens",
    "out_of_vocabulary",
    "output_tokens",
    "parse_token_id",
    "request_body",
]
