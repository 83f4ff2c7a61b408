"""`specaudit proxy`: a logging reverse proxy for OpenAI-compatible servers that keep no request log.

Every request is forwarded as it came (body bytes unchanged) and its answer returned as it came,
streamed chunk by chunk when the client asked for a stream, except that a compressed answer is
passed on decoded, without its Content-Encoding (the HTTP client decodes it to read the log fields). One change where a server needs it to
say what speculation did: a streamed OpenAI request without `stream_options` gets
`{"include_usage": true}` (vLLM puts `metrics.speculative_decoding` in that trailing usage chunk),
and that extra chunk is not passed on, so the client sees the stream it asked for.

Each request becomes one JSON line (`traffic ingest` reads it): time of arrival, path, the request
body, the response body (a stream merged into one body), status, latency_s, ttft_s, in_flight at
arrival and labels from the `X-Specaudit-Labels: key=value,key=value` header (not forwarded). A
writer thread appends the lines in batches, fsyncs each batch, and starts a new file every
`rotate_lines` lines. On SIGTERM or SIGINT the proxy stops accepting, lets requests in flight
finish, writes their lines and exits: nothing is lost. A request whose client goes away before its
answer is whole is logged too (`"client_disconnected": true`), once.

The proxy serves only what it can record: it writes a probe into the log folder before it listens
(a read-only folder or a full disk: exit 2 at start), and when a write of the log fails while it
serves (the disk filled up) it truncates the file to its last whole line, answers 503 to new
requests, stops and exits 2 saying how many lines were not written. A malformed Content-Length is
answered 400, a body over MAX_BODY_BYTES 413, a chunked request body 411.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

import httpx

from specaudit.errors import InputError
from specaudit.traffic._fields import is_utf8_text

LABELS_HEADER = "x-specaudit-labels"
# Not forwarded either way: they describe one hop, not the request.
HOP_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
# Not passed on in an answer either: httpx has decoded the body, so its encoding no longer applies;
# the proxy's HTTP server writes its own Server and Date.
ANSWER_DROPPED = HOP_HEADERS | {"content-encoding", "server", "date"}
STREAMED_OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions")
BATCH_LINES = 256
# A request body larger than this is refused (413): no completion request is near it.
MAX_BODY_BYTES = 64 * 2**20
# What the start-up probe writes (and removes): a page, so a disk that is full fails it.
PROBE_BYTES = 4096
# The longest --timeout: a day (httpx and the socket layer take any finite number; nobody waits longer).
MAX_TIMEOUT_S = 86400.0
# A client that went away: what writing to its socket raises.
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class LogWriter:
    """Appends lines from any thread; a background thread writes them in batches, fsync per batch, rotating
    files. A failed write (disk full) leaves the file at its last whole line, is kept in `error`, and
    calls `on_failure`; the lines not written from then on are counted in `unwritten`."""

    def __init__(self, folder: str | Path, *, rotate_lines: int = 100_000) -> None:
        self.folder = Path(folder)
        if rotate_lines < 1:
            raise InputError(f"--rotate-lines {rotate_lines} must be at least 1")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"--log {folder}: cannot create the folder ({err.strerror})") from None
        _probe(self.folder)
        self.rotate_lines = rotate_lines
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._fd: int | None = None
        self._size = 0  # bytes of whole lines in the open file
        self._in_file = 0
        self._files = 0
        self.written = 0
        self.unwritten = 0
        self.error: OSError | None = None
        self.on_failure: Callable[[], None] = lambda: None
        self._thread = threading.Thread(target=self._run, name="specaudit-proxy-log", daemon=True)
        self._thread.start()

    def put(self, line: dict) -> None:
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
        if not is_utf8_text(text):  # a client's lone surrogate (\\ud800): escaped, the line stays UTF-8
            text = json.dumps(line, separators=(",", ":"))
        self._queue.put(text)

    def _open(self) -> None:
        self._close_file()
        self._files += 1
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        path = self.folder / f"requests-{stamp}-{os.getpid()}-{self._files:04d}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._in_file = 0

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, lines: list[str]) -> None:
        """Append `lines` (rotating as they fill files) and fsync; on an OSError, the file is cut back to
        its last whole line and the error raised."""
        while lines:
            if self._fd is None or self._in_file >= self.rotate_lines:
                self._open()
            room = self.rotate_lines - self._in_file
            part, lines = lines[:room], lines[room:]
            data = "".join(line + "\n" for line in part).encode("utf-8")
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
                os.fsync(self._fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)  # no torn line for `traffic ingest` to trip on
                raise
            self._size += len(data)
            self._in_file += len(part)
            self.written += len(part)

    def _run(self) -> None:
        done = False
        while not done:
            batch = [self._queue.get()]
            while len(batch) < BATCH_LINES:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if None in batch:
                done = True
                batch = [line for line in batch if line is not None]
            if self.error is not None:
                self.unwritten += len(batch)
                continue
            try:
                self._write(batch)
            except OSError as err:
                self.error = err
                self.unwritten += len(batch)
                self.on_failure()
        with contextlib.suppress(OSError):
            self._close_file()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def failure(self) -> str:
        """The sentence for a failed log: what failed and how many lines were lost."""
        reason = self.error.strerror if self.error is not None and self.error.strerror else str(self.error)
        return (
            f"cannot write the request log in {self.folder} ({reason}); the proxy stopped serving, "
            f"{self.unwritten} request line(s) answered but not written, {self.written} written"
        )


def _probe(folder: Path) -> None:
    """Write a page into `folder`, fsync it and remove it: a folder the proxy cannot log into is refused at start."""
    probe = folder / f".specaudit-proxy-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as err:
        raise InputError(f"--log {folder}: the proxy cannot write its request log there ({err.strerror or err})") from None


def _labels(header: str | None) -> dict[str, str]:
    labels = {}
    for part in (header or "").split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            labels[key.strip()] = value.strip()
    return labels


def merge_stream(events: list[dict]) -> dict:
    """One response body from a stream's JSON events: text (or message content) joined per choice, the
    other fields as the last event that carried them (usage, metrics, timings, meta_info)."""
    merged: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    for event in events:
        for key, value in event.items():
            if key != "choices":
                merged[key] = value
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) and not isinstance(index, bool) else 0
            slot = choices.setdefault(index, {"index": index, "text": ""})
            delta = choice.get("delta")
            piece = choice.get("text") if "text" in choice else (delta.get("content") if isinstance(delta, dict) else None)
            if isinstance(piece, str):
                slot["text"] += piece
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
    merged["choices"] = [choices[i] for i in sorted(choices)]
    return merged


class _Proxy(ThreadingHTTPServer):
    daemon_threads = False  # server_close() waits for requests in flight: their lines are written
    block_on_close = True
    # socketserver's default backlog is 5: a burst of 16 connections had some reset (the overhead bench).
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], upstream: str, writer: LogWriter, timeout: float) -> None:
        super().__init__(address, _Handler)
        self.upstream = upstream.rstrip("/")
        self.writer = writer
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0), limits=httpx.Limits(max_connections=256))
        self.in_flight = 0
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line instead of socketserver's traceback: a client gone is not worth one, anything else is a bug."""
        import sys

        err = sys.exc_info()[1]
        if not isinstance(err, CLIENT_GONE):
            print(f"specaudit proxy: internal error on a request from {client_address[0]}: {type(err).__name__}: {err}", file=sys.stderr)


