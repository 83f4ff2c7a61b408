"""Make the request logs shipped in tests/traffic/data: `specaudit proxy` in front of a speculative
server, traffic replayed from the core language and task prompt sets with seeded arrivals, mixed
streaming and sampling settings and 1-4 requests in flight (varying over time). Short answers and
two tenants keep the logs small and every stratum shared.

    python bench/traffic_make_log.py [--server llama-server|reference] [--out tests/traffic/data] [--requests 120]

Three logs: `base.jsonl` (the first `--requests` requests), then `after_same.jsonl` (as many
more, the same server settings, a fresh process) and `after_swapped.jsonl` (as many more with the
drafter swapped for a worse one). `traffic check` on base + after_swapped must alert (drift), on
base + after_same must not; the bench then replays each "after" log one request at a time into a
store holding the base and checks after every request (a look each), printing the first look
that alerts: the time to detection, in requests and in seconds of traffic.

- `--server llama-server` (default): the embedded SmolLM2-135M GGUF in llama-server (built by
  `specaudit llama-server build`), speculating by prompt lookup (`ngram-simple`, k = 4) on the
  context's last 3 tokens; the swap looks up the last token only and proposes up to 16 (it
  proposes far more, is right far less often, and each verification costs more: on 8 prompts,
  3% of 1,517 drafts kept against 29% of 42, and 2.0x the latency per token). One thread a
  server and `--poll 0`: on a shared CPU,
  llama.cpp's spinning worker threads are what makes it slow (15x slower measured with 2 spinning
  threads under a load average of 11 on 2 cores).
- `--server reference`: specaudit's reference server (specaudit.testing.server, a tiny random
  pair); the swap adds 5x the noise to the draft's weights.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from specaudit.traffic.proxy import RunningProxy

REPO = Path(__file__).resolve().parents[1]


# What the tests check the shipped logs with (tests/traffic/test_traffic_proxy.py).
CHECK = {"group_by": "label:tenant", "strata": ()}  # and the base log's length as the baseline


def prompts() -> list[tuple[str, str, str]]:
    """(text, language, task) of the core language and task sets."""
    pool = []
    for name in ("language", "task"):
        for line in (REPO / f"prompt_sets/core/{name}.jsonl").read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                attributes = row.get("attributes", {})
                pool.append((row["text"][:200], attributes.get("language", "en"), attributes.get("task", "chat")))
    return pool


def replay(proxy_url: str, n: int, seed: int, max_tokens: int) -> None:
    rng = random.Random(seed)
    pool = prompts()
    with httpx.Client(timeout=300) as client:

        def one(i: int) -> None:
            text, language, task = pool[rng.randrange(len(pool))]
            body = {
                "model": "target",
                "prompt": text,
                "max_tokens": max_tokens,
                "temperature": rng.choice([0.0, 0.7, 1.0]),
                "seed": seed * 100_000 + i,
                "stream": rng.random() < 0.3,
            }
            labels = f"language={language},task={task},tenant={'a' if i % 3 else 'b'}"
            answer = client.post(f"{proxy_url}/v1/completions", json=body, headers={"X-Specaudit-Labels": labels})
            if answer.status_code != 200:
                raise SystemExit(f"request {i}: HTTP {answer.status_code}: {answer.text[:300]}")

        done = 0
        while done < n:
            width = min(rng.randint(1, 4), n - done)  # requests in flight vary over time
            with ThreadPoolExecutor(width) as pool_exec:
                list(pool_exec.map(one, range(done, done + width)))
            done += width
            time.sleep(rng.expovariate(50.0))


@contextmanager
def reference_server(swapped: bool) -> Iterator[str]:
    from specaudit.models import load_pair, save_tiny_pair
    from specaudit.testing.server import ReferenceServer

    with tempfile.TemporaryDirectory() as models:
        target, draft = save_tiny_pair(Path(models) / "pair", seed=0, noise=1.5 if swapped else 0.3)
        with ReferenceServer(load_pair(str(target), str(draft), device="cpu"), speculative=True, k=4) as server:
            yield f"http://127.0.0.1:{server.port}"


@contextmanager
def llama_server(swapped: bool) -> Iterator[str]:
    from specaudit.engines.llama_build import require_binary
    from specaudit.engines.llama_server.client import server_args
    from specaudit.engines.llama_server.launcher import LlamaServer
    from specaudit.engines.llama_server.settings import LlamaServerSettings
    from specaudit.models._loading import embedded_gguf_path

    # The worse drafter: a 1-token lookup proposing up to 16 tokens (flags given later win).
    worse = ("--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "16", "--spec-draft-n-max", "16")
    lookup = worse if swapped else ()
    settings = LlamaServerSettings(concurrency_levels=(1, 4), threads=1, ctx_per_slot=512, extra_args=("--poll", "0", *lookup))
    args = server_args(embedded_gguf_path(), settings, spec_type="ngram-simple", draft=None, k=4)
    server = LlamaServer(require_binary(), args, "speculative", lifetime_s=1800).start(300)
    try:
        yield server.base_url
    finally:
        server.stop()


def phase(server: Callable, swapped: bool, out: Path, name: str, n: int, seed: int, max_tokens: int) -> None:
    with tempfile.TemporaryDirectory() as logs, server(swapped) as upstream, RunningProxy(upstream, logs) as proxy:
        replay(proxy.url, n, seed, max_tokens)
        proxy.close()
        files = sorted(Path(logs).glob("*.jsonl"))
        with open(out / name, "w", encoding="utf-8") as handle:
            for path in files:
                shutil.copyfileobj(open(path, encoding="utf-8"), handle)
    print(f"{name}: {sum(1 for _ in open(out / name))} lines, {(out / name).stat().st_size / 1000:.0f} kB")


def time_to_detection(out: Path, after: str) -> str:
    """Each request of `after` ingested one at a time after the base log, a check after each: the first alert."""
    from specaudit.traffic import evaluate, ingest, open_traffic_store

    base = (out / "base.jsonl").read_text().splitlines()
    lines = (out / after).read_text().splitlines()
    with tempfile.TemporaryDirectory() as folder:
        with open_traffic_store(Path(folder) / "t.db") as store:
            (Path(folder) / "base.jsonl").write_text("\n".join(base) + "\n")
            ingest(store, [str(Path(folder) / "base.jsonl")])
            for look, line in enumerate(lines, start=1):
                (Path(folder) / "next.jsonl").write_text(line + "\n")
                ingest(store, [str(Path(folder) / "next.jsonl")])
                result = evaluate(store, group_by=CHECK["group_by"], strata=CHECK["strata"], baseline_requests=len(base))
                if result.alerts:
                    first = json.loads(lines[0])["time"]
                    seconds = (datetime.fromisoformat(json.loads(line)["time"]) - datetime.fromisoformat(first)).total_seconds()
                    alerts = "; ".join(f"{a.kind} {a.message}" for a in result.alerts)
                    return f"{after}: first alert at look {look} of {len(lines)} ({seconds:.0f} s of traffic after the change): {alerts}"
    return f"{after}: no alert in {len(lines)} looks"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", choices=("llama-server", "reference"), default="llama-server")
    parser.add_argument("--out", default=str(REPO / "tests/traffic/data"))
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--only-detection", action="store_true", help="measure time to detection on the logs already in --out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = llama_server if args.server == "llama-server" else reference_server
    if not args.only_detection:
        phase(server, False, out, "base.jsonl", args.requests, 1, args.max_tokens)
        phase(server, False, out, "after_same.jsonl", args.requests, 2, args.max_tokens)
        phase(server, True, out, "after_swapped.jsonl", args.requests, 2, args.max_tokens)
    for after in ("after_same.jsonl", "after_swapped.jsonl"):
        print(time_to_detection(out, after))


if __name__ == "__main__":
    main()
