"""A small OpenAI-compatible server around specaudit's own engines: a test fixture, and a way to
try `--engines endpoint` locally before pointing it at a real deployment.

    python -m specaudit.testing.server --target PATH [--draft PATH --speculative] [--verify module:fn] [--port 8000]

Serves
  POST /v1/completions  prompt (token ids or text), max_tokens, temperature, top_p, top_k, seed,
                        logprobs N, stream, and the request features (docs/request-features.md):
                        presence_penalty, frequency_penalty, logit_bias (string ids), stop, and
                        vLLM's min_p, repetition_penalty and structured_outputs (`json`: a JSON
                        schema, `grammar`: GBNF; needs llguidance). Decodes with the vanilla engine, or
                        with the reference speculative engine (`--speculative`, rejection step
                        `--verify`). Returns choices[0].text, finish_reason ("stop" at end of
                        sequence or at a stop string, whose text is left out; else "length"),
                        usage, and with `logprobs` the vLLM-style fields: tokens as
                        "token_id:N" strings, token_logprobs and top_logprobs (N entries). The
                        logprobs are those of the *processed* target distribution at each position
                        (features, temperature, top-k, top-p, min-p applied exactly as in decoding:
                        specaudit's one `warp`, at each position's prefix), computed by one
                        teacher-forced target pass over the output; i.e.
                        vLLM's `--logprobs-mode processed_logprobs`. Zero probabilities are written
                        as -9999.0 (as vLLM does) and left out of top_logprobs. A speculative
                        server adds the request's own acceptance as vLLM's
                        `--per-request-spec-decode-metrics` does: `metrics.speculative_decoding`
                        (num_draft_tokens, num_accepted_draft_tokens, num_spec_steps,
                        acceptance_histogram, draft_acceptance_rate), on the last chunk when streamed.
                        A prefix cache as vLLM's is modelled: a request whose prompt (and
                        `cache_salt`) an earlier request sent reuses all but its last prompt
                        token, reported as `usage.prompt_tokens_details.cached_tokens`; the
                        tokens do not change (a served mutant's engine may make them change).
  GET /v1/models        the one served model.
  GET /metrics          Prometheus text with vLLM's counter names: vllm:spec_decode_num_drafts,
                        vllm:spec_decode_num_draft_tokens, vllm:spec_decode_num_accepted_tokens,
                        vllm:spec_decode_num_accepted_tokens_per_pos{position}, plus request and
                        token totals.

Concurrent requests are batched (specaudit.testing.batching): up to `max_batch` rows share each
decoding round, each row with its own generator and caches, so a request's tokens do not depend
on what else is in the batch. A `BatchPolicy` decides what rows share across requests; the
self-test's server mutants (specaudit.testing.server_mutants) are policies that get it wrong as
real servers did. Every model call holds one lock (the servers of a process may share a model).
`stream: true` is accepted, but the answer is decoded in full before its first chunk is sent:
this server's time to first token equals its latency.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.errors import InputError
from specaudit.testing.batching import Batcher, BatchPolicy, Row

if TYPE_CHECKING:
    import torch

    from specaudit.decoding import Generation, SamplingSpec, SpeculativeDecoding
    from specaudit.decoding.verify import VerifyFn
    from specaudit.models import ModelPair

ZERO_LOGPROB = -9999.0
PREFIX_CACHE_ENTRIES = 256  # prompts the modelled prefix cache holds, least recently used evicted
_DEFAULT_LOCK = threading.Lock()  # shared by all servers of a process: they may share one model


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _number(body: dict, name: str, default: Any, kind: type, low: float | None = None) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise _BadRequest(f"`{name}` must be a {kind.__name__}, got {value!r}")
    value = kind(value)
    if low is not None and value < low:
        raise _BadRequest(f"`{name}` must be >= {low}, got {value!r}")
    return value


# The request features a completion request may carry (docs/request-features.md): OpenAI's
# fields and vLLM's / SGLang's extensions, as the endpoint engine sends them.
_FEATURES = ("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")


def _sampling(body: dict) -> SamplingSpec:
    """The request's sampling: temperature, top-k (-1 or 0: off), top-p and its request features,
    processed by specaudit's one `warp` as every engine does."""
    from specaudit.decoding import SamplingSpec
    from specaudit.decoding._grammar_source import compile_grammar

    values: dict[str, Any] = {
        "temperature": _number(body, "temperature", 1.0, float),
        "top_k": max(_number(body, "top_k", 0, int), 0),
        "top_p": _number(body, "top_p", 1.0, float),
    }
    values |= {name: _number(body, name, None, float) for name in _FEATURES if body.get(name) is not None}
    bias = body.get("logit_bias")
    if bias is not None:
        if not isinstance(bias, dict) or not all(isinstance(key, str) and key.isdigit() for key in bias):
            raise _BadRequest("`logit_bias` must map token ids (as strings) to numbers")
        values["logit_bias"] = tuple((int(token), _number(bias, token, 0.0, float)) for token in bias)
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise _BadRequest("`stop` must be a string or a list of strings")
        values["stop"] = tuple(stops)
    structured = body.get("structured_outputs")
    if structured is not None:  # vLLM's: a JSON schema as `json`, a GBNF grammar as `grammar`
        if not isinstance(structured, dict) or set(structured) - {"json", "grammar"} or len(structured) != 1:
            raise _BadRequest("`structured_outputs` must hold one of `json` (a JSON schema) or `grammar` (GBNF)")
        grammar = structured.get("grammar", structured.get("json"))
        values["grammar"] = grammar if isinstance(grammar, str) else json.dumps(grammar)
        try:
            compile_grammar(values["grammar"])
        except InputError as err:
            raise _BadRequest(f"`structured_outputs`: {err}") from None
    try:
        return SamplingSpec(**values)
    except InputError as err:
        raise _BadRequest(str(err)) from None


