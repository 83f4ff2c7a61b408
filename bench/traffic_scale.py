"""Ingest and check at scale: lines per second and peak memory of `traffic ingest`, and the time of
`traffic check` over a large store.

    python bench/traffic_scale.py [--lines 1000000] [--store-rows 10000000] [--folder /tmp/traffic-scale]

1. Writes `--lines` simulated log lines (specaudit.traffic.simulate) to a file, ingests them into a
   new SQLite store and prints lines/s and the process's peak RSS (which chunks bound: at most
   three of 50,000 lines are held at once).
2. Fills a second store with `--store-rows` rows (the same columns, drawn with numpy and stored
   through `TrafficStore.add` in batches, which keeps the roll-up; no log parsing) and times
   `evaluate` over it in the same process (the check's work: open, count, baseline cut, the
   roll-up's sums, the checks; `specaudit traffic check --store` on the file times a fresh process).

Prints the load average and the process's CPU seconds beside each wall time: on a shared machine
the wall time says more about the neighbours than about the code.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

from specaudit.traffic import evaluate, ingest, open_traffic_store
from specaudit.traffic._store import STORED
from specaudit.traffic._strata import add_strata
from specaudit.traffic.simulate import TrafficModel, simulate, simulate_arrays, write_log


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def fill(path: Path, rows: int, batch: int = 500_000) -> None:
    """`rows` simulated requests stored through `TrafficStore.add` (which keeps the roll-up), no log parsing."""
    rng = np.random.default_rng(0)
    model = TrafficModel()
    done = 0
    with open_traffic_store(path) as store:
        while done < rows:
            n = min(batch, rows - done)
            c = simulate_arrays(model, n, rng, start=1.7e9 + done / model.rate_per_s)
            language = np.asarray(model.groups)[c["group"]]
            frame = pd.DataFrame(
                {
                    "digest": [f"{done + i:032x}" for i in range(n)],
                    "time": c["arrival"],
                    "prompt_tokens": c["prompt"],
                    "output_tokens": c["output"],
                    "proposed": c["proposed"],
                    "accepted": c["accepted"],
                    "latency_s": c["latency"],
                    "ttft_s": None,
                    "temperature": c["temperature"],
                    "in_flight": 0,
                    "status": 200,
                    "source": "metrics.speculative_decoding",
                    "labels": [f'{{"language": "{x}"}}' for x in language],
                    "language": language,
                    "language_confidence": None,
                    "text": None,
                }
            )
            store.add(add_strata(frame)[STORED])
            done += n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--store-rows", type=int, default=10_000_000)
    parser.add_argument("--folder", default="/tmp/traffic-scale")
    args = parser.parse_args()
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    if args.lines:
        log = write_log(folder / "log.jsonl", simulate(TrafficModel(), args.lines, seed=0))
        (folder / "ingest.db").unlink(missing_ok=True)
        print(f"wrote {args.lines:,} lines ({log.stat().st_size / 1e6:.0f} MB); {load()}")
        started, cpu = time.perf_counter(), cpu_s()
        with open_traffic_store(folder / "ingest.db") as store:
            result = ingest(store, [str(log)])
        seconds = time.perf_counter() - started
        print(
            f"ingest: {result.added:,} lines in {seconds:.1f} s = {result.added / seconds:,.0f} lines/s, "
            f"{cpu_s() - cpu:.1f} CPU s; peak RSS {peak_rss_mb():.0f} MB; {load()}"
        )
    if args.store_rows:
        store_path = folder / "big.db"
        store_path.unlink(missing_ok=True)
        started = time.perf_counter()
        fill(store_path, args.store_rows)
        print(f"filled {args.store_rows:,} rows in {time.perf_counter() - started:.0f} s")
        started, cpu = time.perf_counter(), cpu_s()
        with open_traffic_store(store_path, create=False) as store:
            result = evaluate(store, baseline_requests=1000)
        print(
            f"check over {result.requests:,} rows: {time.perf_counter() - started:.1f} s, {cpu_s() - cpu:.1f} CPU s, "
            f"{len(result.alerts)} alerts; peak RSS {peak_rss_mb():.0f} MB; {load()}"
        )


if __name__ == "__main__":
    main()
