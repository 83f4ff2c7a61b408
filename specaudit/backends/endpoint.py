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
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import CancelledError, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specaudit.errors import InputError

RECORD_ENGINES = ("vanilla", "speculative")
LOGPROBS_MODES = ("processed", "raw")
# vLLM writes -inf logprobs as -9999.0 in its JSON: at or below it a token has zero probability.
ZERO_LOGPROB = -9999.0
TOKEN_ID_PREFIX = "token_id:"
SPEC_DECODE_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")
PER_POSITION_COUNTER = "vllm:spec_decode_num_accepted_tokens_per_pos"

DEFAULTS: dict[str, Any] = {
    "speculative_url": None,
    "vanilla_url": None,
    "model": None,
    "speculative_model": None,
    "vanilla_model": None,
    "api_key": None,
    "api_key_env": None,
    "concurrency": 4,
    "timeout_s": 600.0,
    "metrics_url": None,
    "logprobs": 20,
    "logprobs_mode": "processed",
    "tokenizer": None,
    "stream": True,
    "extra_body": {},
    # token_ids, or text: the prompt ids decoded with special tokens kept, for servers whose
    # completions API takes text only (llama-cpp-python's server; it tokenises special tokens).
    "prompt_as": "token_ids",
}
PROMPT_FORMS = ("token_ids", "text")
# Settings that decide what the records mean: a resumed run must keep them.
_IDENTITY = ("speculative_url", "vanilla_url", "speculative_model", "vanilla_model", "logprobs", "logprobs_mode", "tokenizer", "extra_body", "prompt_as")