class ReferenceServer:
    """An OpenAI-compatible completions server for one ModelPair (see the module docstring).

    `speculative=True` decodes with the reference speculative engine and `verify` (default: the
    correct rejection step); otherwise with the vanilla engine. Use as a context manager, or
    `start()` (a background thread) and `close()`.
    """

    def __init__(
        self,
        pair: ModelPair,
        *,
        speculative: bool = False,
        verify: VerifyFn | None = None,
        k: int = 4,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        lock: threading.Lock | None = None,
        max_batch: int = 8,
        policy: BatchPolicy | None = None,
        decoding: type[SpeculativeDecoding] | None = None,
    ) -> None:
        from specaudit.decoding import SpeculativeDecoding, reference_verify
        from specaudit.engines.decode import eos_token_ids

        if speculative and pair.draft is None:
            raise InputError("the reference server needs --draft to serve with --speculative")
        from specaudit.models import remember_tokenizer

        remember_tokenizer(pair.tokenizer)  # the server decodes with its pair: a grammar is matched on its tokens
        self.pair = pair
        self.speculative = speculative
        self.verify = verify or reference_verify
        self.decoding = decoding or SpeculativeDecoding  # a served mutant's subclass gets the processing wrong
        self.k = k
        self.model_name = model_name or Path(str(pair.target_name)).name
        self.eos_ids = eos_token_ids(pair)
        self.lock = lock or _DEFAULT_LOCK
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "requests": 0, "prompt_tokens": 0, "generation_tokens": 0}
        self.accepted_per_position = [0] * k
        self._counter_lock = threading.Lock()
        self._prefix_cache: OrderedDict[tuple, None] = OrderedDict()  # (salt, prompt ids) seen, least recent first
        self.batcher = Batcher(k=k, max_batch=max_batch, lock=self.lock, policy=policy, name="specaudit-batcher")
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.app = self
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ addresses
    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL of the OpenAI API (what endpoint.speculative_url / vanilla_url take)."""
        return f"http://{self.httpd.server_address[0]}:{self.port}/v1"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.httpd.server_address[0]}:{self.port}/metrics"

    # ------------------------------------------------------------------ life cycle
    def start(self) -> ReferenceServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=f"specaudit-server-{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self.batcher.close()

    def __enter__(self) -> ReferenceServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the API
    def models(self) -> dict:
        from specaudit.execution.preflight import context_length

        entry = {"id": self.model_name, "object": "model", "owned_by": "specaudit"}
        if context_length(self.pair.target) is not None:
            entry["max_model_len"] = context_length(self.pair.target)  # as vLLM advertises it
        return {"object": "list", "data": [entry]}

    def _prompt_ids(self, body: dict) -> list[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            ids = list(self.pair.tokenizer(prompt)["input_ids"])
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
        else:
            raise _BadRequest("`prompt` must be a non-empty string or list of token ids (one prompt per request)")
        if not ids or min(ids) < 0 or max(ids) >= self.pair.vocab_size:
            raise _BadRequest(f"prompt token ids must lie in [0, {self.pair.vocab_size})")
        return ids

    def complete(self, body: dict) -> dict:
        """The /v1/completions answer (non-streaming form) for a request body."""
        import torch

        from specaudit.decoding import VanillaDecoding, warp
        from specaudit.decoding.stops import cut_at_stop
        from specaudit.decoding.warping import Prefix

        if body.get("model") not in (None, self.model_name):
            raise _BadRequest(f"The model `{body.get('model')}` does not exist; this server serves `{self.model_name}`", 404)
        prompt_ids = self._prompt_ids(body)
        max_tokens = _number(body, "max_tokens", 16, int, 1)
        spec = _sampling(body)
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _BadRequest(f"`seed` must be an integer, got {seed!r}")
        n_logprobs = _number(body, "logprobs", 0, int, 0)
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise _BadRequest("`cache_salt` must be a non-empty string")
        cached = self._cached_tokens(prompt_ids, salt)
        pair, policy = self.pair, self.batcher.policy
        generator = torch.Generator(device=pair.device)
        seed = policy.request_seed(seed)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed % (1 << 64))
        common = dict(spec=spec, max_new_tokens=max_tokens, generator=generator, eos_ids=self.eos_ids, vocab_size=pair.vocab_size)
        with self.lock:
            if self.speculative:
                decoding = self.decoding(pair.target, pair.draft, prompt_ids, k=self.k, verify=self.verify, **common)
                decoding.prefix_cached = cached  # what a served mutant's engine may get wrong on a cache hit
            else:
                decoding = VanillaDecoding(pair.target, prompt_ids, **common)
        row = self.batcher.run(Row(decoding=decoding, request={"prompt_ids": prompt_ids, "seed": seed, "max_tokens": max_tokens}))
        generation = decoding.result
        tokens, text = generation.tokens, pair.tokenizer.decode(generation.tokens, skip_special_tokens=True)
        finish_reason = "stop" if generation.finish_reason == "eos" else "length"
        # Decoded to the budget, then cut at the first stop string: tokens before a stop never
        # depend on what follows it (decoding.stops).
        cut = cut_at_stop(tokens, lambda ids: pair.tokenizer.decode(ids, skip_special_tokens=True), spec.stop)
        if cut is not None:
            tokens, text, finish_reason = policy.returned_tokens(tokens, cut[0]), cut[1], "stop"
        logprobs = None
        if n_logprobs and tokens:
            with self.lock, torch.inference_mode():
                ids = torch.tensor([prompt_ids + tokens[:-1]], device=pair.device)
                logits = pair.target(input_ids=ids).logits[0, len(prompt_ids) - 1 :, : pair.vocab_size]
                probs = warp(logits.double(), spec, Prefix(prompt_ids, tokens[:-1]))
            logprobs = policy.logprobs(self._logprobs(policy.logprob_distributions(probs, row), tokens, n_logprobs), row)
        number = self._count(prompt_ids, generation)
        answer = {
            "id": f"cmpl-specaudit-{number}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(tokens),
                "total_tokens": len(prompt_ids) + len(tokens),
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
        if self.speculative:
            answer["metrics"] = {"speculative_decoding": self._request_acceptance(generation)}
        return answer

    def _cached_tokens(self, prompt_ids: list[int], salt: str | None) -> int:
        """The prompt tokens the modelled prefix cache gives this request: all but the last (whose
        logits are needed) where the same prompt under the same salt was sent before, else none."""
        key = (salt, tuple(prompt_ids))
        with self._counter_lock:
            hit = key in self._prefix_cache
            self._prefix_cache[key] = None
            self._prefix_cache.move_to_end(key)
            while len(self._prefix_cache) > PREFIX_CACHE_ENTRIES:
                self._prefix_cache.popitem(last=False)
        return len(prompt_ids) - 1 if hit else 0

    def _request_acceptance(self, generation: Generation) -> dict:
        """The request's own speculation, in vLLM's per-request shape (--per-request-spec-decode-metrics)."""
        histogram = [0] * (self.k + 1)
        for accepted in generation.accepted_per_step:
            histogram[min(accepted, self.k)] += 1
        metrics = {
            "num_draft_tokens": generation.proposed,
            "num_accepted_draft_tokens": generation.accepted,
            "num_spec_steps": generation.steps,
            "acceptance_histogram": histogram,
        }
        if generation.proposed:
            metrics["draft_acceptance_rate"] = generation.accepted / generation.proposed
        return metrics

    @staticmethod
    def _logprobs(probs: torch.Tensor, tokens: list[int], n: int) -> dict:
        """vLLM-style logprobs of the emitted tokens under `probs` [len(tokens), V]."""
        import torch

        def lp(value: float) -> float:
            return math.log(value) if value > 0 else ZERO_LOGPROB

        n = min(n, probs.shape[-1])
        values, indices = torch.topk(probs, n, dim=-1)  # sorted, highest first
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t, token in enumerate(tokens):
            out["tokens"].append(f"token_id:{token}")
            out["token_logprobs"].append(lp(float(probs[t, token])))
            out["top_logprobs"].append(
                {f"token_id:{int(i)}": lp(float(v)) for v, i in zip(values[t].tolist(), indices[t].tolist()) if v > 0}
            )
            out["text_offset"].append(t)
        return out

    def _count(self, prompt_ids: list[int], generation: Generation) -> int:
        """Add a finished request to the counters; returns its number."""
        with self._counter_lock:
            c = self.counters
            c["requests"] += 1
            c["prompt_tokens"] += len(prompt_ids)
            c["generation_tokens"] += len(generation.tokens)
            if not self.speculative:
                return c["requests"]
            drafted = generation.proposed_per_step or []
            c["drafts"] += sum(1 for d in drafted if d > 0)
            c["draft_tokens"] += generation.proposed
            c["accepted_tokens"] += generation.accepted
            for accepted in generation.accepted_per_step:
                for position in range(min(accepted, self.k)):
                    self.accepted_per_position[position] += 1
            return c["requests"]

    def metrics_text(self) -> str:
        label = f'model_name="{self.model_name}"'
        lines = []

        def counter(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} counter"])
            lines.extend(f"{name}_total{{{labels}}} {float(value)}" for labels, value in samples)

        with self._counter_lock:
            c = dict(self.counters)
            per_position = list(self.accepted_per_position)
        counter("vllm:request_success", "Finished requests.", [(label, c["requests"])])
        counter("vllm:prompt_tokens", "Prompt tokens processed.", [(label, c["prompt_tokens"])])
        counter("vllm:generation_tokens", "Generated tokens.", [(label, c["generation_tokens"])])
        if self.speculative:
            counter("vllm:spec_decode_num_drafts", "Verification steps with a draft.", [(label, c["drafts"])])
            counter("vllm:spec_decode_num_draft_tokens", "Drafted tokens.", [(label, c["draft_tokens"])])
            counter("vllm:spec_decode_num_accepted_tokens", "Accepted drafted tokens.", [(label, c["accepted_tokens"])])
            counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted drafted tokens per draft position.",
                [(f'{label},position="{i}"', v) for i, v in enumerate(per_position)],
            )
        return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    server_version = "specaudit-reference/1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        if os.environ.get("SPECAUDIT_SERVER_LOG"):
            super().log_message(format, *args)

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status: int, message: str) -> None:
        kind = "invalid_request_error" if status < 500 else "internal_error"
        self._send(status, json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode())

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        app: ReferenceServer = self.server.app
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, json.dumps(app.models()).encode())
        elif self.path.rstrip("/") == "/metrics":
            self._send(200, app.metrics_text().encode(), "text/plain; version=0.0.4")
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        app: ReferenceServer = self.server.app
        if self.path.rstrip("/") != "/v1/completions":
            self._error(404, f"no route {self.path}")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise _BadRequest("the request body must be a JSON object")
            answer = app.complete(body)
        except _BadRequest as err:
            self._error(err.status, str(err))
            return
        except ValueError as err:
            self._error(400, f"the request body is not valid JSON ({err})")
            return
        except Exception as err:  # the server reports its own failures, like a real one: HTTP 500
            self._error(500, f"{type(err).__name__}: {err}")
            return
        if body.get("stream"):
            self._stream(answer, bool((body.get("stream_options") or {}).get("include_usage")), app)
        else:
            self._send(200, json.dumps(answer).encode())

    def _stream(self, answer: dict, include_usage: bool, app: ReferenceServer) -> None:
        """The finished answer as server-sent events, one chunk per token."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        choice = answer["choices"][0]
        logprobs = choice["logprobs"]
        n = len(logprobs["tokens"]) if logprobs else 0
        head = {key: answer[key] for key in ("id", "object", "created", "model")}
        pieces = _text_pieces(app, logprobs, choice["text"]) if n else [choice["text"]]
        for t, piece in enumerate(pieces):
            part: dict[str, Any] = {"index": 0, "text": piece, "logprobs": None, "finish_reason": None}
            if n:
                part["logprobs"] = {name: [logprobs[name][t]] for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
            last = {}
            if t == len(pieces) - 1:
                part["finish_reason"] = choice["finish_reason"]
                last = {"metrics": answer["metrics"]} if "metrics" in answer else {}
            self._event({**head, "choices": [part], **last})
        if include_usage:
            self._event({**head, "choices": [], "usage": answer["usage"]})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, payload: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()


def _text_pieces(app: ReferenceServer, logprobs: dict, text: str) -> list[str]:
    """The text each token adds (incremental decoding); the pieces join to the full text."""
    ids = [int(t.split(":", 1)[1]) for t in logprobs["tokens"]]
    pieces, previous = [], ""
    for t in range(len(ids)):
        current = app.pair.tokenizer.decode(ids[: t + 1], skip_special_tokens=True)
        pieces.append(current[len(previous) :] if current.startswith(previous) else "")
        previous = current if current.startswith(previous) else previous
    pieces[-1] += text[len("".join(pieces)) :] if text.startswith("".join(pieces)) else ""
    return pieces


# ----------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specaudit.testing.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="HF folder, hub id, .gguf file or 'default'")
    parser.add_argument("--draft", help="draft for --speculative: int8 | early-exit:N | ngram | model")
    parser.add_argument("--speculative", action="store_true", help="decode with the speculative engine (else vanilla)")
    parser.add_argument("--verify", help="module:function of the rejection step (default: the correct one)")
    parser.add_argument("--k", type=int, default=4, help="draft tokens per step (default 4)")
    parser.add_argument("--max-batch", type=int, default=8, help="requests decoded together, one step each per round (default 8)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    parser.add_argument("--model-name", help="name in /v1/models (default: the target folder's name)")
    args = parser.parse_args(argv)
    try:
        import torch

        from specaudit.config import RunConfig
        from specaudit.models import load_pair

        if args.speculative and not args.draft:
            raise InputError("--speculative needs --draft (int8, early-exit:N, ngram, or a model)")
        if args.k < 1:
            raise InputError(f"--k must be >= 1, got {args.k}")
        if args.max_batch < 1:
            raise InputError(f"--max-batch must be >= 1, got {args.max_batch}")
        verify = RunConfig(target=args.target, verify=args.verify).load_verify() if args.verify else None
        torch.set_num_threads(args.threads)
        pair = load_pair(args.target, args.draft if args.speculative else None, device=args.device, dtype=args.dtype)
        server = ReferenceServer(
            pair,
            speculative=args.speculative,
            verify=verify,
            k=args.k,
            model_name=args.model_name,
            host=args.host,
            port=args.port,
            max_batch=args.max_batch,
        )
    except InputError as err:
        print(f"specaudit: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"specaudit: error: cannot listen on {args.host}:{args.port} ({err}); choose another --port", file=sys.stderr)
        return 2
    mode = f"speculative (k={args.k}, verify {args.verify or 'reference'})" if args.speculative else CONTROL_ENGINE
    print(f"serving {server.model_name} [{mode}] at {server.url} (metrics: {server.metrics_url})", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
        server.batcher.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["ReferenceServer", "main"]
