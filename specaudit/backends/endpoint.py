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
"""

from __future__ import annotations

import json
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from specaudit._validation import SETTINGS_CONFIG, input_error
from specaudit.backends._deadline import deadline_transport, total_deadline
from specaudit.backends._responses import (
    ANSWER_BYTES_BASE,
    ANSWER_BYTES_PER_TOKEN,
    TEXT_CHARS_PER_TOKEN,
    CompletionPart,
    ModelList,
    problem,
)
from specaudit.errors import InputError

RECORD_ENGINES = ("vanilla", "speculative")
LOGPROBS_MODES = ("processed", "raw")
# vLLM writes -inf logprobs as -9999.0 in its JSON: at or below it a token has zero probability.
ZERO_LOGPROB = -9999.0
TOKEN_ID_PREFIX = "token_id:"
METRICS_PAGE_BYTES = 16 << 20  # a Prometheus page with many label sets is larger than any completion
SPEC_DECODE_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")
PER_POSITION_COUNTER = "vllm:spec_decode_num_accepted_tokens_per_pos"


class EndpointSettings(BaseModel):
    """The `endpoint:` section of a run config (`--engines endpoint`), shared by YAML and the API."""

    model_config = SETTINGS_CONFIG

    speculative_url: str | None = None  # base URL of the server with speculative decoding on
    vanilla_url: str | None = None  # ... and off
    model: str | None = None  # default of both model names below
    speculative_model: str | None = None
    vanilla_model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None  # name of an environment variable holding the key
    concurrency: int = Field(4, ge=1, strict=True)
    timeout_s: float = Field(600.0, gt=0, strict=True)
    metrics_url: str | None = None
    logprobs: int = Field(20, ge=0, strict=True)
    logprobs_mode: str = "processed"
    tokenizer: str | None = None
    stream: bool = Field(True, strict=True)
    extra_body: dict = Field(default_factory=dict)
    # token_ids, or text: the prompt ids decoded with special tokens kept, for servers whose
    # completions API takes text only (llama-cpp-python's server; it tokenises special tokens).
    prompt_as: Literal["token_ids", "text"] = "token_ids"

    @model_validator(mode="after")
    def _rules(self) -> EndpointSettings:
        for name, role in (("speculative_url", "with speculative decoding on"), ("vanilla_url", "with speculative decoding off")):
            if not getattr(self, name):
                raise InputError(f"endpoint.{name} is missing; give the base URL of the server {role}, e.g. http://127.0.0.1:8000/v1")
            setattr(self, name, _url(getattr(self, name), name))
        if self.metrics_url is not None:
            self.metrics_url = _url(self.metrics_url, "metrics_url")
        self.speculative_model = self.speculative_model or self.model
        self.vanilla_model = self.vanilla_model or self.model
        if self.api_key is not None and self.api_key_env is not None:
            raise InputError("endpoint: give either api_key or api_key_env (the name of an environment variable holding the key), not both")
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise InputError(f"endpoint.logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}, got {self.logprobs_mode!r}")
        return self


DEFAULTS: dict[str, Any] = {name: info.get_default(call_default_factory=True) for name, info in EndpointSettings.model_fields.items()}
# Settings that decide what the records mean: a resumed run must keep them.
_IDENTITY = (
    "speculative_url",
    "vanilla_url",
    "speculative_model",
    "vanilla_model",
    "logprobs",
    "logprobs_mode",
    "tokenizer",
    "extra_body",
    "prompt_as",
)


# ----------------------------------------------------------------------------- settings
def _url(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise InputError(f"endpoint.{name} {value!r} is not an http(s) URL; write the server's base URL such as http://127.0.0.1:8000/v1")
    return value.rstrip("/")


def validate_settings(settings: dict | None, engines: tuple[str, ...]) -> dict:
    """The `endpoint:` section of a run config, checked and completed with defaults (idempotent)."""
    if tuple(engines) != ("endpoint",):
        raise InputError(
            f"the config has an endpoint section but --engines is {','.join(engines)}; write --engines endpoint to audit a live server"
        )
    if settings is None:
        raise InputError(
            "--engines endpoint needs an `endpoint:` section in the config file with speculative_url and vanilla_url "
            "(see README, Auditing a live endpoint)"
        )
    if not isinstance(settings, dict):
        raise InputError(f"endpoint: must be a mapping of setting: value ({', '.join(DEFAULTS)}), got {type(settings).__name__}")
    settings = {str(key).replace("-", "_"): value for key, value in settings.items()}
    try:
        return EndpointSettings(**settings).model_dump()
    except ValidationError as err:
        raise input_error(
            err,
            EndpointSettings,
            lambda field: f"endpoint.{field}",
            lambda names: f"endpoint: unknown setting(s) {', '.join(names)}; known: {', '.join(DEFAULTS)}",
        ) from None


def public_settings(settings: dict) -> dict:
    """The settings as written into manifest.json: an API key never is."""
    return {**settings, "api_key": "<redacted>" if settings.get("api_key") else None}


def settings_identity(settings: dict) -> dict:
    return {name: settings.get(name) for name in _IDENTITY}


def api_key_of(settings: dict) -> str | None:
    if settings.get("api_key_env"):
        key = os.environ.get(settings["api_key_env"])
        if not key:
            raise InputError(f"endpoint.api_key_env names {settings['api_key_env']!r} but that environment variable is not set")
        return key
    return settings.get("api_key")


# ----------------------------------------------------------------------------- HTTP
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
    wall_s: float = 0.0
    ttft_s: float | None = None
    usage: dict = field(default_factory=dict)


class _DeadlinePassed(Exception):
    """The request's total deadline passed between two pieces of its answer."""


