"""Make the request logs shipped in tests/traffic/data: `specaudit proxy` in front of the reference
server (specaudit.testing.server, speculative, tiny random pair), traffic replayed from the core
language prompt set with seeded arrivals, mixed streaming and sampling settings and 1-6 requests
in flight. Short answers (16 tokens) and two tenants keep the logs small and every stratum shared.

    python bench/traffic_make_log.py [--out tests/traffic/data] [--requests 200]

Three logs: `base.jsonl` (the first `--requests` requests, the good draft), then
`after_same.jsonl` (as many more, the same server) and `after_swapped.jsonl` (as many more with
the draft swapped for a worse one: the same target, draft weights with 5x the noise). `traffic
check` on base + after_swapped must alert (drift), on base + after_same must not.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from specaudit.models import load_pair, save_tiny_pair
from specaudit.testing.server import ReferenceServer
from specaudit.traffic.proxy import RunningProxy

REPO = Path(__file__).resolve().parents[1]


def prompts() -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (REPO / "prompt_sets/core/language.jsonl").read_text().splitlines() if line.strip()]
    return [(row["text"][:120], row.get("attributes", {}).get("language", "und")) for row in rows]


def replay(proxy_url: str, n: int, seed: int) -> None:
    rng = random.Random(seed)
    pool = prompts()
    with httpx.Client(timeout=120) as client:

        def one(i: int) -> None:
            text, language = pool[rng.randrange(len(pool))]
            body = {
                "model": "target",
                "prompt": text,
                "max_tokens": 16,
                "temperature": rng.choice([0.7, 1.0]),
                "seed": seed * 100_000 + i,
                "stream": rng.random() < 0.3,
            }
            answer = client.post(
                f"{proxy_url}/v1/completions",
                json=body,
                headers={"X-Specaudit-Labels": f"language={language},tenant={'a' if i % 3 else 'b'}"},
            )
            if answer.status_code != 200:
                raise SystemExit(f"request {i}: HTTP {answer.status_code}: {answer.text[:300]}")

        done = 0
        while done < n:
            width = min(rng.randint(1, 6), n - done)  # requests in flight vary over time
            with ThreadPoolExecutor(width) as pool_exec:
                list(pool_exec.map(one, range(done, done + width)))
            done += width
            time.sleep(rng.expovariate(50.0))


def phase(pair: object, out: Path, name: str, n: int, seed: int) -> None:
    with (
        tempfile.TemporaryDirectory() as logs,
        ReferenceServer(pair, speculative=True, k=4) as server,
        RunningProxy(f"http://127.0.0.1:{server.port}", logs) as proxy,
    ):
        replay(proxy.url, n, seed)
        proxy.close()
        files = sorted(Path(logs).glob("*.jsonl"))
        with open(out / name, "w", encoding="utf-8") as handle:
            for path in files:
                shutil.copyfileobj(open(path, encoding="utf-8"), handle)
    print(f"{name}: {sum(1 for _ in open(out / name))} lines")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(REPO / "tests/traffic/data"))
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as models:
        target, good = save_tiny_pair(Path(models) / "good", seed=0, noise=0.3)
        _, worse = save_tiny_pair(Path(models) / "worse", seed=0, noise=1.5)
        good_pair = load_pair(str(target), str(good), device="cpu")
        worse_pair = load_pair(str(target), str(worse), device="cpu")
        phase(good_pair, out, "base.jsonl", args.requests, seed=1)
        phase(good_pair, out, "after_same.jsonl", args.requests, seed=2)
        phase(worse_pair, out, "after_swapped.jsonl", args.requests, seed=2)


if __name__ == "__main__":
    main()
