"""Ingest and check at scale: lines per second and peak memory of `traffic ingest`, and the time of
`traffic check` over a large store.

    python bench/traffic_scale.py [--lines 1000000] [--store-rows 10000000] [--folder /tmp/traffic-scale]

1. Writes `--lines` simulated log lines (specaudit.traffic.simulate) to a file, ingests them into a
   new SQLite store and prints lines/s and the process's peak RSS (which a chunk bounds: 50,000
   lines are held at once).
2. Fills a second store with `--store-rows` rows (the same columns, drawn with numpy and inserted
   in batches, no log parsing) and times `evaluate` (the check) over it.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from specaudit.traffic import evaluate, ingest, open_traffic_store
from specaudit.traffic._store import STORED
from specaudit.traffic.simulate import TrafficModel, simulate, simulate_arrays, write_log


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(path: Path, rows: int, batch: int = 500_000) -> None:
    with open_traffic_store(path):
        pass  # creates the tables
    rng = np.random.default_rng(0)
    model = TrafficModel()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    columns = ", ".join(STORED)
    marks = ", ".join("?" * len(STORED))
    done = 0
    while done < rows:
        n = min(batch, rows - done)
        c = simulate_arrays(model, n, rng, start=1.7e9 + done)
        language = np.asarray(model.groups)[c["group"]]
        prompt_bin = np.floor(np.log2(c["prompt"])).astype(int)
        output_bin = np.floor(np.log2(c["output"])).astype(int)
        sampling = np.select([c["temperature"] <= 0, c["temperature"] <= 0.5, c["temperature"] <= 1], [0, 1, 2], 3)
        data = zip(
            (f"{done + i:032x}" for i in range(n)),
            c["arrival"].tolist(),
            c["prompt"].tolist(),
            c["output"].tolist(),
            c["proposed"].tolist(),
            c["accepted"].tolist(),
            c["latency"].tolist(),
            [None] * n,
            c["temperature"].tolist(),
            [0] * n,
            [200] * n,
            ["metrics.speculative_decoding"] * n,
            [f'{{"language": "{x}"}}' for x in language],
            language.tolist(),
            [None] * n,
            [None] * n,
            prompt_bin.tolist(),
            output_bin.tolist(),
            sampling.tolist(),
            [0] * n,
        )
        conn.executemany(f"INSERT INTO traffic_requests ({columns}) VALUES ({marks})", data)
        conn.commit()
        done += n
    conn.close()


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
        started = time.perf_counter()
        with open_traffic_store(folder / "ingest.db") as store:
            result = ingest(store, [str(log)])
        seconds = time.perf_counter() - started
        print(f"ingest: {result.added} lines in {seconds:.1f} s = {result.added / seconds:,.0f} lines/s; peak RSS {peak_rss_mb():.0f} MB")
    if args.store_rows:
        store_path = folder / "big.db"
        store_path.unlink(missing_ok=True)
        started = time.perf_counter()
        fill(store_path, args.store_rows)
        print(f"filled {args.store_rows:,} rows in {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        with open_traffic_store(store_path, create=False) as store:
            result = evaluate(store, baseline_requests=1000)
        print(
            f"check over {result.requests:,} rows: {time.perf_counter() - started:.1f} s, {len(result.alerts)} alerts; peak RSS {peak_rss_mb():.0f} MB"
        )


if __name__ == "__main__":
    main()
