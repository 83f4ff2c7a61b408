"""False-alarm rate of the quick (or default) audit's equivalence verdict on the reference engine, over many seeds.

    python bench/audit_calibration.py --seeds 40 [--budget quick|default] [--first-seed 0] [--json results.json]

Each seed S is `specaudit audit --quick --seed S` (or the default budget) on the embedded pair, minus
the screen and the report, in one process with the pair loaded once: the prompts the audit draws
(the per-group sample at the sample seed, then the engines' subset, execution.plan.engine_subset),
the vanilla control and the reference speculative engine decoded item by item as the local executor
decodes them (engines.decode.decode_item), and the equivalence section as `analyze` builds it
(analysis.equivalence.equivalence_section: teacher-forced scoring with the Monte Carlo nulls, the
battery per engine under Holm at alpha, the two-sample tests, the control judged at its own level).
The screen is left out because `analyze` judges equivalence on the engines' records only.

Every rejection of the reference engine is a false alarm. Prints, after every seed, the rate per
test (unadjusted p < alpha) and for the family (the engine's verdict FAIL, which ends the audit in
`equivalence: FAIL`) with Clopper-Pearson 95% intervals beside the binomial 95% interval of alpha,
and the sign balance of the surprisal and draft-affinity z: how many seeds give z > 0 against the share
the Monte Carlo null expects (not one half: the sums are skewed, see _null_positive_share), and the
mean z (near 0, within 1.96/sqrt(seeds), for a correct sampler).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import binom, binomtest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specaudit.analysis.equivalence import Battery, equivalence_section
from specaudit.analysis.invariants import without_contradicting_counters
from specaudit.audit import DEFAULT_BUDGET, QUICK_BUDGET
from specaudit.config import RunConfig
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE
from specaudit.engines.decode import decode_item, eos_token_ids
from specaudit.execution.folder import load_run_prompts
from specaudit.execution.plan import engine_subset, plan_items
from specaudit.models import load_pair
from specaudit.prompts import prompt_token_ids

BUDGETS = {"quick": QUICK_BUDGET, "default": DEFAULT_BUDGET}
Z_TESTS = ("surprisal", "draft_affinity")


def audit_records(pair, cfg: RunConfig) -> list[dict]:
    """The engines' records of one audit at cfg (the screen's left out), as records.jsonl holds them."""
    prompt_set = load_run_prompts(cfg)
    subset = engine_subset(prompt_set, cfg)
    items = [item for item in plan_items(prompt_set.prompts, cfg, cfg.engines, subset) if item.engine != SCREEN_ENGINE]
    eos = eos_token_ids(pair)
    encoded = {p.id: prompt_token_ids(pair.tokenizer, p, cfg.chat_template) for p in prompt_set.prompts}
    verify = cfg.load_verify()  # the reference verifier unless cfg names another
    return [decode_item(pair, cfg, item, encoded[item.prompt.id], verify, eos).to_json() for item in items]


def _engine_summary(entry) -> dict:
    gof = entry.goodness_of_fit
    tests = {row.test: row.model_dump() for row in (gof.gate if gof is not None else [])}
    return {
        "verdict": str(entry.verdict),
        "status": str(entry.status),
        "holm_pvalue": getattr(gof, "pvalue", None),
        "n_tokens": getattr(gof, "n_tokens", None),
        "pvalues": {name: row["pvalue"] for name, row in tests.items()},
        "holm": {name: row["holm_pvalue"] for name, row in tests.items()},
        "z": {name: row["statistic"] for name, row in tests.items()},
        "two_sample": str(entry.two_sample.verdict) if entry.two_sample is not None else None,
    }


def one_audit(pair, options: dict, seed: int, alpha: float, analysis_seed: int) -> dict:
    cfg = RunConfig(**{**options, "seed": seed})
    started = time.process_time()
    records = without_contradicting_counters(audit_records(pair, cfg))
    decoded = time.process_time()
    dims = sorted({d for r in records for d in r.get("attributes", {})})
    section, scores = equivalence_section(records, Battery(pair, alpha=alpha, delta=0.05, dimensions=dims, seed=analysis_seed))
    engines = {name: _engine_summary(entry) for name, entry in section.engines.items()}
    for name, entry in engines.items():
        entry["null_positive"] = _null_positive_share(scores.select(engine=name)) if scores is not None else {}
    return {
        "seed": seed,
        "decode_cpu_s": decoded - started,
        "analyze_cpu_s": time.process_time() - decoded,
        "status": str(section.status),
        "draft_tv": (section.draft_scoring or {}).get("max_tv"),
        "engines": engines,
    }


def _null_positive_share(scores) -> dict:
    """Per z test, the share of its Monte Carlo null draws above 0: where a correct engine's z falls
    positive. Not exactly 1/2: the surprisal sum has a long right tail (a rare token costs many nats),
    which pulls its median below 0, and draft affinity's long left tail (a near-certain draft token
    missed) pulls its median above 0 (at the quick budget both shares came out 0.49 to 0.51). The
    sign balance is judged against these shares."""
    null = scores.monte_carlo_null or {}
    keys = scores.tokens["key"].unique().tolist()
    out = {}
    for name in Z_TESTS:
        draws = null.get(name) or {}
        if keys and all(key in draws for key in keys):
            out[name] = float(np.mean(np.sum([np.asarray(draws[key], dtype=float) for key in keys], axis=0) > 0))
    return out


def _interval(hits: int, n: int) -> str:
    if not n:
        return "n/a"
    ci = binomtest(hits, n).proportion_ci(0.95)
    return f"{hits}/{n} = {hits / n:.3f} [{ci.low:.3f}, {ci.high:.3f}]"


def summary(results: list[dict], alpha: float) -> dict:
    """Rates with their Clopper-Pearson intervals, and the z's sign balance, per engine."""
    n = len(results)
    low, high = (x / n for x in binom.interval(0.95, n, alpha))
    out = {"seeds": n, "alpha": alpha, "alpha_interval": [low, high], "engines": {}}
    for engine in (SPECULATIVE_ENGINE, CONTROL_ENGINE):
        rows = [r["engines"][engine] for r in results if engine in r["engines"]]
        if not rows:
            continue
        names = sorted({name for row in rows for name in row["pvalues"]})
        entry = {
            "family": sum(row["verdict"] == "FAIL" for row in rows),
            "family_at_alpha": sum((row["holm_pvalue"] or 1.0) < alpha for row in rows),
            "tests": {name: sum(row["pvalues"].get(name, 1.0) < alpha for row in rows) for name in names},
            "signs": {},
        }
        for name in Z_TESTS:
            z = [row["z"][name] for row in rows if name in row["z"] and math.isfinite(row["z"][name])]
            if z:
                positive = sum(v > 0 for v in z)
                mean = sum(z) / len(z)
                shares = [row["null_positive"][name] for row in rows if name in row.get("null_positive", {})]
                expected = float(np.mean(shares)) if shares else 0.5
                entry["signs"][name] = {
                    "positive": positive,
                    "n": len(z),
                    "expected_positive_share": expected,
                    "sign_pvalue": binomtest(positive, len(z), expected).pvalue,
                    "mean_z": mean,
                    "mean_z_pvalue": math.erfc(abs(mean) * math.sqrt(len(z)) / math.sqrt(2)),
                }
        pairs = [(row["z"][Z_TESTS[0]], row["z"][Z_TESTS[1]]) for row in rows if all(name in row["z"] for name in Z_TESTS)]
        if len(pairs) > 2:  # the two statistics lean together under H0 too: tokens the target finds likely, the draft does
            entry["z_correlation"] = float(np.corrcoef(np.array(pairs).T)[0, 1])
        out["engines"][engine] = entry
    return out


