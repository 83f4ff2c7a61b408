"""`specaudit proxy` under hostile clients, upstreams, flags and disks, over real sockets: every answered
request logged once, malformed requests refused, bad flags and unwritable logs one sentence and exit 2."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from specaudit.cli import main
from specaudit.traffic.proxy import RunningProxy

ANSWER = {"choices": [{"index": 0, "text": "ok"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


class _Upstream(BaseHTTPRequestHandler):
    """An OpenAI-shaped server: JSON answers (gzipped when the path says so), and a stream whose second
    half waits for `resume`, so a test can close its client in between."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        return

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        self.server.seen.append(request)
        if request.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(40):
                if i == 1:
                    self.server.resume.wait(30)
                event = {"choices": [{"index": 0, "text": f"t{i} "}]}
                if i == 39:
                    event["usage"] = {"prompt_tokens": 3, "completion_tokens": 40}
                data = f"data: {json.dumps(event)}\n\n".encode()
                try:
                    self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                except OSError:
                    return  # the proxy closed the stream: its client went away
            self.wfile.write(b"0\r\n\r\n")
            return
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path.endswith("gzip"):
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        return  # the proxy closing a stream it no longer needs: the upstream's business, not the test's


@pytest.fixture
def upstream():
    server = _QuietServer(("127.0.0.1", 0), _Upstream)
    server.seen, server.resume = [], threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.resume.set()
    server.shutdown()
    server.server_close()


