"""The HTTP client of the engines that call servers (endpoint, llama-server): kept-alive pools,
streaming, one total deadline per request, answers validated against the response models of
`_responses`, every failure one sentence naming the server and the request."""

from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from specaudit._validation import typed_as
from specaudit.engines.http._deadline import deadline_transport, total_deadline
from specaudit.engines.http._responses import (
    ANSWER_BYTES_BASE,
    ANSWER_BYTES_PER_TOKEN,
    TEXT_CHARS_PER_TOKEN,
    TOKEN_ID_PREFIX,
    CompletionPart,
    ModelList,
    problem,
)
from specaudit.engines.request_acceptance import RequestAcceptance, request_acceptance
from specaudit.errors import EngineError, InputError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import httpx


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
    validated against the response models of specaudit.engines.http._responses."""

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


def parse_token_id(token: str) -> int | None:
    """123 from vLLM's "token_id:123"; None for a plain text token."""
    if isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX):
        digits = token[len(TOKEN_ID_PREFIX) :]
        if digits.isdigit():
            return int(digits)
    return None
