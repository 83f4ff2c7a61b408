"""Planted disparities and drifts on the real default pair: does the audit find what we plant?

    python bench/planted.py disparity [--seeds 10] [--per-group 8] [--sigma 2.0]
    python bench/planted.py drift [--history 5] [--reruns 3] [--per-group 10] [--sigma 2.0]

Both plant a known effect with `--draft-noise DIM=GROUP:SIGMA` (Gaussian noise on the int8
draft's logits for one group's prompts: sampling stays exact, acceptance drops) and decode for
real: SmolLM2-135M-Instruct and its int8 self-draft, CPU, T = 1, k = 4.

disparity: per seed, prompts drawn at random from the core set's domain prompts and dealt at
random into four pseudo-groups A-D. A, B and C differ only by chance, so a flag on them is a
false flag; D carries the noise and should be flagged against the reference A. Prints, over
seeds, D's detection rate and the false-flag rate of A-C, with Clopper-Pearson intervals.

drift: a monitoring history in a fresh SQLite store through `specaudit monitor run`, on one
fixed sample of the vocabulary prompts (common vs rare technical words): `--history` runs with different
decoding seeds, `--reruns`
more without change (each a no-change check against the rolling window), then one run with
noise on the rare group, which should alert naming vocabulary=rare_technical. Prints every check.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scipy.stats import binomtest

REPO = Path(__file__).resolve().parents[1]


def _interval(hits: int, n: int) -> str:
    ci = binomtest(hits, n).proportion_ci(0.95) if n else None
    return f"{hits}/{n} = {hits / n:.2f} [{ci.low:.2f}, {ci.high:.2f}]" if n else "n/a"


def disparity(args: argparse.Namespace) -> None:
    from specaudit.analysis import analyze
    from specaudit.config import RunConfig
    from specaudit.prompts import load_prompts
    from specaudit.runner import load_pair_for, run

    core = [p for p in load_prompts("core").prompts if "domain" in p.attributes]
    cfg0 = RunConfig(max_new_tokens=args.max_new_tokens)
    pair = load_pair_for(cfg0)
    detected = false_flags = null_groups = 0
    work = Path(tempfile.mkdtemp(prefix="planted-disparity-"))
    started = time.perf_counter()
    for seed in range(args.seeds):
        rng = random.Random(seed)
        chosen = rng.sample(core, 4 * args.per_group)
        prompts = work / f"prompts-{seed}.jsonl"
        with open(prompts, "w") as handle:
            for i, p in enumerate(chosen):
                handle.write(json.dumps({"id": p.id, "text": p.text, "attributes": {"pseudo": "ABCD"[i % 4]}}) + "\n")
        cfg = RunConfig(prompts=str(prompts), max_new_tokens=args.max_new_tokens, seed=seed, draft_noise=f"pseudo=D:{args.sigma}")
        out = work / f"run-{seed}"
        run(cfg, out, pair=pair, progress=False)
        snapshot = analyze(out, equivalence=False, n_boot=args.n_boot, seed=seed)
        flags = {(f["group"], f["metric"]): f for f in snapshot["disparities"]["pseudo"]["flags"] if f["status"] == "flag"}
        groups = snapshot["groups"]["pseudo"]["by_group"]
        rates = {g: groups[g]["metrics"]["acceptance_rate"]["value"] for g in "ABCD"}
        hit = ("D", "acceptance_rate") in flags
        wrong = sorted(g for g, _ in flags if g != "D")
        detected += hit
        false_flags += len(set(wrong))
        null_groups += 2  # B and C are compared with the reference A; A itself is not tested
        ratio = flags.get(("D", "acceptance_rate"), {}).get("ratio") or {}
        print(
            f"seed {seed}: acceptance "
            + " ".join(f"{g} {rates[g]:.3f}" for g in "ABCD")
            + f" | D flagged: {hit}"
            + (f" (ratio {ratio['value']:.2f} [{ratio['ci_low']:.2f}, {ratio['ci_high']:.2f}])" if hit else "")
            + f" | other flags: {', '.join(wrong) or 'none'}",
            flush=True,
        )
    print(
        f"\n{args.seeds} seeds, {args.per_group} prompts per pseudo-group, {args.max_new_tokens} tokens, sigma {args.sigma}, "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(f"planted group D flagged (acceptance): {_interval(detected, args.seeds)}")
    print(f"false flags on B, C (any metric):      {_interval(false_flags, null_groups)}")


def drift(args: argparse.Namespace) -> None:
    from specaudit.prompts import load_prompts

    work = Path(tempfile.mkdtemp(prefix="planted-drift-"))
    store = f"sqlite:///{work / 'history.db'}"
    # One fixed sample of prompts for the whole history (a scheduled job audits the same prompts):
    # --per-group would redraw them with each run's --seed.
    chosen = load_prompts("core", dimensions=("vocabulary",), per_group=args.per_group, seed=0).prompts
    prompts = work / "prompts.jsonl"
    with open(prompts, "w") as handle:
        for p in chosen:
            handle.write(json.dumps({"id": p.id, "text": p.text, "pair_id": p.pair_id, "attributes": dict(p.attributes)}) + "\n")
    base = [
        "specaudit",
        "monitor",
        "run",
        "--store",
        store,
        "--environment",
        "bench",
        "--quiet",
        "--format",
        "json",
        "--prompts",
        str(prompts),
        "--per-group",
        str(args.per_group),  # all of them, not the audit's default 3
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--n-boot",
        "500",
        "--no-equivalence",
    ]
    plan = [(f"seed {s}", ["--seed", str(s)]) for s in range(args.history + args.reruns)]
    plan.append(("planted", ["--seed", str(args.history + args.reruns), "--draft-noise", f"vocabulary=rare_technical:{args.sigma}"]))
    started = time.perf_counter()
    no_change = no_change_alerts = 0
    for i, (label, extra) in enumerate(plan):
        done = subprocess.run([*base, "--out", str(work / f"run-{i}"), *extra], capture_output=True, text=True, cwd=REPO)
        if done.returncode == 2:
            sys.exit(f"{label}: {done.stderr.strip()}")
        result = json.loads(done.stdout)
        fails = [c for c in result["checks"] if c["status"] == "FAIL"]
        drift_rows = [c for c in result["checks"] if c["kind"] == "drift" and c["metric"] == "acceptance_rate"]
        print(f"run {i} ({label}): exit {done.returncode}, {result['status']}, vs {result['baseline']}", flush=True)
        for c in drift_rows:
            d = c["details"]
            print(
                f"    {c['status']:4} {c['subject']}: {d['baseline']:.3f} -> {d['current']:.3f}, p = {d['pvalue']:.2g}, "
                f"Holm {d['pvalue_holm']:.2g}, ratio {d['ratio']:.2f} [{d['ratio_ci_low']:.2f}, {d['ratio_ci_high']:.2f}] "
                f"({d.get('method', '')})"
            )
        for c in fails:
            print(f"    alert: {c['status']} {c['kind']} {c['subject']}: {c['message'][:160]}")
        if label != "planted" and i > 0:
            no_change += 1
            no_change_alerts += bool(fails)
    print(
        f"\n{len(plan)} runs, {args.per_group} prompts per group, {args.max_new_tokens} tokens, {time.perf_counter() - started:.0f} s; "
        f"store {store}"
    )
    print(f"re-runs without change that alerted: {_interval(no_change_alerts, no_change)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="experiment", required=True)
    d = sub.add_parser("disparity")
    d.add_argument("--seeds", type=int, default=10)
    d.add_argument("--per-group", type=int, default=8)
    d.add_argument("--n-boot", type=int, default=1000)
    m = sub.add_parser("drift")
    m.add_argument("--history", type=int, default=5)
    m.add_argument("--reruns", type=int, default=3)
    m.add_argument("--per-group", type=int, default=10)
    for p in (d, m):
        p.add_argument("--sigma", type=float, default=2.0)
        p.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()
    (disparity if args.experiment == "disparity" else drift)(args)


if __name__ == "__main__":
    main()
