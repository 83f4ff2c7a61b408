"""False alarms over many looks, power and time to detection, and the length confound: the checks of
`specaudit traffic check` (the same `compare`, `one_sided_p` and Holm) on simulated traffic.

    python bench/traffic_false_alarms.py [--runs 200] [--looks 10000] [--per-look 2]

Each run is one stream of requests (specaudit.traffic.simulate: 3 groups, acceptance varying per
request, lengths, sampling settings) looked at `looks` times, every `per-look` requests, after a
baseline of 1,000 requests. At each look, every group's acceptance is checked for disparity (against
the other groups, same strata) and for drift (against its baseline, same strata), all six in one
Holm family at alpha = 0.05. To measure the false-alarm rate where it is hardest, the thresholds
sit exactly at the truth (disparity ratio 1.0, drift change 0): any alert is false. Scenarios:

- null: no group effect, no change (false alarms; the bound is alpha over all looks)
- confound: group "fr" sends 4x longer prompts, acceptance falls 0.08 per doubling for everyone
  (adjusted: false alarms; unadjusted, the same check: how often it would flag fr)
- change: from the middle look on, "fr" accepts 20% less (power and looks to detection)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

from specaudit.traffic._estimate import FIELDS, Sums, compare
from specaudit.traffic._sequential import one_sided_p
from specaudit.traffic._strata import in_flight_at_arrival, octave, sampling_bin
from specaudit.traffic.simulate import TrafficModel, simulate_arrays

BASELINE = 1000
ALPHA = 0.05


def strata_index(cols: dict) -> np.ndarray:
    """One stratum number per request from its four bins (the ingest's strata)."""
    load = in_flight_at_arrival(cols["arrival"], cols["latency"])
    bins = np.stack(
        [
            octave(pd.Series(cols["prompt"])),
            octave(pd.Series(cols["output"])),
            sampling_bin(pd.Series(cols["temperature"])),
            octave(pd.Series(load + 1)),
        ],
        axis=1,
    )
    _, index = np.unique(bins, axis=0, return_inverse=True)
    return index.ravel()


def cumulative(values: dict[str, np.ndarray], look: np.ndarray, group: np.ndarray, stratum: np.ndarray, shape: tuple) -> Sums:
    """Sums per (look, group, stratum), cumulative over looks."""
    out = {}
    for name in FIELDS:
        table = np.zeros(shape)
        np.add.at(table, (look, group, stratum), values[name])
        out[name] = table.cumsum(axis=0)
    return Sums(**out)


def run_once(model: TrafficModel, looks: int, per_look: int, rng: np.random.Generator, *, adjust: bool) -> np.ndarray:
    """The first look (1-based) at which Holm alerts, or 0 for none."""
    n = BASELINE + looks * per_look
    cols = simulate_arrays(model, n, rng)
    stratum = strata_index(cols) if adjust else np.zeros(n, dtype=int)
    groups, strata = len(model.groups), int(stratum.max()) + 1
    x, y = cols["proposed"].astype(float), cols["accepted"].astype(float)
    values = {"n": np.ones(n), "x": x, "y": y, "xx": x * x, "yy": y * y, "xy": x * y}
    look = np.concatenate([np.zeros(BASELINE, dtype=int), 1 + np.arange(looks * per_look) // per_look])
    sums = cumulative(values, look, cols["group"], stratum, (looks + 1, groups, strata))
    base = Sums(*(getattr(sums, f)[0:1] for f in FIELDS))
    everything = Sums(*(getattr(sums, f)[1:] for f in FIELDS))
    recent = everything - base
    rest = Sums(*(getattr(everything, f).sum(axis=1, keepdims=True) - getattr(everything, f) for f in FIELDS))
    disparity = compare(everything, rest)
    drift = compare(recent, Sums(*(np.broadcast_to(getattr(base, f), getattr(recent, f).shape) for f in FIELDS)))
    p = np.concatenate(
        [one_sided_p(disparity.log_ratio, disparity.se, 0.0, below=True), one_sided_p(drift.log_ratio, drift.se, 0.0, below=True)], axis=1
    )
    first = np.sort(p, axis=1)[:, 0] <= ALPHA / p.shape[1]  # Holm rejects something iff its first step does
    hits = np.flatnonzero(first)
    return hits[0] + 1 if len(hits) else 0


def wilson_high(k: int, n: int, z: float = 1.96) -> float:
    p = k / n
    return (p + z * z / (2 * n) + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--looks", type=int, default=10_000)
    parser.add_argument("--per-look", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma list of scenario names to run (default all)")
    args = parser.parse_args()
    scenarios = {
        "null": (TrafficModel(), True),
        "confound, adjusted": (TrafficModel(prompt_median={"fr": 800.0}, length_slope=-0.08), True),
        "confound, unadjusted": (TrafficModel(prompt_median={"fr": 800.0}, length_slope=-0.08), False),
        "change at mid-stream": (TrafficModel(change_at=0.5, change_effect=0.8, change_groups=("fr",)), True),
    }
    print(f"{args.runs} runs x {args.looks} looks, {args.per_look} requests per look after {BASELINE} baseline requests, alpha {ALPHA}")
    for name, (model, adjust) in scenarios.items():
        if args.only and not any(name.startswith(o.strip()) for o in args.only.split(",")):
            continue
        if name == "change at mid-stream":
            # change_at is a fraction of all requests; put it at the middle look.
            total = BASELINE + args.looks * args.per_look
            model = TrafficModel(change_at=(BASELINE + args.looks * args.per_look / 2) / total, change_effect=0.8, change_groups=("fr",))
        rng = np.random.default_rng(args.seed)
        started = time.perf_counter()
        first = []
        for run in range(args.runs):
            first.append(run_once(model, args.looks, args.per_look, rng, adjust=adjust))
            if (run + 1) % 10 == 0:
                print(f"  {name}: {run + 1} runs, {sum(f > 0 for f in first)} with an alert", flush=True)
        first = np.array(first)
        alarms = int((first > 0).sum())
        line = f"{name:<22} runs with an alert: {alarms}/{args.runs} = {alarms / args.runs:.3f} (95% upper {wilson_high(alarms, args.runs):.3f})"
        if name == "change at mid-stream" and alarms:
            after = first[first > args.looks // 2] - args.looks // 2
            early = int(((first > 0) & (first <= args.looks // 2)).sum())
            if len(after):
                line += f"; alerts before the change {early}; looks after the change to detection: median {np.median(after):.0f}, 90th pct {np.percentile(after, 90):.0f} ({args.per_look} requests per look)"
        print(f"{line}  [{time.perf_counter() - started:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
