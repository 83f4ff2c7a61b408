"""Disparity analysis on a million-token record set: how long `disparity_section` takes.

    python bench/analysis.py [--tokens 1000000] [--groups 8]

Builds synthetic records in the records.jsonl schema (known per-group acceptance, 4-token
drafts, vanilla baseline) and times the analysis an audit runs on them: per-group metrics with
1,000 cluster-bootstrap resamples, tests, flags, drill-down and advice. Prints the figure beside
the time of merely building the record table, measured in the same run.
"""

from __future__ import annotations

import argparse
import time

from specaudit.stats.disparity import disparity_section, simulate_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=1_000_000, help="speculative output tokens to simulate (approximate)")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()

    acceptance = {f"g{i}": 0.45 + 0.3 * i / max(args.groups - 1, 1) for i in range(args.groups)}
    tokens_per_prompt = 22.5 * 2.6  # mean steps (15..30) x tokens per step at these acceptances
    prompts = max(1, int(args.tokens / tokens_per_prompt / args.groups))
    started = time.perf_counter()
    records = simulate_records(acceptance, n_prompts=prompts, seed=0)
    built = time.perf_counter() - started
    spec = records[records["engine"] == "speculative"]
    n_tokens = int(spec["output_token_ids"].map(len).sum())

    started = time.perf_counter()
    section = disparity_section(records, dimensions=["group"], n_boot=args.n_boot, seed=0)
    analysed = time.perf_counter() - started
    flags = section["disparities"]["group"]["flags"]
    print(f"records: {len(records)} ({len(spec)} speculative, {n_tokens} speculative tokens, {args.groups} groups, {prompts} prompts each)")
    print(f"simulating the records: {built:.1f} s")
    print(f"disparity analysis ({args.n_boot} bootstrap resamples, drill-down, advice): {analysed:.1f} s")
    print(
        f"analysis / simulation time ratio: {analysed / built:.2f}; flagged groups: {sum(f.get('status') == 'flag' for f in flags) if isinstance(flags, list) else flags}"
    )


if __name__ == "__main__":
    main()
