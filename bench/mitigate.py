"""audit → mitigate → re-audit on the real default pair (SmolLM2-135M-Instruct target).

    python bench/mitigate.py [--run DIR] [--out DIR] [--draft early-exit:12] [--per-group 3]
                             [--max-new-tokens 24] [--steps 60] [--compare balanced,unweighted]

1. Audit (unless --run names an analysed run folder): the target with an early-exit draft (its
   first N layers + its head; the int8 self-draft has no float weights to train) on the core
   set's language prompts, vanilla + speculative, T = 1, k = 4, then `analyze` (no equivalence:
   the audit's role here is to find the groups and their acceptance).
2. `specaudit.mitigate` on that folder: the lowest-acceptance language is whatever the audit
   finds; held-out prompts are whole parallel pairs; the draft is distilled with
   inverse-acceptance weights and, at the same budget, with each --compare weighting.
3. Prints the evidence: the audit's lowest group before/after on held-out prompts (interval of
   the after value and of the paired change), every other group's relative change (the claim is
   that none loses more than 5%), the weighting comparison, predicted vs measured speed-up of
   the policies, and the equivalence verdict of the distilled draft. Writes OUT/bench.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def audit_run(run_dir: Path, draft: str, per_group: int, max_new_tokens: int) -> float:
    from specaudit.analysis import analyze
    from specaudit.config import RunConfig
    from specaudit.engines import run

    started = time.perf_counter()
    cfg = RunConfig(draft=draft, prompts="core", dimensions=("language",), per_group=per_group, max_new_tokens=max_new_tokens)
    run(cfg, run_dir, progress=True, command="bench/mitigate.py (audit)")
    analyze(run_dir, equivalence=False)
    return time.perf_counter() - started


def _fmt(entry: dict | None) -> str:
    return "–" if not entry or entry.get("value") is None else f"{entry['value']:.3f} [{entry['ci_low']:.3f}, {entry['ci_high']:.3f}]"


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="an analysed run folder (default: audit one into OUT/audit)")
    parser.add_argument("--out", type=Path, default=Path("bench-mitigate"))
    parser.add_argument("--draft", default="early-exit:12")
    parser.add_argument("--per-group", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--mitigate-per-group", type=int, help="prompts per group drawn from the run's prompt set for mitigation")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--compare", default="unweighted")
    parser.add_argument("--equivalence-prompts", type=int, default=3)
    parser.add_argument("--timing-prompts", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from specaudit.mitigate import mitigate

    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = args.run or args.out / "audit"
    audit_seconds = None
    if not (run_dir / "snapshot.json").is_file():
        audit_seconds = audit_run(run_dir, args.draft, args.per_group, args.max_new_tokens)
    started = time.perf_counter()
    result = mitigate(
        run_dir,
        args.out / "mitigated",
        draft=args.draft,
        compare=[c for c in args.compare.split(",") if c],
        steps=args.steps,
        samples=args.samples,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        equivalence_prompts=args.equivalence_prompts,
        timing_prompts=args.timing_prompts,
        per_group=args.mitigate_per_group,
    )
    seconds = time.perf_counter() - started
    summary = result.summary
    groups = summary["comparison"]["groups"]
    worst = summary["lowest_group_by_audit"]
    row = groups[worst]
    others = {g: r.get("relative_change") for g, r in groups.items() if g not in (worst, "(overall)")}
    excluded = row["after"]["ci_low"] > row["before"]["value"]
    evidence = {
        "dimension": summary["dimension"],
        "lowest_group_by_audit": worst,
        "before": row["before"],
        "after": row["after"],
        "paired_change": row["change"],
        "after_interval_excludes_before_value": excluded,
        "ratio_to_reference": row["ratio_to_reference"],
        "worst_ratio": summary["comparison"]["worst_ratio"],
        "other_groups_relative_change": others,
        "largest_loss_of_another_group": min(others.values()) if others else None,
        "weightings": summary["weightings"],
        "policies": {
            g: {
                "k": p["k"],
                "route": p["route_to_vanilla"],
                "predicted": p["predicted_speedup_held_out"],
            }
            for g, p in summary["policies"].items()
        },
        "policy_reaudit": summary.get("policy_reaudit"),
        "cost": summary["cost"],
        "equivalence": summary["equivalence"],
        "seconds": {"audit": audit_seconds, "mitigate": round(seconds, 1)},
        "budget": summary["budget"],
    }
    (args.out / "bench.json").write_text(json.dumps(evidence, indent=2) + "\n")
    print(f"\n{summary['dimension']}: lowest group by the audit = {worst}")
    print(
        f"  before {_fmt(row['before'])}  after {_fmt(row['after'])}  paired change {_fmt(row['change'])}  "
        f"after-interval excludes before value: {excluded}"
    )
    print(f"  ratio to reference {row['ratio_to_reference']['before']:.3f} -> {row['ratio_to_reference']['after']:.3f}")
    print("  other groups' relative change: " + ", ".join(f"{g} {100 * v:+.1f}%" for g, v in others.items() if v is not None))
    print((result.out_dir / "before_after.md").read_text())
    print(
        f"mitigate: {seconds:.0f} s; audit: {audit_seconds if audit_seconds is None else round(audit_seconds)} s; "
        f"outputs in {result.out_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