class Endpoint:
    """One OpenAI-compatible server: an httpx client keeping connections alive between requests
    (one pool per server, shared by the worker threads). Each request has a total deadline of
    `timeout_s` from its start, checked at every piece of the answer (connect and each read are
    bounded by it as well), at most MAX_REDIRECTS redirects, and a size bound; every answer is
    validated against the response models of specaudit.backends._responses."""

    MAX_REDIRECTS = 5

    def __init__(self, base_url: str, *, setting: str, api_key: str | None = None, timeout_s: float = 600.0):
        import httpx

        self.base_url = base_url
        self.setting = setting  # which config setting named it, for error messages
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

    def __exit__(self, *exc) -> None:
        self.close()

    def _where(self, url: str, request: str) -> str:
        return f"endpoint {self.setting} {url}" + (f" ({request})" if request else "")

    @contextmanager
    def _request(self, url: str, body: dict | None = None, *, stage: str = "did not answer", request: str = ""):
        """The open response of one request; every transport failure becomes one InputError
        sentence naming the setting, URL and request (`stage` says how far the answer got)."""
        import httpx

        method = "POST" if body is not None else "GET"
        where = self._where(url, request)
        try:
            with total_deadline(self.timeout_s), self._client.stream(method, url, json=body) as response:
                if response.status_code >= 400:
                    message = _error_message(response.read()[:65536] or b"")
                    raise InputError(
                        f"{where} answered HTTP {response.status_code} "
                        f"({message or response.reason_phrase}); check the server log and the endpoint settings"
                    )
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

    def _pieces(self, response, url: str, request: str, deadline: float, limit: int):
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

    def _read(self, response, url: str, request: str = "", limit: int = ANSWER_BYTES_BASE) -> bytes:
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
            raise InputError(
                f"endpoint {self.setting} {url} did not list models (no `data` array); is it the OpenAI-compatible /v1 base URL?"
            )
        try:
            listed = ModelList.model_validate(payload)
        except ValidationError as err:
            raise InputError(f"endpoint {self.setting} {url} listed models malformed ({problem(err)}); check the server") from None
        return [entry.id for entry in listed.data]

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
        completion.ttft_s = None if first is None else first - start
        return completion

    def _read_stream(self, pieces, url: str, request: str) -> tuple[list[dict], float | None]:
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
            if first is None and (choice.get("text") or (isinstance(logprobs, dict) and logprobs.get("tokens"))):
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
        if token_ids is not None:
            if len(token_ids) > max_tokens:
                raise self._malformed(url, request, f"{len(token_ids)} token_ids for max_tokens {max_tokens}")
            if merged.tokens is not None and len(token_ids) != len(merged.tokens):
                raise self._malformed(url, request, f"{len(token_ids)} token_ids for {len(merged.tokens)} logprobs tokens")
        merged.token_ids = token_ids
        return merged


def _lines(pieces) -> Any:
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
    found = []
    for position, token in enumerate(ids):
        entry = logprobs[position] if logprobs is not None and position < len(logprobs) else None
        ranked = [int(i) for i, _ in (entry or {}).get("top") or [] if not 0 <= int(i) < vocab_size]
        if 0 <= token < vocab_size and not ranked:
            continue
        where = f"token id {token}" if not 0 <= token < vocab_size else f"top-N id {ranked[0]}"
        found.append({"position": position, "problem": f"the server returned {where}, outside the vocabulary [0, {vocab_size})"})
        if entry is not None:
            entry["token_logprob"] = None
    return found