class _Handler(BaseHTTPRequestHandler):
    server: _Proxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        return  # the JSON log is the log

    def do_GET(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            self._refuse(411, "send the request body with a Content-Length, not chunked")
            return
        declared = (self.headers.get("content-length") or "0").strip()
        if not declared.isdigit():
            self._refuse(400, f"Content-Length {declared[:40]!r} is not a number of bytes")
            return
        if int(declared) > MAX_BODY_BYTES:
            self._refuse(413, f"the request body of {declared} bytes is over the proxy's {MAX_BODY_BYTES} bytes")
            return
        body = self.rfile.read(int(declared)) if int(declared) else b""
        if len(body) < int(declared):  # the client went away mid-body: nothing to forward
            self.close_connection = True
            return
        self._forward(body)

    def _refuse(self, status: int, message: str) -> None:
        """An answer of the proxy's own (not forwarded, not logged), and the connection closed."""
        self.close_connection = True
        with contextlib.suppress(*CLIENT_GONE):
            self._send(
                status,
                [("Content-Type", "application/json"), ("Connection", "close")],
                json.dumps({"error": {"message": message}}).encode(),
            )

    def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in ANSWER_DROPPED:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _forward(self, body: bytes) -> None:
        if self.server.writer.error is not None:  # serve only what can be recorded
            self._refuse(503, f"specaudit proxy: {self.server.writer.failure()}")
            return
        arrival, started = now_iso(), time.perf_counter()
        with self.server.lock:
            in_flight = self.server.in_flight
            self.server.in_flight += 1
        try:
            self._relay(body, arrival, started, in_flight)
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def _relay(self, body: bytes, arrival: str, started: float, in_flight: int) -> None:
        self._headers_sent = False
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_HEADERS and k.lower() != LABELS_HEADER]
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        logged = self.command == "POST" and isinstance(request, dict)
        stream = logged and request.get("stream") is True
        added_usage = False
        if stream and self.path.split("?")[0] in STREAMED_OPENAI_PATHS and "stream_options" not in request:
            body = json.dumps({**request, "stream_options": {"include_usage": True}}).encode()
            added_usage = True
        line: dict[str, Any] = {"time": arrival, "path": self.path, "request": request, "in_flight": in_flight}
        labels = _labels(self.headers.get(LABELS_HEADER))
        if labels:
            line["labels"] = labels
        url = self.server.upstream + self.path
        try:
            if stream:
                self._relay_stream(url, headers, body, line, started, added_usage)
            else:
                answer = self.server.client.request(self.command, url, headers=headers, content=body)
                line["status"] = answer.status_code
                try:
                    line["response"] = answer.json()
                except ValueError:
                    line["response"] = {"error": answer.text[:500]}
                line["latency_s"] = time.perf_counter() - started
                self._send(answer.status_code, list(answer.headers.items()), answer.content)
        except httpx.HTTPError as err:
            message = f"upstream {self.server.upstream}: {type(err).__name__}: {err}"
            line.update(status=502, response={"error": message}, latency_s=time.perf_counter() - started)
            self.close_connection = True
            if not self._headers_sent:
                with contextlib.suppress(*CLIENT_GONE):
                    self._send(502, [("Content-Type", "application/json")], json.dumps({"error": {"message": message}}).encode())
        except CLIENT_GONE:
            line["client_disconnected"] = True
            self.close_connection = True
        finally:
            # Once per request the upstream was asked: answered, failed or left by its client.
            if logged and "status" in line:
                line.setdefault("latency_s", time.perf_counter() - started)
                self.server.writer.put(line)

    def _relay_stream(self, url: str, headers: list[tuple[str, str]], body: bytes, line: dict, started: float, added_usage: bool) -> None:
        events: list[dict] = []
        ttft = None
        try:
            with self.server.client.stream("POST", url, headers=headers, content=body) as answer:
                line["status"] = answer.status_code
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in ANSWER_DROPPED:
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._headers_sent = True
                for text_line in answer.iter_lines():
                    data = text_line[5:].strip() if text_line.startswith("data:") else None
                    event = None
                    if data and data != "[DONE]":
                        try:
                            event = json.loads(data)
                        except ValueError:
                            event = None
                    if isinstance(event, dict):
                        events.append(event)
                        if ttft is None and event.get("choices"):
                            ttft = time.perf_counter() - started
                        if added_usage and not event.get("choices") and "usage" in event:
                            continue  # the chunk we asked for, not the client
                    self._chunk((text_line + "\n").encode())
                self._chunk(b"")
        finally:
            # What arrived, also when the upstream or the client broke the stream off.
            line["response"] = merge_stream(events)
            line["latency_s"] = time.perf_counter() - started
            if ttft is not None:
                line["ttft_s"] = ttft

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        if not data:
            self.wfile.flush()


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InputError(f"--listen {listen!r}: write HOST:PORT, e.g. 127.0.0.1:8787")
    if int(port) > 65535:
        raise InputError(f"--listen {listen!r}: port {int(port)} is not a TCP port (0 to 65535)")
    return host, int(port)