def report(results: list[dict], args: argparse.Namespace, cpu_s: float, wall_s: float) -> str:
    s = summary(results, args.alpha)
    n = s["seeds"]
    lines = [
        f"{args.budget} audit of the embedded pair, {n} seeds from {args.first_seed}, alpha = {args.alpha}: {cpu_s:.0f} CPU s, "
        f"{wall_s:.0f} s wall ({cpu_s / max(n, 1):.0f} CPU s per seed; decoding "
        f"{sum(r['decode_cpu_s'] for r in results) / max(n, 1):.0f}, scoring and tests "
        f"{sum(r['analyze_cpu_s'] for r in results) / max(n, 1):.0f}); draft q teacher-forced vs decoding TV up to "
        f"{max((r['draft_tv'] or 0.0) for r in results):.1e}",
        f"binomial 95% interval of alpha over {n} seeds: [{s['alpha_interval'][0]:.3f}, {s['alpha_interval'][1]:.3f}]",
    ]
    for engine, entry in s["engines"].items():
        label = "control (judged at alpha x 0.02; rates here at alpha)" if engine == CONTROL_ENGINE else "engine"
        lines.append(f"{engine} {label}:")
        if engine != CONTROL_ENGINE:
            lines.append("  family (verdict FAIL, the audit's equivalence: FAIL): " + _interval(entry["family"], n))
        lines.append("  family (Holm over the battery) at alpha: " + _interval(entry["family_at_alpha"], n))
        for name, hits in entry["tests"].items():
            lines.append(f"  {name} (unadjusted): " + _interval(hits, n))
        if "z_correlation" in entry:
            lines.append(f"  correlation of the surprisal and draft-affinity z over the seeds: {entry['z_correlation']:+.2f}")
        for name, sign in entry["signs"].items():
            lines.append(
                f"  {name} z > 0 in {sign['positive']}/{sign['n']}, expected {sign['expected_positive_share']:.2f} of them by the "
                f"Monte Carlo null (binomial p = {sign['sign_pvalue']:.3f}); "
                f"mean z {sign['mean_z']:+.3f} (p = {sign['mean_z_pvalue']:.3f} against N(0, 1/n))"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40, help="audits (decoding seeds, as --seed) to run (default 40)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="quick", help="the audit's budget (default quick)")
    parser.add_argument("--budget-s", type=float, default=math.inf, help="stop after the seed that passes this many CPU seconds")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--analysis-seed", type=int, default=0, help="analyze's --seed (PIT draws), 0 as in the audit")
    parser.add_argument("--json", type=Path, help="also write the per-seed results and the summary here")
    parser.add_argument("--summarize", type=Path, nargs="+", help="only report on the seeds of these --json files (parallel runs)")
    args = parser.parse_args()
    if args.summarize:
        files = [json.loads(path.read_text()) for path in args.summarize]
        budgets = {data.get("budget", args.budget) for data in files}
        if len(budgets) > 1:
            sys.exit(f"--summarize: the files hold audits of different budgets ({', '.join(sorted(budgets))})")
        args.budget = budgets.pop()
        results = {r["seed"]: r for data in files for r in data["seeds"]}
        seeds = [results[s] for s in sorted(results)]
        args.first_seed, cpu = seeds[0]["seed"], sum(r["decode_cpu_s"] + r["analyze_cpu_s"] for r in seeds)
        print(report(seeds, args, cpu, math.nan))
        if args.json:
            args.json.write_text(json.dumps({"budget": args.budget, "summary": summary(seeds, args.alpha), "seeds": seeds}, indent=1))
        return

    options = {key: value for key, value in BUDGETS[args.budget].items()}
    cfg = RunConfig(**options)
    torch.set_num_threads(cfg.threads)  # one thread, as the audit's engines decode (the screen executor's load)
    pair = load_pair(cfg.target, cfg.draft, device=cfg.device, dtype=cfg.dtype)
    started, wall_started = time.process_time(), time.perf_counter()
    results: list[dict] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        if time.process_time() - started > args.budget_s:
            break
        results.append(one_audit(pair, options, seed, args.alpha, args.analysis_seed))
        row = results[-1]["engines"][SPECULATIVE_ENGINE]
        print(
            f"seed {seed}: {results[-1]['status']}; speculative Holm p {row['holm_pvalue']:.4f} "
            + " ".join(f"{k} p={v:.4f}" for k, v in row["pvalues"].items())
            + " | z "
            + " ".join(f"{k}={row['z'].get(k, math.nan):+.2f}" for k in Z_TESTS),
            flush=True,
        )
        # after every seed: a cut-short run still reports
        print(report(results, args, time.process_time() - started, time.perf_counter() - wall_started), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"budget": args.budget, "summary": summary(results, args.alpha), "seeds": results}, indent=1))


if __name__ == "__main__":
    main()
