"""Calibration of the tree and staged unit audits over many seeds (docs/trees.md).

For each exact rule (multi-step speculative sampling, recursive rejection sampling, the staged
check against the medium's q) the false-alarm rate of `audit_tree` / `audit_staged` at alpha over
`--seeds` seeds, and for each mutant (the Medusa-style typical acceptance labelled lossy by
design) its detection rate, each with its Clopper-Pearson 95% interval
(specaudit.selftest.tree_harness.tree_selftest at a chosen budget). Prints the table, the CPU
seconds it took, and writes it as CSV with `--out`.

    nice -n 10 .venv/bin/python bench/tree_calibration.py --seeds 20 --trials 200 --out tree_calibration.csv
"""

from __future__ import annotations

import argparse
import resource
import time

from specaudit.selftest.tree_harness import TREE_SELFTEST_SAMPLERS, tree_selftest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="audits per rule (default 20)")
    parser.add_argument("--trials", type=int, default=200, help="trees or staged steps per case (the audits' default: 400)")
    parser.add_argument("--tree", default="3,2,1", help="the tree shape of the tree rules (default 3,2,1)")
    parser.add_argument("--samplers", default=",".join(TREE_SELFTEST_SAMPLERS), help="comma list of rules")
    parser.add_argument("--out", help="CSV file for the table")
    args = parser.parse_args()
    started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    table = tree_selftest(seeds=range(args.seeds), samplers=args.samplers.split(","), branching=args.tree, trials=args.trials)
    end = resource.getrusage(resource.RUSAGE_SELF)
    columns = ["sampler", "kind", "seeds", "rejections", "rejection_rate", "ci_low", "ci_high", "samples_per_audit", "seconds_per_audit"]
    print(table[columns].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    used = end.ru_utime - cpu.ru_utime + end.ru_stime - cpu.ru_stime
    print(
        f"tree {args.tree}, {args.trials} trials per case, {args.seeds} seeds: {time.perf_counter() - started:.0f} s wall, {used:.0f} s CPU"
    )
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
