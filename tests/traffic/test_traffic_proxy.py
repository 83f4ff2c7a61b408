"""`specaudit proxy` in front of the reference server, and the logs it made in front of llama-server
(tests/traffic/data, by bench/traffic_make_log.py) read by `traffic ingest` and judged by `traffic check`."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from specaudit.cli import main
from specaudit.traffic.proxy import RunningProxy, merge_stream

DATA = Path(__file__).parent / "data"
CHECK = ["--group-by", "label:tenant", "--adjust", "none", "--baseline-requests", "120"]


@pytest.mark.parametrize("after, expected", [("after_same.jsonl", 0), ("after_swapped.jsonl", 1)])
def test_shipped_proxy_logs_alert_on_the_swapped_draft_only(tmp_path, capsys, after, expected):
    store = str(tmp_path / "t.db")
    assert main(["traffic", "ingest", str(DATA / "base.jsonl"), str(DATA / after), "--store", store]) == 0
    assert main(["traffic", "report", "--store", store, "--group-by", "label:tenant"]) == 0
    report = capsys.readouterr().out
    assert "240 requests" in report and "acceptance" in report
    assert main(["traffic", "check", "--store", store, *CHECK]) == expected
    out = capsys.readouterr().out
    assert ("ALERT drift: a: latency per token" in out) == bool(expected)
    assert ("ALERT drift: b: acceptance" in out) == bool(expected)
    # Made by the proxy in front of llama-server: its per-request timings, drafts counted.
    first = json.loads((DATA / after).read_text().splitlines()[0])
    assert "draft_n" in first["response"]["timings"] and first["labels"]["tenant"] in ("a", "b")


def test_merge_stream_joins_text_and_keeps_the_last_fields():
    events = [
        {"id": "x", "choices": [{"index": 0, "text": "Hel"}]},
        {"id": "x", "choices": [{"index": 0, "text": "lo", "finish_reason": "stop"}]},
        {"id": "x", "choices": [], "usage": {"completion_tokens": 2}, "metrics": {"speculative_decoding": {"num_draft_tokens": 4}}},
    ]
    merged = merge_stream(events)
    assert merged["choices"] == [{"index": 0, "text": "Hello", "finish_reason": "stop"}]
    assert merged["usage"] == {"completion_tokens": 2} and merged["metrics"]["speculative_decoding"]["num_draft_tokens"] == 4
    chat = merge_stream([{"choices": [{"index": 0, "delta": {"content": "Hi"}}]}, {"choices": [{"index": 0, "delta": {"content": "!"}}]}])
    assert chat["choices"][0]["text"] == "Hi!"


@pytest.fixture(scope="module")
def reference(tiny_pair_dir):
    from specaudit.models import load_pair
    from specaudit.testing.server import ReferenceServer

    target, draft = tiny_pair_dir
    with ReferenceServer(load_pair(str(target), str(draft), device="cpu"), speculative=True) as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.mark.slow
def test_proxy_forwards_unchanged_logs_each_request_and_reports_upstream_errors(reference, tmp_path):
    body = {"model": "target", "prompt": "Hello there", "max_tokens": 6, "temperature": 0.0}
    direct = httpx.post(f"{reference}/v1/completions", json=body, timeout=60).json()
    with RunningProxy(reference, tmp_path / "logs") as proxy:
        via = httpx.post(f"{proxy.url}/v1/completions", json=body, headers={"X-Specaudit-Labels": "tenant=t1"}, timeout=60)
        streamed = httpx.post(f"{proxy.url}/v1/completions", json={**body, "stream": True}, timeout=60)
        missing = httpx.post(f"{proxy.url}/v1/nothing", json=body, timeout=60)
    assert via.status_code == 200 and via.json()["choices"][0]["text"] == direct["choices"][0]["text"]  # greedy: same text
    events = [json.loads(x[5:]) for x in streamed.text.splitlines() if x.startswith("data:") and x.strip() != "data: [DONE]"]
    assert all(e.get("choices") for e in events)  # the usage chunk the proxy asked for is not passed on
    assert missing.status_code == 404
    lines = [json.loads(x) for f in sorted((tmp_path / "logs").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert [x["status"] for x in lines] == [200, 200, 404]
    assert lines[0]["labels"] == {"tenant": "t1"} and lines[0]["response"]["metrics"]["speculative_decoding"]["num_draft_tokens"] > 0
    assert lines[1]["response"]["usage"]["completion_tokens"] > 0 and lines[1]["ttft_s"] <= lines[1]["latency_s"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = sock.getsockname()[1]
    with RunningProxy(f"http://127.0.0.1:{free}", tmp_path / "down") as proxy:
        down = httpx.post(f"{proxy.url}/v1/completions", json=body, timeout=60)
    assert down.status_code == 502 and "upstream" in down.json()["error"]["message"]
    (line,) = [json.loads(x) for f in (tmp_path / "down").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert line["status"] == 502


class _SlowUpstream(BaseHTTPRequestHandler):
    """An OpenAI-shaped server that holds each answer until the test releases it."""

    arrived = 0
    lock = threading.Lock()
    release = threading.Event()

    def log_message(self, *args):
        return

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        with self.lock:
            type(self).arrived += 1
        self.release.wait(60)
        body = json.dumps({"choices": [{"index": 0, "text": "ok"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.slow
def test_sigterm_loses_no_request_in_flight(tmp_path):
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _SlowUpstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "specaudit.cli", "proxy", "--upstream", f"http://127.0.0.1:{upstream.server_address[1]}"]
    proc = subprocess.Popen([*cmd, "--log", str(tmp_path / "logs"), "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    try:
        assert "specaudit proxy:" in proc.stderr.readline()
        with ThreadPoolExecutor(6) as pool:
            post = lambda i: httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": f"p{i}"}, timeout=120)
            futures = [pool.submit(post, i) for i in range(6)]
            deadline = time.monotonic() + 60
            while _SlowUpstream.arrived < 6 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _SlowUpstream.arrived == 6  # all six are in flight in the proxy
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            _SlowUpstream.release.set()
            statuses = [f.result().status_code for f in futures]
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        upstream.shutdown()
    assert statuses == [200] * 6
    lines = [json.loads(x) for f in (tmp_path / "logs").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert sorted(x["request"]["prompt"] for x in lines) == [f"p{i}" for i in range(6)]