# ----------------------------------------------------------------------------- settings
def _url(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise InputError(f"endpoint.{name} {value!r} is not an http(s) URL; write the server's base URL such as http://127.0.0.1:8000/v1")
    return value.rstrip("/")


def validate_settings(settings: dict | None, engines: tuple[str, ...]) -> dict:
    """The `endpoint:` section of a run config, checked and completed with defaults (idempotent)."""
    if tuple(engines) != ("endpoint",):
        raise InputError(f"the config has an endpoint section but --engines is {','.join(engines)}; write --engines endpoint to audit a live server")
    if settings is None:
        raise InputError("--engines endpoint needs an `endpoint:` section in the config file with speculative_url and vanilla_url "
                         "(see README, Auditing a live endpoint)")
    if not isinstance(settings, dict):
        raise InputError(f"endpoint: must be a mapping of setting: value ({', '.join(DEFAULTS)}), got {type(settings).__name__}")
    settings = {str(key).replace("-", "_"): value for key, value in settings.items()}
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise InputError(f"endpoint: unknown setting(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    out = {**DEFAULTS, **settings}
    for name, role in (("speculative_url", "with speculative decoding on"), ("vanilla_url", "with speculative decoding off")):
        if not out[name]:
            raise InputError(f"endpoint.{name} is missing; give the base URL of the server {role}, e.g. http://127.0.0.1:8000/v1")
        out[name] = _url(out[name], name)
    if out["metrics_url"] is not None:
        out["metrics_url"] = _url(out["metrics_url"], "metrics_url")
    for role in RECORD_ENGINES:  # `model` is the default of both sides
        name = f"{role}_model"
        out[name] = out[name] or out["model"]
        if out[name] is not None and not isinstance(out[name], str):
            raise InputError(f"endpoint.{name} must be a model name (string), got {out[name]!r}")
    if out["api_key"] is not None and out["api_key_env"] is not None:
        raise InputError("endpoint: give either api_key or api_key_env (the name of an environment variable holding the key), not both")
    if out["api_key_env"] is not None and not isinstance(out["api_key_env"], str):
        raise InputError(f"endpoint.api_key_env must be an environment variable name, got {out['api_key_env']!r}")
    for name, low in (("concurrency", 1), ("logprobs", 0)):
        if isinstance(out[name], bool) or not isinstance(out[name], int) or out[name] < low:
            raise InputError(f"endpoint.{name} must be an integer >= {low}, got {out[name]!r}")
    timeout = out["timeout_s"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InputError(f"endpoint.timeout_s must be a number of seconds > 0, got {timeout!r}")
    out["timeout_s"] = float(timeout)
    if out["logprobs_mode"] not in LOGPROBS_MODES:
        raise InputError(f"endpoint.logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}, got {out['logprobs_mode']!r}")
    if not isinstance(out["stream"], bool):
        raise InputError(f"endpoint.stream must be true or false, got {out['stream']!r}")
    if out["prompt_as"] not in PROMPT_FORMS:
        raise InputError(f"endpoint.prompt_as must be one of {', '.join(PROMPT_FORMS)}, got {out['prompt_as']!r}")
    if not isinstance(out["extra_body"], dict):
        raise InputError(f"endpoint.extra_body must be a mapping of request field: value, got {out['extra_body']!r}")
    return out


def public_settings(settings: dict) -> dict:
    """The settings as written into manifest.json: an API key never is."""
    return {**settings, "api_key": "<redacted>" if settings.get("api_key") else None}


def settings_identity(settings: dict) -> dict:
    return {name: settings.get(name) for name in _IDENTITY}


def _api_key(settings: dict) -> str | None:
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


class Endpoint:
    """One OpenAI-compatible server (standard library HTTP; one connection per request, so
    worker threads share nothing)."""

    def __init__(self, base_url: str, *, setting: str, api_key: str | None = None, timeout_s: float = 600.0):
        self.base_url = base_url
        self.setting = setting  # which config setting named it, for error messages
        self.api_key = api_key
        self.timeout_s = timeout_s

    def _open(self, url: str, body: dict | None = None):
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as err:
            message = _error_message(err.read() or b"")
            raise InputError(f"endpoint {self.setting} {url} answered HTTP {err.code} ({message or err.reason}); "
                             "check the server log and the endpoint settings") from None
        except urllib.error.URLError as err:
            reason = err.reason
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise InputError(f"endpoint {self.setting} {url} did not answer within {self.timeout_s:g} s; "
                                 "check the server or raise endpoint.timeout_s") from None
            raise InputError(f"endpoint {self.setting} {url} did not answer ({reason}); start the server or fix the URL") from None
        except (socket.timeout, TimeoutError):
            raise InputError(f"endpoint {self.setting} {url} did not answer within {self.timeout_s:g} s; "
                             "check the server or raise endpoint.timeout_s") from None
        except (ConnectionError, OSError) as err:
            raise InputError(f"endpoint {self.setting} {url} did not answer ({err}); start the server or fix the URL") from None

    def _read(self, response, url: str) -> bytes:
        try:
            with response:
                return response.read()
        except (socket.timeout, TimeoutError):
            raise InputError(f"endpoint {self.setting} {url} stopped answering within {self.timeout_s:g} s; "
                             "check the server or raise endpoint.timeout_s") from None
        except (ConnectionError, OSError) as err:
            raise InputError(f"endpoint {self.setting} {url} dropped the connection ({err}); check the server log") from None

    def _json(self, raw: bytes, url: str) -> dict:
        try:
            payload = json.loads(raw)
        except ValueError:
            raise InputError(f"endpoint {self.setting} {url} did not return JSON; is it the OpenAI-compatible /v1 base URL?") from None
        if not isinstance(payload, dict):
            raise InputError(f"endpoint {self.setting} {url} returned {type(payload).__name__} JSON, not an object; "
                             "is it the OpenAI-compatible /v1 base URL?")
        return payload

    def get_text(self, url: str) -> str:
        return self._read(self._open(url), url).decode("utf-8", "replace")

    def served_models(self) -> list[str]:
        url = f"{self.base_url}/models"
        payload = self._json(self._read(self._open(url), url), url)
        data = payload.get("data")
        if not isinstance(data, list):
            raise InputError(f"endpoint {self.setting} {url} did not list models (no `data` array); is it the OpenAI-compatible /v1 base URL?")
        return [str(entry.get("id")) for entry in data if isinstance(entry, dict) and entry.get("id") is not None]

    def complete(self, body: dict) -> Completion:
        url = f"{self.base_url}/completions"
        start = time.perf_counter()
        response = self._open(url, body)
        if body.get("stream"):
            chunks, first = self._read_stream(response, url, start)
        else:
            chunks, first = [self._json(self._read(response, url), url)], None
        wall = time.perf_counter() - start
        completion = self._merge(chunks, url)
        completion.wall_s = wall
        completion.ttft_s = None if first is None else first - start
        return completion

    def _read_stream(self, response, url: str, start: float) -> tuple[list[dict], float | None]:
        """Server-sent events: `data: {chunk}` lines until `data: [DONE]`; the time of the first
        chunk that carries output is the time to first token."""
        chunks, first = [], None
        try:
            with response:
                for raw in response:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:"):].strip()
                    if data == "[DONE]":
                        break
                    chunk = self._json(data.encode("utf-8"), url)
                    choice = (chunk.get("choices") or [{}])[0]
                    if first is None and (choice.get("text") or (choice.get("logprobs") or {}).get("tokens")):
                        first = time.perf_counter()
                    chunks.append(chunk)
        except (socket.timeout, TimeoutError):
            raise InputError(f"endpoint {self.setting} {url} stopped streaming within {self.timeout_s:g} s; "
                             "check the server or raise endpoint.timeout_s") from None
        except (ConnectionError, OSError) as err:
            raise InputError(f"endpoint {self.setting} {url} dropped the stream ({err}); check the server log") from None
        return chunks, first

    def _merge(self, chunks: list[dict], url: str) -> Completion:
        """One Completion from a response (or the chunks of a stream, concatenated in order)."""
        merged = Completion(text="", finish_reason=None)
        lists: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
        has_logprobs, token_ids = False, None
        for chunk in chunks:
            if "error" in chunk:
                raise InputError(f"endpoint {self.setting} {url} reported an error mid-answer ({_error_message(json.dumps(chunk).encode())}); "
                                 "check the server log")
            choices = chunk.get("choices")
            if chunk.get("usage"):
                merged.usage = chunk["usage"]
            if not isinstance(choices, list):
                if chunk.get("usage"):
                    continue  # the stream's final usage chunk has no choices
                raise InputError(f"endpoint {self.setting} {url} answered without `choices`; is it an OpenAI-compatible completions server?")
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
        digits = token[len(TOKEN_ID_PREFIX):]
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


_FINISH = {"stop": "eos", "eos": "eos", "eos_token": "eos", "length": "length", "max_tokens": "length"}


# ----------------------------------------------------------------------------- server metrics
def parse_metrics(text: str) -> dict:
    """Speculative-decoding counters of a Prometheus text page, summed over label sets: the
    three totals (with or without the `_total` suffix prometheus_client adds) and accepted
    tokens per draft position."""
    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name_labels, _, rest = line.rpartition("}") if "}" in line else (None, None, line)
        if name_labels is None:
            name, _, value_text = line.partition(" ")
            labels = ""
        else:
            name, _, labels = name_labels.partition("{")
            value_text = rest
        try:
            value = float(value_text.split()[0])
        except (IndexError, ValueError):
            continue
        base = name.removesuffix("_total")
        if base == PER_POSITION_COUNTER:
            for pair in labels.split(","):
                key, _, raw = pair.partition("=")
                if key.strip() == "position" and raw.strip().strip('"').isdigit():
                    position = int(raw.strip().strip('"'))
                    per_position[position] = per_position.get(position, 0.0) + value
        elif base in SPEC_DECODE_COUNTERS:
            totals[base] = totals.get(base, 0.0) + value
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
def _resolve_model(endpoint: Endpoint, wanted: str | None, setting: str) -> tuple[str, list[str]]:
    served = endpoint.served_models()
    if wanted is not None:
        if served and wanted not in served:
            raise InputError(f"endpoint {endpoint.setting} {endpoint.base_url} serves {', '.join(served)}, not {wanted!r}; "
                             f"set endpoint.{setting} to one of them")
        return wanted, served
    if len(served) != 1:
        raise InputError(f"endpoint {endpoint.setting} {endpoint.base_url} serves {len(served)} models ({', '.join(served) or 'none'}); "
                         f"name one with endpoint.{setting}")
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


def run_backend(cfg, out_dir: str | Path, *, prompt_set=None, progress: bool = True, command: str | None = None,
                shard: tuple[int, int] | None = None):
    """Run the plan against the two servers of `cfg.endpoint` into `out_dir` (resumable)."""
    from tqdm.auto import tqdm

    from specaudit.decoding import Generation
    from specaudit.models import load_tokenizer
    from specaudit.records import MANIFEST_FILE, RECORDS_FILE, RecordWriter, write_json_atomic
    from specaudit.runner import (
        RunSummary,
        derive_seed,
        encode_prompt,
        library_versions,
        pending_items,
        plan_record,
        prepare_run,
        run_manifest,
    )

    started = time.perf_counter()
    out_dir = Path(out_dir)
    settings = cfg.endpoint
    prompt_set, identity, previous = prepare_run(cfg, out_dir, prompt_set, shard)
    api_key = _api_key(settings)
    endpoints = {
        "speculative": Endpoint(settings["speculative_url"], setting="speculative_url", api_key=api_key, timeout_s=settings["timeout_s"]),
        "vanilla": Endpoint(settings["vanilla_url"], setting="vanilla_url", api_key=api_key, timeout_s=settings["timeout_s"]),
    }
    models, served = {}, {}
    for engine, endpoint in endpoints.items():  # also the health check: nothing is written if a server is down
        models[engine], served[engine] = _resolve_model(endpoint, settings[f"{engine}_model"], f"{engine}_model")
    metrics = Endpoint(settings["metrics_url"], setting="metrics_url", api_key=api_key, timeout_s=settings["timeout_s"]) \
        if settings["metrics_url"] else None
    tokenizer_name = settings["tokenizer"] or cfg.target
    tokenizer = load_tokenizer(tokenizer_name)
    encoded = {p.id: encode_prompt(tokenizer, p.text, cfg.chat_template) for p in prompt_set.prompts}

    existing, plan, todo = pending_items(out_dir, prompt_set, cfg, shard, engines=RECORD_ENGINES)
    manifest = run_manifest(
        cfg, identity, prompt_set, previous=previous, command=command, versions=library_versions(),
        models={"tokenizer": {"name": str(tokenizer_name)},
                **{engine: {"url": endpoints[engine].base_url, "model": models[engine], "served": served[engine]} for engine in RECORD_ENGINES}},
        device={"type": "endpoint", "name": f"{settings['speculative_url']} (speculative), {settings['vanilla_url']} (vanilla)",
                "concurrency": settings["concurrency"]},
    )
    notes = dict(previous.get("endpoint") or {})
    notes.update({"logprobs": settings["logprobs"], "logprobs_mode": settings["logprobs_mode"], "stream": settings["stream"]})
    manifest.update(backend="endpoint", endpoint=notes)
    if previous.get("server_metrics"):
        manifest["server_metrics"] = previous["server_metrics"]
    write_json_atomic(out_dir / MANIFEST_FILE, manifest)

    tokenizer_lock = threading.Lock()

    def call(engine: str, prompt_ids: list[int], seed: int, max_tokens: int) -> Completion:
        body = request_body(cfg, settings, models[engine], prompt_ids, seed, max_tokens)
        if settings["prompt_as"] == "text":
            with tokenizer_lock:
                body["prompt"] = tokenizer.decode(prompt_ids, skip_special_tokens=False)
        return endpoints[engine].complete(body)

    def record_of(item) -> dict:
        prompt, engine, label, timing_only = item
        seed = derive_seed(cfg.seed, prompt.id, label)
        prompt_ids = encoded[prompt.id]
        completion = call(engine, prompt_ids, seed, cfg.max_new_tokens)
        finish = _FINISH.get(str(completion.finish_reason))
        if finish is None:
            raise InputError(f"endpoint {endpoints[engine].setting} ended a completion with finish_reason {completion.finish_reason!r}, "
                             "not stop or length; check the server log and re-run to resume")
        ids, logprobs = output_tokens(completion, settings["logprobs"])
        source = "server"
        if ids is None:
            with tokenizer_lock:  # a fast tokenizer must not be called from two threads at once
                ids, source = list(tokenizer(completion.text, add_special_tokens=False)["input_ids"]), "re-tokenised text"
        generation = Generation(tokens=ids, finish_reason=finish, wall_s=completion.wall_s, ttft_s=completion.ttft_s, steps=0,
                                draft_s=None, verify_s=None)
        record = plan_record(cfg, prompt, engine, label, timing_only, seed, prompt_ids, generation, completion.text)
        record.update(backend="endpoint", token_ids_source=source, logprobs_mode=settings["logprobs_mode"], target_logprobs=logprobs)
        return record

    if todo:
        first = encoded[todo[0][0].id]
        for _ in range(cfg.warmup):  # first requests pay for graph capture, caches, connection set-up
            for engine in RECORD_ENGINES:
                call(engine, first, cfg.seed, min(8, cfg.max_new_tokens))
    before = parse_metrics(metrics.get_text(settings["metrics_url"])) if metrics and todo else None

    written, sources, error = 0, set(), None
    finished: dict[int, dict] = {}
    next_index = 0

    def flush(everything: bool = False) -> None:
        """Write finished records in plan order (so the file, and every analysis of it, does not
        depend on which request happened to finish first); `everything` also writes past a gap."""
        nonlocal next_index, written
        for index in sorted(finished):
            if index != next_index and not everything:
                break
            record = finished.pop(index)
            writer.write(record)  # only this thread writes
            sources.add(record["token_ids_source"])
            written += 1
            next_index = index + 1

    # Items are submitted in plan order (engines of one prompt and sample back to back, order
    # alternating), so both sides of each pair run at about the same time and server load.
    with RecordWriter(out_dir / RECORDS_FILE) as writer, tqdm(
        total=len(plan), initial=len(plan) - len(todo), desc="requests", unit="req", disable=not progress, file=sys.stderr
    ) as bar, ThreadPoolExecutor(max_workers=settings["concurrency"]) as pool:
        futures = {pool.submit(record_of, item): index for index, item in enumerate(todo)}
        try:
            for future in as_completed(futures):
                try:
                    finished[futures[future]] = future.result()
                except CancelledError:
                    continue
                except InputError as err:
                    if error is None:  # stop sending; requests already in flight still land in the file
                        error = err
                        for other in futures:
                            other.cancel()
                    continue
                bar.update(1)
                flush()
        except BaseException:  # a bug or Ctrl-C: do not send the queued requests while unwinding
            for other in futures:
                other.cancel()
            raise
        finally:
            flush(everything=True)  # whatever finished is kept, gaps and all: a re-run fills them
    if sources:
        notes["token_ids"] = sorted(sources | set(notes.get("token_ids") or []))
        if "re-tokenised text" in sources:
            notes["token_ids_note"] = ("the server returned token text, not ids (vLLM: return_tokens_as_token_ids); outputs were "
                                       "re-tokenised, which may differ from what was sampled, and carry no logprobs")
        manifest["endpoint"] = notes
    if before is not None:
        try:
            after = parse_metrics(metrics.get_text(settings["metrics_url"]))
        except InputError as err:
            after = None
            manifest["server_metrics"] = {**(manifest.get("server_metrics") or {}), "error": str(err)}
        if after is not None:
            summary = metrics_summary(before, after, previous.get("server_metrics"))
            summary.update(url=settings["metrics_url"], note=(
                "deltas of the server's cumulative counters over the run's requests; other traffic on that server in the meantime "
                "is counted too" if after else f"no {', '.join(SPEC_DECODE_COUNTERS)} counters found at the metrics URL"))
            manifest["server_metrics"] = summary
    write_json_atomic(out_dir / MANIFEST_FILE, manifest)
    if error is not None:
        raise error
    return RunSummary(out_dir, len(existing) + written, written, len(plan) - len(todo), time.perf_counter() - started)


__all__ = [
    "DEFAULTS",
    "Completion",
    "Endpoint",
    "metrics_summary",
    "output_tokens",
    "parse_metrics",
    "parse_token_id",
    "public_settings",
    "request_body",
    "run_backend",
    "settings_identity",
    "validate_settings",
]