def url_of(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def logged(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]


def raw_request(port: int, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """(status, body) of one request written byte for byte to the proxy's socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]


def test_malformed_requests_are_refused_and_the_proxy_serves_on(upstream, tmp_path, capfd):
    with RunningProxy(url_of(upstream), tmp_path / "logs") as proxy:
        port = proxy.server.server_address[1]
        head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        cases = {
            "Content-Length: abc\r\n": 400,
            "Content-Length: -5\r\n": 400,
            "Content-Length: 1e3\r\n": 400,
            f"Content-Length: {10**12}\r\n": 413,
            "Transfer-Encoding: chunked\r\n": 411,
        }
        for header, expected in cases.items():
            status, body = raw_request(port, head + header, b'{"prompt": "x"}')
            assert status == expected, header
            assert "error" in json.loads(body)
        good = httpx.post(f"{proxy.url}/v1/completions", json={"prompt": "fine"}, timeout=30)
    assert good.status_code == 200 and good.json() == ANSWER
    assert [r["prompt"] for r in upstream.seen] == ["fine"]  # nothing malformed was forwarded
    assert [line["request"]["prompt"] for line in logged(tmp_path / "logs")] == ["fine"]
    assert "Traceback" not in capfd.readouterr().err


def test_a_gzipped_answer_is_forwarded_with_headers_that_match_its_body(upstream, tmp_path):
    with RunningProxy(url_of(upstream), tmp_path / "logs") as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.server.server_address[1], timeout=30)
        conn.request("POST", "/v1/completions?gzip", body=json.dumps({"prompt": "z"}), headers={"Accept-Encoding": "gzip"})
        answer = conn.getresponse()
        body = answer.read()  # http.client does not decode: the bytes as sent
        conn.close()
    assert answer.getheader("Content-Encoding") is None
    assert int(answer.getheader("Content-Length")) == len(body)
    assert json.loads(body) == ANSWER
    (line,) = logged(tmp_path / "logs")
    assert line["response"] == ANSWER and line["status"] == 200


def test_a_client_gone_mid_stream_is_logged_once_without_a_traceback(upstream, tmp_path, capfd):
    with RunningProxy(url_of(upstream), tmp_path / "logs") as proxy:
        port = proxy.server.server_address[1]
        body = json.dumps({"prompt": "bye", "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            seen = b""
            while b"t0" not in seen:  # the first event came through
                chunk = sock.recv(65536)
                assert chunk, "the proxy closed the stream before its first event"
                seen += chunk
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close with a reset
        upstream.resume.set()  # the rest of the stream meets a closed client
    (line,) = logged(tmp_path / "logs")
    assert line["client_disconnected"] is True and line["status"] == 200
    assert line["response"]["choices"][0]["text"].startswith("t0 ")
    assert "Traceback" not in capfd.readouterr().err


def test_a_client_gone_before_a_plain_answer_is_logged_once(upstream, tmp_path, capfd):
    with RunningProxy(url_of(upstream), tmp_path / "logs") as proxy:
        body = json.dumps({"prompt": "quick"}).encode()
        with socket.create_connection(("127.0.0.1", proxy.server.server_address[1]), timeout=30) as sock:
            sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        # A second request on its own connection: when it is logged, the first one has been answered.
        httpx.post(f"{proxy.url}/v1/completions", json={"prompt": "after"}, timeout=30)
    lines = logged(tmp_path / "logs")
    assert sorted(line["request"]["prompt"] for line in lines) == ["after", "quick"]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--listen", "127.0.0.1:99999"], "port 99999 is not a TCP port"),
        (["--listen", "127.0.0.1:70000"], "port 70000 is not a TCP port"),
        (["--timeout", "-1"], "--timeout -1"),
        (["--timeout", "0"], "--timeout 0"),
        (["--rotate-lines", "0"], "--rotate-lines 0"),
    ],
)
def test_bad_flags_are_one_sentence_and_exit_2(tmp_path, capsys, flags, words):
    argv = ["proxy", "--upstream", "http://127.0.0.1:9", "--log", str(tmp_path / "logs"), "--listen", "127.0.0.1:0", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


@contextlib.contextmanager
def small_disk(path: Path, size: str, *options: str):
    """A real file system of `size` at `path` (tmpfs; mounting needs root, else the test is skipped)."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder: Path) -> None:
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as handle:
        while True:
            handle.write(b"\0" * 4096)
            handle.flush()


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_a_log_folder_it_cannot_write_is_refused_at_start(tmp_path, capsys, how):
    with small_disk(tmp_path / "disk", "64k", *(["ro"] if how == "read-only" else [])) as disk:
        if how == "full":
            fill(disk)
        argv = ["proxy", "--upstream", "http://127.0.0.1:9", "--log", str(disk), "--listen", "127.0.0.1:0"]
        assert main(argv) == 2
    err = capsys.readouterr().err
    reason = "Read-only file system" if how == "read-only" else "No space left on device"
    assert "cannot write its request log there" in err and reason in err and err.count("\n") == 1


def test_a_disk_that_fills_while_serving_stops_the_proxy_and_leaves_whole_lines(upstream, tmp_path, capfd):
    with small_disk(tmp_path / "disk", "256k") as disk:
        proxy = RunningProxy(url_of(upstream), disk).start()
        statuses = []
        with httpx.Client(timeout=30) as client:
            for i in range(200):  # about 4 kB a line: the disk is full after some 60 lines
                try:
                    statuses.append(client.post(f"{proxy.url}/v1/completions", json={"prompt": f"{i} " + "x" * 4000}).status_code)
                except httpx.TransportError:
                    break  # the proxy has stopped listening
        proxy._thread.join(60)
        assert not proxy._thread.is_alive()  # it stopped by itself
        lines = logged(disk)  # every line whole: `traffic ingest` reads them
        writer = proxy.writer
    assert isinstance(writer.error, OSError) and "No space left" in writer.failure()
    answered = statuses.count(200)
    assert len(lines) == writer.written and writer.written + writer.unwritten == answered
    assert len(statuses) < 200 and set(statuses) <= {200, 503}  # it stopped serving rather than serve unrecorded
    assert "Traceback" not in capfd.readouterr().err


def test_the_command_exits_2_saying_what_was_lost_when_its_disk_fills(upstream, tmp_path, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    def clients():
        served = 0
        with httpx.Client(timeout=30) as client:
            for i in range(2000):
                try:
                    client.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": f"{i} " + "x" * 4000})
                    served += 1
                except httpx.ConnectError:
                    if served:  # refused after it served some: it has stopped
                        return
                    time.sleep(0.05)  # not listening yet
                except httpx.TransportError:
                    return

    with small_disk(tmp_path / "disk", "128k") as disk:
        thread = threading.Thread(target=clients, daemon=True)
        thread.start()
        code = main(["proxy", "--upstream", url_of(upstream), "--log", str(disk), "--listen", f"127.0.0.1:{port}"])
        thread.join(60)
        lines = logged(disk)
    err = capsys.readouterr().err
    assert code == 2 and "cannot write the request log" in err and "No space left on device" in err
    assert f"{len(lines)} written" in err and "Traceback" not in err
