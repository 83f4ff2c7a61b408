"""Power of the end-to-end audit against the field mutants, per sampling setting.

    python bench/field_power.py [--target default] [--pool 16] [--samples 8] [--subsamples 200]
                                [--samplers correct,draft_q_before_truncation,...] [--sampling t=1 t=0.7,top_p=0.9]

For each sampler and setting one pooled audit runs (8 domain prompts x `--pool` samples x 32
tokens, the speculative engine with that verifier), then `subsampled_detection` re-draws
`--subsamples` audits of `--samples` samples per prompt from the pool: each re-drawn audit is
distributed as a fresh one, so their mean verdict estimates the detection rate at that budget,
with the (conservative) Jeffreys interval of the disjoint audits the pool holds. A full default
audit per seed (screen + engines) does not fit this CPU for a 20-seed table; this measures the
same statistical tests on the same models at the end-to-end self-test's budget instead.
Prints one row per (sampler, setting) and writes it as CSV with --csv.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from specaudit.decoding.settings import parse_settings, setting_label
from specaudit.models import load_pair, save_tiny_pair
from specaudit.prompts import load_prompts
from specaudit.selftest.end_to_end import blind_class, end_to_end_audit, subsampled_detection

FIELD = "correct,draft_q_before_truncation,target_default_sampling,greedy_draft,greedy_verification"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="default", help="default (SmolLM2-135M + int8 draft) or tiny")
    parser.add_argument("--pool", type=int, default=16, help="samples per prompt in the pooled audit")
    parser.add_argument("--samples", type=int, nargs="+", default=[8], help="samples per prompt of a re-drawn audit")
    parser.add_argument("--subsamples", type=int, default=200)
    parser.add_argument("--samplers", default=FIELD)
    parser.add_argument("--sampling", nargs="+", default=["t=1", "t=0.7,top_p=0.9"])
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--csv")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.target == "tiny":
            target, draft = save_tiny_pair(folder)
            pair = load_pair(str(target), str(draft), device="cpu")
        else:
            pair = load_pair(args.target, "int8")
        prompts = load_prompts("core", dimensions=["domain"], per_group=1, seed=0)
        rows = []
        for spec in parse_settings(args.sampling):
            for sampler in [s.strip() for s in args.samplers.split(",") if s.strip()]:
                started = time.perf_counter()
                run_dir = Path(folder) / f"{sampler}-{setting_label(spec)}"
                pooled = end_to_end_audit(
                    pair, prompts, sampler, seed=0, samples=args.pool, max_new_tokens=args.max_new_tokens, keep=run_dir, spec=spec
                )
                table = subsampled_detection([run_dir], pair, samples=args.samples, subsamples=args.subsamples)
                for row in table.to_dict("records"):
                    rows.append(
                        {
                            "sampler": sampler,
                            "setting": setting_label(spec),
                            "blind_here": blind_class(sampler, spec) is not None,
                            "pool_rejected": pooled["rejected"],
                            **row,
                            "seconds": time.perf_counter() - started,
                        }
                    )
                print(pd.DataFrame(rows[-len(table) :]).to_string(index=False, float_format=lambda x: f"{x:.3g}"), flush=True)
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if args.csv:
        frame.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
