"""Check the --samples plan (stats.plugin_tv) against a real run: the TV bound a correct engine
is predicted to reach with n samples per prompt, against the bound its real samples reach.

    python bench/samples_to_show.py [--prompts-per 1] [--samples 256] [--out DIR]

Runs the vanilla engine (a correct sampler of the target) on the default pair, one prompt per
language group, `--samples` samples of the first token each (`specaudit run ... --max-new-tokens
1`), scores them, and for n = 16, 64, … up to `--samples` (the first n samples of each prompt)
prints the predicted expected bound (mean plug-in bias at n + the margin) beside the measured
bound, and the samples the plan asks for at a δ equal to that measured bound.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from specaudit.execution.records import read_records
from specaudit.models import load_pair
from specaudit.stats.equivalence import tv_bound
from specaudit.stats.plugin_tv import expected_bound, samples_to_show
from specaudit.stats.scoring import score_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--per-group", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--out", help="run folder (kept; default a temporary one)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="samples-to-show-")) / "run"
    command = [sys.executable, "-m", "specaudit.cli", "run", "--engines", "vanilla", "--dimensions", "language"]
    command += ["--per-group", str(args.per_group), "--samples", str(args.samples), "--max-new-tokens", "1", "--out", str(out)]
    subprocess.run(command, check=True)
    records = read_records(out / "records.jsonl")
    pair = load_pair("default", None)
    rows = []
    n = 16
    while n <= args.samples:
        subset = [r for r in records if r["sample"] < n]
        scores = score_records(pair.target, subset, null_draws=0)
        measured = tv_bound(scores, engine="vanilla", alpha=args.alpha, delta=1.0)
        curves = np.stack(list(scores.first_token_null.values()))
        bias, margin = expected_bound(curves, n, alpha=args.alpha)
        plan = samples_to_show(curves, delta=measured.upper, alpha=args.alpha)
        rows.append(
            {
                "samples": n,
                "prompts": curves.shape[0],
                "measured_estimate": round(measured.estimate, 4),
                "predicted_bias": round(bias, 4),
                "measured_upper": round(measured.upper, 4),
                "predicted_upper": round(bias + margin, 4),
                "ratio": round(measured.upper / (bias + margin), 3),
                "plan_at_measured_upper": plan.samples,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        n *= 4
    print(f"run folder: {out}")


if __name__ == "__main__":
    main()
