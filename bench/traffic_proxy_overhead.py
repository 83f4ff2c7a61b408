"""Latency the logging proxy adds: the same requests sent to an upstream directly and through
`specaudit proxy`, at 1, 16 and 64 requests in flight; p50 and p99 of each, and the difference.

    python bench/traffic_proxy_overhead.py [--requests 400] [--service-ms 20]

The upstream is a threaded OpenAI-shaped server on 127.0.0.1 that answers every request after
`--service-ms` (a stand-in for a model server, so that what is measured is the proxy, not decoding).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import numpy as np

from specaudit.traffic.proxy import RunningProxy

SERVICE_S = 0.02
ANSWER = json.dumps(
    {
        "choices": [{"index": 0, "text": "x" * 200, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 64},
        "metrics": {"speculative_decoding": {"num_draft_tokens": 80, "num_accepted_draft_tokens": 50}},
    }
).encode()


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        time.sleep(SERVICE_S)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)


def latencies(url: str, requests: int, width: int) -> np.ndarray:
    body = {"model": "m", "prompt": "hello " * 30, "max_tokens": 64}
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=width)) as client:

        def one(_: int) -> float:
            started = time.perf_counter()
            client.post(f"{url}/v1/completions", json=body).raise_for_status()
            return time.perf_counter() - started

        with ThreadPoolExecutor(width) as pool:
            return np.array(list(pool.map(one, range(requests))))


def main() -> None:
    global SERVICE_S
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--service-ms", type=float, default=20.0)
    args = parser.parse_args()
    SERVICE_S = args.service_ms / 1000
    ThreadingHTTPServer.request_queue_size = 1024  # the upstream too: a burst of 64 connections must not be reset
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    direct_url = f"http://127.0.0.1:{upstream.server_address[1]}"
    with tempfile.TemporaryDirectory() as logs, RunningProxy(direct_url, logs) as proxy:
        print(f"{args.requests} requests per level, upstream answers after {args.service_ms:.0f} ms")
        for width in (1, 16, 64):
            direct = latencies(direct_url, args.requests, width)
            via = latencies(proxy.url, args.requests, width)
            d50, d99, v50, v99 = (1000 * np.percentile(x, q) for x in (direct, via) for q in (50, 99))
            print(
                f"in flight {width:>2}: direct p50 {d50:.1f} ms p99 {d99:.1f} ms; via proxy p50 {v50:.1f} ms p99 {v99:.1f} ms; added p50 {v50 - d50:+.1f} ms p99 {v99 - d99:+.1f} ms"
            )
    upstream.shutdown()


if __name__ == "__main__":
    main()
