"""A hostile OpenAI-compatible completions server on 127.0.0.1, for the robustness tests.

It needs no model. A correct answer samples `max_tokens` tokens uniformly from ids FIRST..FIRST+7
(seeded by the request's seed) and reports exactly that distribution as its top logprobs, so
specaudit's equivalence audit of two such servers passes. From request number `after` on (the
first is 0), it answers with the fault named by `fault` instead (FAULTS lists them). Every
request is bounded: a dripping answer stops after DRIP_LIMIT bytes, so a test cannot hang on
it; the server itself is stopped by `close()` (or the context manager).
"""

from __future__ import annotations

import gzip
import json
import math
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIRST, WIDTH = 3, 8  # the ids a correct answer draws from
DRIP_LIMIT, DRIP_EVERY_S = 40, 0.25  # a dripping answer: one byte per DRIP_EVERY_S, at most DRIP_LIMIT bytes

FAULTS = (
    "oov",  # token id 99999 (a 78-token vocabulary) at position 0
    "choices_oops",  # choices: ["oops"]
    "string_logprobs",  # token_logprobs: ["x", ...]
    "list_top_logprobs",  # top_logprobs: [[...], ...] (lists, not objects)
    "nan_logprob",  # token_logprobs: [NaN, ...] (Python's json writes and reads NaN)
    "too_many_tokens",  # 40 tokens for any max_tokens
    "huge_text",  # 20,000 characters of text beside the tokens
    "huge_body",  # a 4 MiB body
    "misaligned",  # one token_logprob fewer than tokens
    "redirect_loop",  # 307 to itself, forever
    "bad_gzip",  # Content-Encoding: gzip on a body that is not gzip
    "drip",  # the answer one byte at a time, slower than any sane timeout
    "drip_headers",  # the status line and headers one byte at a time
    "http_503",  # HTTP 503 with an error body, as an overloaded or crashed server answers
)


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-answer (as specaudit does past its size bound) is expected here:
    socketserver would print its traceback into the stderr the tests read for specaudit's sentence."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class HostileServer:
    def __init__(self, *, fault: str | None = None, after: int = 0, model: str = "hostile"):
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        self.fault, self.after, self.model = fault, after, model
        self.requests = 0
        self._lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.app = self
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def next_fault(self) -> str | None:
        with self._lock:
            number, self.requests = self.requests, self.requests + 1
        return self.fault if number >= self.after else None

    def answer(self, body: dict, fault: str | None) -> dict:
        """A completion of `body` (non-streamed shape), with `fault` applied to its content."""
        n = 40 if fault == "too_many_tokens" else int(body.get("max_tokens", 8))
        rng = random.Random(int(body.get("seed", 0)))
        ids = [FIRST + rng.randrange(WIDTH) for _ in range(n)]
        uniform = math.log(1 / WIDTH)
        top = {f"token_id:{FIRST + j}": uniform for j in range(WIDTH)}
        logprobs = {
            "tokens": [f"token_id:{i}" for i in ids],
            "token_logprobs": [uniform] * n,
            "top_logprobs": [dict(top) for _ in ids],
            "text_offset": list(range(n)),
        }
        text = "x" * n
        if fault == "oov":
            logprobs["tokens"][0] = "token_id:99999"
            ids[0] = 99999
        elif fault == "string_logprobs":
            logprobs["token_logprobs"] = ["x"] * n
        elif fault == "list_top_logprobs":
            logprobs["top_logprobs"] = [list(t.items()) for t in logprobs["top_logprobs"]]
        elif fault == "nan_logprob":
            logprobs["token_logprobs"][0] = math.nan
        elif fault == "misaligned":
            logprobs["token_logprobs"] = logprobs["token_logprobs"][:-1]
        elif fault == "huge_text":
            text = "y" * 20_000
        elif fault == "huge_body":
            text = "z" * (4 << 20)
        choice = {
            "index": 0,
            "text": text,
            "logprobs": logprobs if body.get("logprobs") else None,
            "token_ids": ids,  # vLLM's return_token_ids
            "finish_reason": "length",
        }
        choices = ["oops"] if fault == "choices_oops" else [choice]
        return {"id": "cmpl-1", "object": "text_completion", "model": self.model, "choices": choices, "usage": {"completion_tokens": n}}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, status: int, payload: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(payload)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _drip(self, payload: bytes) -> None:
        for byte in payload[:DRIP_LIMIT]:  # bounded: the request ends by itself
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:  # the client gave up: what the test wants
                return
            time.sleep(DRIP_EVERY_S)
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        app: HostileServer = self.server.app
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": app.model}]}).encode())
        else:
            self._send(404, b'{"error": {"message": "no route"}}')

    def do_POST(self) -> None:  # noqa: N802
        app: HostileServer = self.server.app
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        fault = app.next_fault()
        if fault == "redirect_loop":
            self._send(307, b"", {"Location": self.path})
            return
        if fault == "http_503":
            self._send(503, json.dumps({"error": {"message": "CUDA out of memory (planted)", "type": "internal_error"}}).encode())
            return
        if fault == "drip_headers":
            self._drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"s" * DRIP_LIMIT)
            return
        answer = app.answer(body, fault)
        if body.get("stream"):
            payload = b"".join(
                b"data: " + json.dumps({**answer, "choices": [part]}).encode() + b"\n\n" for part in _stream_parts(answer["choices"])
            )
            payload += b"data: [DONE]\n\n"
            content_type = "text/event-stream"
        else:
            payload, content_type = json.dumps(answer).encode(), "application/json"
        if fault == "bad_gzip":
            self._send(200, b"this is not gzip" + gzip.compress(b"{}")[4:], {"Content-Type": content_type, "Content-Encoding": "gzip"})
        elif fault == "drip":
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            self._drip(payload)
        else:
            self._send(200, payload, {"Content-Type": content_type})


def _stream_parts(choices: list) -> list:
    """A streamed answer's choice parts: one per token (whatever `choices` holds when it is not a choice)."""
    choice = choices[0]
    if not isinstance(choice, dict) or not choice.get("logprobs"):
        return choices
    logprobs = choice["logprobs"]
    n = len(logprobs["tokens"])
    parts = []
    for t in range(n):
        part = {name: logprobs[name][t : t + 1] for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
        text = choice["text"] if t == 0 else ""
        parts.append({"index": 0, "text": text, "logprobs": part, "token_ids": choice["token_ids"][t : t + 1], "finish_reason": None})
    parts[-1]["finish_reason"] = choice["finish_reason"]
    return parts
