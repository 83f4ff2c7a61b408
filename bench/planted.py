"""Planted disparities and drifts on the real default pair: does the audit find what we plant?

    python bench/planted.py calibrate [--factors 0.5,0.7,0.8,0.9,0.95]
    python bench/planted.py disparity [--seeds 10] [--first-seed 0] [--factors 0.7,0.5] [--group fr] [--band 0.8]
    python bench/planted.py drift [--history 5] [--reruns 3] [--per-group 10] [--factor 0.7]

All plant a known effect with `--plant-disparity DIM=GROUP:FACTOR`: on that group's prompts the
int8 draft's distribution becomes factor*q + (1 - factor)*uniform (call-invariant, so the screen
reproduces it; sampling stays exact, acceptance drops). SmolLM2-135M-Instruct and its int8
self-draft, CPU, T = 1, k = 4, 32 new tokens. The screen uses every core (as in an audit), so
run one bench at a time: two at once on 2 cores oversubscribe the threads (each run took 5x longer).

calibrate: one screen pass over the 130 prompts of `disparity` (decoding seed 0) with the clean
draft, then the same paths with every prompt's q mixed at each factor. Prints mean beta
(sum min(p, q')) and acceptance rate (accepted / proposed at k) as ratios to the clean draft:
how far a factor moves the metric the audit flags.

disparity: the default audit's screen budget on one dimension: `--per-group 10` over the core
set's language prompts (13 groups x 10 parallel pairs = 130 prompts, prompt sample seed 0),
`--engines screen`, then `specaudit analyze` without equivalence. Per factor and decoding seed,
counts whether the planted group is FLAGged on acceptance_rate against the reference (en), and
how many of the 11 unplanted non-reference groups are. Clopper-Pearson intervals. Cost measured
on the idle 2-core machine: 77-85 s wall per screen run, 10 seeds x 2 factors in 27 min
(docs/screen.md, "Planted disparities").

drift: a monitoring history in a fresh SQLite store through `specaudit monitor run`, on one
fixed sample of the vocabulary prompts (common vs rare technical words): `--history` runs with different
decoding seeds, `--reruns`
more without change (each a no-change check against the rolling window), then one run with
the rare group planted, which should alert naming vocabulary=rare_technical. Prints every check.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scipy.stats import binomtest

REPO = Path(__file__).resolve().parents[1]
DIMENSION, REFERENCE = "language", "en"


def _interval(hits: int, n: int) -> str:
    ci = binomtest(hits, n).proportion_ci(0.95) if n else None
    return f"{hits}/{n} = {hits / n:.2f} [{ci.low:.2f}, {ci.high:.2f}]" if n else "n/a"


def _config(args: argparse.Namespace, **changes):
    from specaudit.config import RunConfig

    return RunConfig(
        engines=("screen",),
        draft="int8",
        per_group=args.per_group,
        dimensions=(DIMENSION,),
        max_new_tokens=args.max_new_tokens,
        k=args.k,
        temperature=1.0,
        threads=1,
        **changes,
    )


def _pair(cfg):
    import torch

    from specaudit.models import load_pair

    torch.set_num_threads(cfg.threads)
    return load_pair(cfg.target, cfg.draft, device=cfg.device, dtype=cfg.dtype)


def calibrate(args: argparse.Namespace) -> None:
    from specaudit.engines.batched_sampling import sample_batch, teacher_forced_probs
    from specaudit.engines.decode import eos_token_ids
    from specaudit.execution.plan import derive_seed
    from specaudit.models import DisparityPlant
    from specaudit.prompts import load_prompts, prompt_token_ids
    from specaudit.stats.acceptance import expected_counts, position_acceptance

    cfg = _config(args, seed=0)
    pair = _pair(cfg)
    prompts = load_prompts("core", dimensions=(DIMENSION,), per_group=args.per_group, seed=0).prompts
    # similar lengths share a batch, as in the screen executor
    encoded = sorted(((prompt_token_ids(pair.tokenizer, p, True), derive_seed(0, p.id, 0)) for p in prompts), key=lambda e: len(e[0]))
    eos = eos_token_ids(pair)
    pad_id = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else min(eos)
    factors = [1.0] + [float(f) for f in args.factors.split(",")]
    totals = {f: [0.0, 0, 0.0, 0.0] for f in factors}  # beta sum, positions, accepted, proposed
    started = time.perf_counter()
    for begin in range(0, len(encoded), 32):
        chunk = encoded[begin : begin + 32]
        batch = sample_batch(
            pair.target,
            [ids for ids, _ in chunk],
            [seed for _, seed in chunk],
            spec=cfg.sampling,
            max_new_tokens=cfg.max_new_tokens,
            eos_ids=eos,
            vocab_size=pair.vocab_size,
            pad_id=pad_id,
            keep_probs=True,
        )
        q = teacher_forced_probs(pair.draft, batch, spec=cfg.sampling, vocab_size=pair.vocab_size)
        path_ids = batch.input_ids[:, batch.prompt_width :]
        for row, path in enumerate(batch.tokens):
            for factor in factors:
                q_row = q[row] if factor == 1.0 else DisparityPlant(DIMENSION, "all", factor).mix(q[row].log(), pair.vocab_size).exp()
                beta, accept = position_acceptance(batch.probs[row], q_row, path_ids[row])
                _, proposed, accepted, _ = expected_counts(accept[: len(path)].tolist(), cfg.k, cfg.max_new_tokens)
                total = totals[factor]
                total[0] += float(beta[: len(path)].sum())
                total[1] += len(path)
                total[2] += accepted
                total[3] += proposed
        del q, batch
    clean_beta, clean_rate = totals[1.0][0] / totals[1.0][1], totals[1.0][2] / totals[1.0][3]
    print(f"{len(encoded)} prompts, seed 0, {cfg.max_new_tokens} tokens, k {cfg.k}: {time.perf_counter() - started:.0f} s")
    print("factor  mean beta  ratio  acceptance rate  ratio")
    for factor in factors:
        beta, rate = totals[factor][0] / totals[factor][1], totals[factor][2] / totals[factor][3]
        print(f"{factor:6.2f}  {beta:9.3f}  {beta / clean_beta:5.2f}  {rate:15.3f}  {rate / clean_rate:5.2f}")


def disparity(args: argparse.Namespace) -> None:
    from specaudit.analysis import analyze
    from specaudit.engines import run

    pair = _pair(_config(args))
    work = Path(tempfile.mkdtemp(prefix="planted-disparity-"))
    factors = [float(f) for f in args.factors.split(",")]
    band = (args.band, 1 / args.band)
    started = time.perf_counter()
    table = []
    for factor in factors:
        hits = false_flags = tested = 0
        ratios = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            cfg = _config(args, seed=seed, plant_disparity=f"{DIMENSION}={args.group}:{factor}")
            out = work / f"run-{factor}-{seed}"
            began = time.perf_counter()
            run(cfg, out, pair=pair, progress=False)
            snapshot = analyze(out, equivalence=False, seed=seed, tolerance=band)
            pairwise = snapshot["disparities"][DIMENSION]["metrics"]["acceptance_rate"]["pairwise"]
            planted = pairwise[args.group]
            flagged_others = sorted(g for g, row in pairwise.items() if g != args.group and row["status"] == "FLAG")
            hits += planted["status"] == "FLAG"
            false_flags += len(flagged_others)
            tested += len(pairwise) - 1
            ratios.append(planted["ratio"]["value"])
            r = planted["ratio"]
            print(
                f"factor {factor} seed {seed}: {args.group} ratio {r['value']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] "
                f"{planted['status']} | other groups flagged: {', '.join(flagged_others) or 'none'} | {time.perf_counter() - began:.0f} s",
                flush=True,
            )
        table.append((factor, sum(ratios) / len(ratios), hits, false_flags, tested))
    print(
        f"\n{args.seeds} decoding seed(s) per factor, {args.per_group} pairs per group of {DIMENSION} "
        f"(reference {REFERENCE}, planted {args.group}), {args.max_new_tokens} tokens, k {args.k}, "
        f"band [{band[0]:.2f}, {band[1]:.2f}]: "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(f"{'factor':>6}  {'mean ratio':>10}  {'planted group FLAGged':<28}  unplanted groups FLAGged")
    for factor, ratio, hits, false_flags, tested in table:
        print(f"{factor:6.2f}  {ratio:10.2f}  {_interval(hits, args.seeds):<28}  {_interval(false_flags, tested)}")


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
    plan.append(("planted", ["--seed", str(args.history + args.reruns), "--plant-disparity", f"vocabulary=rare_technical:{args.factor}"]))
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
    c = sub.add_parser("calibrate")
    c.add_argument("--factors", default="0.5,0.7,0.8,0.9,0.95")
    d = sub.add_parser("disparity")
    d.add_argument("--seeds", type=int, default=10)
    d.add_argument("--first-seed", type=int, default=0, help="decoding seeds first-seed .. first-seed + seeds - 1")
    d.add_argument("--factors", default="0.7,0.5")
    d.add_argument("--group", default="fr", help="the planted (non-reference) language group")
    d.add_argument("--band", type=float, default=0.8, help="lower edge of the parity band (the upper is its inverse)")
    for p in (c, d):
        p.add_argument("--per-group", type=int, default=10)
        p.add_argument("--max-new-tokens", type=int, default=32)
        p.add_argument("--k", type=int, default=4)
    m = sub.add_parser("drift")
    m.add_argument("--history", type=int, default=5)
    m.add_argument("--reruns", type=int, default=3)
    m.add_argument("--per-group", type=int, default=10)
    m.add_argument("--factor", type=float, default=0.7)
    m.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()
    {"calibrate": calibrate, "disparity": disparity, "drift": drift}[args.experiment](args)


if __name__ == "__main__":
    main()
