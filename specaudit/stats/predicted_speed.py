"""Speed-up per screened prompt from the cost model fitted on the engines' timed subset, and how
well that model predicted the timed prompts (overall and per group)."""

from __future__ import annotations

import math

import pandas as pd

from specaudit.contracts.run import SCREEN_ENGINE, SPECULATIVE_ENGINE


def predicted_speed(frame: pd.DataFrame, *, dimensions: list[str] = (), alpha: float = 0.05) -> tuple[pd.DataFrame, dict]:
    """The screen's speed columns from a cost model fitted on the engines' timed subset
    (specaudit.stats.cost_model); the snapshot's `speed` section says how it was made and how
    well it predicted the timed prompts, overall and per group (a group mispredicted at Holm-adjusted
    p < alpha is a finding). Without enough timed prompts the columns stay empty."""
    from specaudit.stats import cost_model as cm

    timed = cm.timed_prompts(frame) if SPECULATIVE_ENGINE in set(frame["engine"]) else pd.DataFrame()
    if len(timed) < cm.MIN_TIMED_PROMPTS:
        reason = (
            f"{len(timed)} prompt(s) timed by both vanilla and speculative decoding; the cost model needs "
            f"{cm.MIN_TIMED_PROMPTS} (run the engines beside the screen: --engines screen,vanilla,speculative)"
        )
        return frame, {"source": "none", "reason": reason}
    model = cm.fit_cost_model(timed)
    validation = cm.validate_cost_model(timed)
    screen = frame["engine"] == SCREEN_ENGINE
    rows = frame[screen]
    vanilla, speculative = model.predict(
        rows["prompt_token_ids"].map(len), rows["output_token_ids"].map(len), rows["steps"], rows["proposed"]
    )
    frame = frame.copy()
    frame.loc[screen, "predicted_vanilla_wall_s"] = vanilla
    frame.loc[screen, "predicted_wall_s"] = speculative
    measured = validation.per_prompt["measured"]
    attributes = frame.drop_duplicates("prompt_id").set_index("prompt_id")["attributes"]
    labels = {
        dimension: {pid: str(a[dimension]) for pid, a in attributes.items() if isinstance(a, dict) and dimension in a}
        for dimension in dimensions
    }
    group_checks = cm.validate_groups(validation, labels)
    by_group: dict[str, dict] = {}
    for check in group_checks:
        by_group.setdefault(check.dimension, {})[check.group] = check.to_dict()
    off = [c for c in group_checks if c.pvalue_holm < alpha]
    # One timed prompt cannot tell a group's effect from one timing's glitch (seen: the same prompt and
    # tokens timed 12% slower in another run, z = 4.1), so only replicated groups make a finding.
    mispredicted = [c for c in off if c.n_prompts >= cm.MIN_TIMED_PER_GROUP]
    single = [c for c in off if c.n_prompts < cm.MIN_TIMED_PER_GROUP]
    section = {
        "source": "cost model",
        "note": (
            "speed-up per group is predicted for every screened prompt from its expected steps and draft "
            f"proposals and the costs measured on {len(timed)} prompts timed by both engines; the group "
            "intervals hold the cost model fixed, and the validation below says how far to trust it"
        ),
        "cost_model": model.to_dict(),
        "validation": validation.to_dict(),
        "measured_speedup_timed_prompts": float(measured.mean()),
        "timed_prompts": [
            {"prompt_id": str(pid), "measured": float(m), "predicted": float(pr)}
            for pid, m, pr in zip(validation.per_prompt.index, measured, validation.per_prompt["predicted"], strict=True)
        ],
        "validation_by_group": by_group,
        "validation_by_group_tested": len(group_checks),
        "validation_by_group_smallest_pvalue_holm": min(
            (c.pvalue_holm for c in group_checks if math.isfinite(c.pvalue_holm)), default=None
        ),
        "validation_by_group_method": (
            "each group's log(measured / predicted) against the other timed prompts': t with the others' variance "
            "(a prediction interval, so one timed prompt suffices), Holm over every group of every dimension"
        ),
    }
    findings = []
    if not validation.holds:
        findings.append(
            f"measured speed-up / predicted = {validation.statistic:.2f} [{validation.ci_low:.2f}, {validation.ci_high:.2f}] "
            f"on {validation.n_prompts} timed prompts: the cost model misses something, so the predicted speed-ups "
            "per group are off by about this factor"
        )
    if mispredicted:
        listed = "; ".join(c.describe() for c in mispredicted)
        findings.append(
            f"measured / predicted speed-up differs for {len(mispredicted)} group(s) from the other timed prompts: {listed}; "
            "the cost model misses something about these groups, so their predicted speed-ups are off by about that factor"
        )
    if findings:
        section["finding"] = "; and ".join(findings)
    if single:
        section["single_prompt_outliers"] = (
            f"the one timed prompt of {len(single)} group(s) is off its prediction: {'; '.join(c.describe() for c in single)}; "
            "one timing's glitch looks the same, so this is not a finding: re-time with --timing-repeats 2 to tell"
        )
    return frame, section