class RunningProxy:
    """A proxy serving on a background thread (tests, benches); `close()` stops it as SIGTERM does."""

    def __init__(
        self,
        upstream: str,
        log_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        rotate_lines: int = 100_000,
        timeout: float = 600.0,
    ) -> None:
        if not upstream.startswith(("http://", "https://")):
            raise InputError(f"--upstream {upstream!r}: write the server's base URL, e.g. http://127.0.0.1:8080")
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise InputError(f"--timeout {timeout:g}: seconds to wait for the upstream's answer, more than 0 and at most {MAX_TIMEOUT_S:g}")
        if not 0 <= port <= 65535:
            raise InputError(f"--listen {host}:{port}: port {port} is not a TCP port (0 to 65535)")
        self.writer = LogWriter(log_dir, rotate_lines=rotate_lines)
        try:
            self.server = _Proxy((host, port), upstream, self.writer, timeout)
        except (OSError, OverflowError) as err:
            self.writer.close()
            raise InputError(f"--listen {host}:{port}: cannot serve there ({getattr(err, 'strerror', None) or err})") from None
        self.writer.on_failure = self.stop
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        try:
            self.server.serve_forever(poll_interval=0.2)
        finally:
            self.server.server_close()  # joins the requests in flight
            self.server.client.close()
            self.writer.close()

    def start(self) -> RunningProxy:
        self._thread = threading.Thread(target=self.serve_forever, name="specaudit-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        threading.Thread(target=self.server.shutdown, daemon=True).start()

    def close(self) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> RunningProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    upstream: str,
    log_dir: str | Path,
    *,
    listen: str = "127.0.0.1:8787",
    rotate_lines: int = 100_000,
    timeout: float = 600.0,
    out: TextIO | None = None,
) -> int:
    """Run the proxy in this thread until SIGTERM / SIGINT; the number of lines written."""
    host, port = parse_listen(listen)
    proxy = RunningProxy(upstream, log_dir, host=host, port=port, rotate_lines=rotate_lines, timeout=timeout)
    previous = {sig: signal.signal(sig, lambda signum, frame: proxy.stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
    if out is not None:
        print(f"specaudit proxy: {upstream} on {proxy.url}, logging to {log_dir}", file=out, flush=True)
    try:
        proxy.serve_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if proxy.writer.error is not None:
        raise InputError(proxy.writer.failure())
    if out is not None:
        print(f"specaudit proxy: stopped; {proxy.writer.written} request lines written", file=out, flush=True)
    return proxy.writer.written