FINISH_REASONS = {"stop": "eos", "eos": "eos", "eos_token": "eos", "length": "length", "max_tokens": "length"}


# ----------------------------------------------------------------------------- server metrics
def parse_metrics(text: str) -> dict:
    """Speculative-decoding counters of a Prometheus text page (prometheus_client's parser),
    summed over label sets: the three totals (with or without the `_total` suffix
    prometheus_client adds) and accepted tokens per draft position."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    try:
        samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except (ValueError, TypeError, IndexError) as err:
        raise InputError(f"endpoint metrics_url did not return Prometheus text ({err}); point it at the server's /metrics") from None
    for sample in samples:
        base = sample.name.removesuffix("_total")
        if base == PER_POSITION_COUNTER:
            position = str(sample.labels.get("position", ""))
            if position.isdigit():
                per_position[int(position)] = per_position.get(int(position), 0.0) + sample.value
        elif base in SPEC_DECODE_COUNTERS:
            totals[base] = totals.get(base, 0.0) + sample.value
    if per_position:
        totals["per_position"] = [per_position.get(i, 0.0) for i in range(max(per_position) + 1)]
    return totals


def metrics_summary(before: dict, after: dict, previous: dict | None = None) -> dict:
    """Counter deltas over this invocation, added to those of earlier invocations of the run."""
    counters = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in SPEC_DECODE_COUNTERS if name in after}
    width = max(len(after.get("per_position", [])), len((previous or {}).get("accepted_per_position") or []))
    after_pos, before_pos = after.get("per_position", []), before.get("per_position", [])
    per_position = [(after_pos[i] if i < len(after_pos) else 0.0) - (before_pos[i] if i < len(before_pos) else 0.0) for i in range(width)]
    if previous:
        for name, value in (previous.get("counters") or {}).items():
            counters[name] = counters.get(name, 0.0) + value
        old = previous.get("accepted_per_position") or []
        per_position = [v + (old[i] if i < len(old) else 0.0) for i, v in enumerate(per_position)]
    drafts = counters.get("vllm:spec_decode_num_drafts", 0.0)
    drafted = counters.get("vllm:spec_decode_num_draft_tokens", 0.0)
    accepted = counters.get("vllm:spec_decode_num_accepted_tokens", 0.0)
    return {
        "counters": counters,
        "accepted_per_position": per_position,
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "per_position_acceptance_rate": [v / drafts for v in per_position] if drafts else [],
        "invocations": (previous or {}).get("invocations", 0) + 1,
    }


# ----------------------------------------------------------------------------- the run
def resolve_model(endpoint: Endpoint, wanted: str | None, setting: str) -> tuple[str, list[str]]:
    served = endpoint.served_models()
    if wanted is not None:
        if served and wanted not in served:
            raise InputError(
                f"endpoint {endpoint.setting} {endpoint.base_url} serves {', '.join(served)}, not {wanted!r}; "
                f"set endpoint.{setting} to one of them"
            )
        return wanted, served
    if len(served) != 1:
        raise InputError(
            f"endpoint {endpoint.setting} {endpoint.base_url} serves {len(served)} models ({', '.join(served) or 'none'}); "
            f"name one with endpoint.{setting}"
        )
    return served[0], served


def request_body(cfg, settings: dict, model: str, prompt_ids: list[int], seed: int, max_tokens: int) -> dict:
    """The /v1/completions request of one plan item. Sampling settings are always sent, so a
    server's own defaults (vLLM applies the model's generation_config) cannot change them."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "top_k": cfg.top_k if cfg.top_k > 0 else -1,  # vLLM / SGLang: -1 = off
        "seed": seed,
        "return_tokens_as_token_ids": True,
    }
    if settings["logprobs"]:
        body["logprobs"] = settings["logprobs"]
    if settings["stream"]:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(settings["extra_body"])
    return {key: value for key, value in body.items() if value is not None}  # extra_body may drop a field with null


__all__ = [
    "DEFAULTS",
    "Completion",
    "Endpoint",
    "metrics_summary",
    "out_of_vocabulary",
    "output_tokens",
    "parse_metrics",
    "parse_token_id",
    "public_settings",
    "request_body",
    "settings_identity",
    "validate_settings",
]
