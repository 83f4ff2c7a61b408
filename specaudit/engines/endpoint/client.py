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
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from specaudit.engines.request_acceptance import RequestAcceptance, request_acceptance
from specaudit.errors import InputError

# vLLM writes -inf logprobs as -9999.0 in its JSON: at or below it a token has zero probability.
ZERO_LOGPROB = -9999.0
TOKEN_ID_PREFIX = "token_id:"


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
    # The server's own per-request acceptance (llama-server timings, vLLM metrics, SGLang meta_info), if it reports one.
    acceptance: RequestAcceptance | None = None


class Endpoint:
    """One OpenAI-compatible server: an httpx client with the run's timeout, keeping connections
    alive between requests (one pool per server, shared by the worker threads)."""

    def __init__(self, base_url: str, *, setting: str, api_key: str | None = None, timeout_s: float = 600.0):
        import httpx

        self.base_url = base_url
        self.setting = setting  # which config setting named it, for error messages
        self.api_key = api_key
        self.timeout_s = timeout_s
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(timeout=timeout_s, headers=headers, follow_redirects=True)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _request(self, url: str, body: dict | None = None, *, stage: str = "did not answer"):
        """The open response of one request; every transport failure becomes one InputError
        sentence naming the setting and URL (`stage` says how far the answer got)."""
        import httpx

        method = "POST" if body is not None else "GET"
        try:
            with self._client.stream(method, url, json=body) as response:
                if response.status_code >= 400:
                    message = _error_message(response.read() or b"")
                    raise InputError(
                        f"endpoint {self.setting} {url} answered HTTP {response.status_code} "
                        f"({message or response.reason_phrase}); check the server log and the endpoint settings"
                    )
                yield response
        except httpx.TimeoutException:
            raise InputError(
                f"endpoint {self.setting} {url} {stage} within {self.timeout_s:g} s; check the server or raise endpoint.timeout_s"
            ) from None
        except httpx.ConnectError as err:
            raise InputError(f"endpoint {self.setting} {url} did not answer ({err}); start the server or fix the URL") from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as err:
            raise InputError(f"endpoint {self.setting} {url} is not a usable URL ({err}); fix the endpoint settings") from None
        except httpx.TransportError as err:
            raise InputError(
                f"endpoint {self.setting} {url} dropped the connection ({err or type(err).__name__}); check the server log"
            ) from None

    def _json(self, raw: bytes | str, url: str) -> dict:
        try:
            payload = json.loads(raw)
        except ValueError:
            raise InputError(f"endpoint {self.setting} {url} did not return JSON; is it the OpenAI-compatible /v1 base URL?") from None
        if not isinstance(payload, dict):
            raise InputError(
                f"endpoint {self.setting} {url} returned {type(payload).__name__} JSON, not an object; "
                "is it the OpenAI-compatible /v1 base URL?"
            )
        return payload

    def get_text(self, url: str) -> str:
        with self._request(url, stage="stopped answering") as response:
            return response.read().decode("utf-8", "replace")

    def served_models(self) -> list[str]:
        url = f"{self.base_url}/models"
        with self._request(url, stage="stopped answering") as response:
            payload = self._json(response.read(), url)
        data = payload.get("data")
        if not isinstance(data, list):
            raise InputError(
                f"endpoint {self.setting} {url} did not list models (no `data` array); is it the OpenAI-compatible /v1 base URL?"
            )
        return [str(entry.get("id")) for entry in data if isinstance(entry, dict) and entry.get("id") is not None]

    def complete(self, body: dict) -> Completion:
        url = f"{self.base_url}/completions"
        start = time.perf_counter()
        first = None
        with self._request(url, body, stage="stopped streaming" if body.get("stream") else "stopped answering") as response:
            if body.get("stream"):
                chunks, first = self._read_stream(response, url)
            else:
                chunks = [self._json(response.read(), url)]
        wall = time.perf_counter() - start
        completion = self._merge(chunks, url)
        completion.wall_s = wall
        completion.ttft_s = None if first is None else first - start
        return completion

    def _read_stream(self, response, url: str) -> tuple[list[dict], float | None]:
        """Server-sent events (httpx splits the lines): `data: {chunk}` until `data: [DONE]`; the
        time of the first chunk that carries output is the time to first token."""
        chunks, first = [], None
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue  # comments, event names, keep-alive blank lines
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                break
            chunk = self._json(data, url)
            choice = (chunk.get("choices") or [{}])[0]
            if first is None and (choice.get("text") or (choice.get("logprobs") or {}).get("tokens")):
                first = time.perf_counter()
            chunks.append(chunk)
        return chunks, first

    def _merge(self, chunks: list[dict], url: str) -> Completion:
        """One Completion from a response (or the chunks of a stream, concatenated in order)."""
        merged = Completion(text="", finish_reason=None)
        lists: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
        has_logprobs, token_ids = False, None
        for chunk in chunks:
            if "error" in chunk:
                raise InputError(
                    f"endpoint {self.setting} {url} reported an error mid-answer ({_error_message(json.dumps(chunk).encode())}); "
                    "check the server log"
                )
            merged.acceptance = request_acceptance(chunk) or merged.acceptance  # a stream reports it on its last chunk
            choices = chunk.get("choices")
            if chunk.get("usage"):
                merged.usage = chunk["usage"]
            if not isinstance(choices, list):
                if chunk.get("usage"):
                    continue  # the stream's final usage chunk has no choices
                raise InputError(
                    f"endpoint {self.setting} {url} answered without `choices`; is it an OpenAI-compatible completions server?"
                )
            if not choices:
                continue
            choice = choices[0]
            merged.text += choice.get("text") or ""
            merged.finish_reason = choice.get("finish_reason") or merged.finish_reason
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict):
                has_logprobs = True
                for name in lists:
                    lists[name].extend(logprobs.get(name) or [])
            if isinstance(choice.get("token_ids"), list):
                token_ids = (token_ids or []) + [int(t) for t in choice["token_ids"]]
        if has_logprobs:
            merged.tokens = [str(t) for t in lists["tokens"]]
            n = len(merged.tokens)
            merged.token_logprobs = lists["token_logprobs"] if len(lists["token_logprobs"]) == n else None
            merged.top_logprobs = lists["top_logprobs"] if len(lists["top_logprobs"]) == n else None
        merged.token_ids = token_ids
        return merged


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


FINISH_REASONS = {"stop": "eos", "eos": "eos", "eos_token": "eos", "length": "length", "max_tokens": "length"}


# ----------------------------------------------------------------------------- server metrics
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
    "Completion",
    "Endpoint",
    "output_tokens",
    "parse_token_id",
    "request_body",
]
