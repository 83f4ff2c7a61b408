"""How often the audit's screen-vs-engine check raises when the screen is right, on the real pair.

    specaudit run --engines screen --per-group 1 --sample-seed 1 --seed 11 --samples 8 \\
        --max-new-tokens 32 --out /tmp/screen8
    PYTHONPATH=. python bench/screen_agreement.py /tmp/screen8 [--audits 2000]

The run holds several screened paths per prompt (target samples with their acceptance
probabilities a_t). Each simulated audit takes, per prompt, one path as the speculative engine's
run (acceptances drawn along it by `screen.sample_run`, the law the screen's programmes average
over) and another path as the screen's record, then calls `analysis.screen_agreement` as an
audit does, with the engine run's a_t as the teacher-forced scores would give them, so both of its
tests run (same prompts; given the engine's paths) and Holm joins them. A calibrated check raises
in about 5% of audits; the script prints each test's own rate too. For contrast it prints how far one
run's rate sits above the ratio of expected counts (what the first version of the check compared
against). Pure arithmetic on the stored paths: about a minute on one core for 2,000 audits.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from specaudit.execution.records import read_manifest, read_records
from specaudit.stats.acceptance import sample_run
from specaudit.stats.screen_agreement import screen_agreement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--audits", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    budget = int(read_manifest(args.run_dir)["config"]["max_new_tokens"])
    paths = defaultdict(list)
    for record in read_records(f"{args.run_dir}/records.jsonl"):
        if record["engine"] == "screen" and record["proposed"] > 0:
            paths[record["prompt_id"]].append(record)
    prompts = sorted(p for p, rows in paths.items() if len(rows) >= 2)
    if len(prompts) < 2:
        raise SystemExit(f"{args.run_dir}: needs at least 2 screened paths per prompt on 2 prompts (run with --samples 8)")
    rng = np.random.default_rng(args.seed)
    above = below = raised = given_raised = 0
    jensen = []
    for _ in range(args.audits):
        rows = []
        for prompt in prompts:
            engine_path, screen_path = rng.choice(len(paths[prompt]), size=2, replace=False)
            run = paths[prompt][engine_path]
            accepted, proposed = sample_run(run["position_accept"], int(run["k"]), budget, rng)
            rows.append({**paths[prompt][screen_path], "timing_only": False})
            rows.append(
                {**run, "engine": "speculative", "key": f"{prompt}|engine", "accepted": sum(accepted), "proposed": sum(proposed),
                 "accepted_per_step": accepted, "timing_only": False}
            )  # fmt: skip
        frame = pd.DataFrame(rows)
        path_accept = {row["key"]: row["position_accept"] for row in rows if row["engine"] == "speculative"}
        check = screen_agreement(frame, budget, path_accept)
        ratio = check["engine_over_screen_acceptance"]
        above += ratio["ci_low"] > 1.0
        below += ratio["ci_high"] < 1.0
        raised += not check["agrees"]
        given_raised += check["given_engine_paths"]["pvalue"] < 0.05
        engine, screen = frame[frame.engine == "speculative"], frame[frame.engine == "screen"]
        jensen.append((engine.accepted / engine.proposed).mean() / (screen.accepted / screen.proposed).mean())
    ci = binomtest(raised, args.audits).proportion_ci(0.95)
    print(f"{len(prompts)} prompts, {sum(len(paths[p]) for p in prompts)} screened paths, {budget} tokens, {args.audits} simulated audits")
    print(f"check raised (Holm over its two tests): {raised}/{args.audits} = {raised / args.audits:.3f} [{ci.low:.3f}, {ci.high:.3f}]")
    print(f"  same prompts alone, interval excluding 1: {above + below} (above 1: {above}, below 1: {below})")
    print(f"  given the engine's paths alone, p < 0.05: {given_raised}")
    print(f"one run's rate over the ratio of expected counts: {np.mean(jensen):.4f} (what the first version compared against)")


if __name__ == "__main__":
    main()
