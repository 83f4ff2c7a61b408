"""The before/after section of the report: what `specaudit mitigate` changed, from the snapshot's
`mitigation` part (the re-audit's before_after.json), and the equivalence verdict of the
mitigated draft read from the snapshot's own equivalence section (checked by `analyze` on the
real engine's run, never taken from the summary's word)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specaudit.contracts import EquivalenceStatus
from specaudit.contracts.snapshot import (
    BeforeAfter,
    MitigatedEquivalence,
    MitigatedGroup,
    MitigationComparison,
    PairedChange,
    PolicyReaudit,
)
from specaudit.report.view.base import NOT_RUN
from specaudit.report.view.format import MISSING, badge, finite, fixed, integer, num, recorded, triple
from specaudit.report.view.statuses import engine_status, status_badge

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import GroupPolicy, MetricEstimate, Snapshot

OVERALL = "(overall)"
LOSS_LIMIT = -0.05  # a group losing more than 5% of its acceptance is named


def mitigation_view(snapshot: Snapshot) -> dict[str, Any]:
    part = snapshot.mitigation
    if part is None:
        return {"ran": False}
    comparison = part.comparison or MitigationComparison()
    rows = comparison.groups
    lowest = part.lowest_group_by_audit
    reference = _given(comparison.reference)
    groups = [_row(str(g), r, g == lowest, g == reference) for g, r in rows.items() if g != OVERALL]
    overall_row = rows.get(OVERALL) or MitigatedGroup()
    overall = _row("overall", overall_row, False, False)
    overall_speed = overall_row.speedup or PairedChange()
    worst = comparison.worst_ratio or BeforeAfter()
    lowest_row = rows.get(lowest) if lowest is not None else None
    losers = [g["group"] for g in groups if finite(g["relative"]) and g["relative"] < LOSS_LIMIT]
    cost_ratio = comparison.cost_ratio if "cost_ratio" in comparison.model_fields_set else (part.cost.cost_ratio if part.cost else None)
    return {
        "ran": True,
        "trained": bool(part.trained) if "trained" in part.model_fields_set else True,
        "not_trained": str(part.not_trained or ""),
        "fit_source": recorded(part.policy_fit.speed_source if part.policy_fit is not None else None),
        "fit_prompts": integer(part.train_prompts),
        "held_prompts": integer(part.held_out_prompts),
        "policy_reaudit": _policy_reaudit(part.policy_reaudit or PolicyReaudit()),
        "dimension": _given(part.dimension),
        "source_run": _given(part.source_run),
        "weighting": _given(part.weighting),
        "measurement": part.measurement or "",
        "reference": reference,
        "lowest": lowest or MISSING,
        "lowest_badge": _change_badge(lowest_row.change if lowest_row is not None else None),
        "lowest_text": f"{triple(lowest_row.before, _three)} → {triple(lowest_row.after, _three)}"
        if lowest_row is not None and lowest_row.model_fields_set
        else MISSING,
        "worst_ratio": f"{fixed(worst.before)} → {fixed(worst.after)}",
        "overall_speedup": f"{triple(overall_speed.before, fixed, '×')} → {triple(overall_speed.after, fixed, '×')}",
        "losers": losers,
        "run_k": _given(part.run_k),
        "cost_ratio": fixed(cost_ratio, 3),
        "groups": groups,
        "overall": overall,
        "weightings": [
            {
                "name": str(name),
                "overall": triple(entry.overall_after, _three),
                "lowest": triple(entry.lowest_group_after, _three),
                "change": triple(entry.lowest_group_change, _three),
                "worst": fixed(entry.worst_ratio.after if entry.worst_ratio is not None else None),
            }
            for name, entry in part.weightings.items()
        ],
        "policies": [_policy(str(g), p) for g, p in part.policies.items()],
        "equivalence": _equivalence(snapshot, part.equivalence or MitigatedEquivalence()),
    }


def _given(value: Any) -> Any:
    """A summary's field as written, or MISSING where it has none."""
    return MISSING if value is None else value


def _three(value: Any) -> str:
    """Acceptance to three decimals (as before_after.md), so a column of intervals lines up."""
    return fixed(value, 3)


def _row(label: str, row: MitigatedGroup, lowest: bool, reference: bool) -> dict[str, Any]:
    ratio = row.ratio_to_reference
    speed = row.speedup or PairedChange()
    return {
        "group": label,
        "lowest": lowest,
        "reference": reference,
        "n": integer(row.before.n_prompts if row.before is not None else None),
        "before": triple(row.before, _three),
        "after": triple(row.after, _three),
        "change": triple(row.change, _three),
        "change_badge": _change_badge(row.change),
        "relative": row.relative_change,
        "relative_text": f"{100 * row.relative_change:+.0f}%" if finite(row.relative_change) else MISSING,
        "ratio": f"{fixed(ratio.before)} → {fixed(ratio.after)}" if ratio is not None and ratio.model_fields_set else "",
        "speed_before": triple(speed.before, fixed, "×"),
        "speed_after": triple(speed.after, fixed, "×"),
        "speed_change": triple(speed.change, _three),
    }


def _change_badge(change: MetricEstimate | None) -> dict[str, str]:
    """A paired change whose whole interval lies above 0 gained, below 0 lost, else unclear."""
    low, high = (change.ci_low, change.ci_high) if change is not None else (None, None)
    if not (finite(low) and finite(high)):
        return badge(NOT_RUN)
    if low > 0:
        return {"text": "GAINED", "css": "pass", "symbol": "↑", "key": "gained"}
    if high < 0:
        return {"text": "LOST", "css": "fail", "symbol": "↓", "key": "lost"}
    return {"text": "NO CLEAR CHANGE", "css": "warn", "symbol": "=", "key": "unclear"}


def _policy(group: str, entry: GroupPolicy) -> dict[str, str]:
    predicted = entry.predicted_speedup_held_out
    fit = entry.measured_speedup_fit
    return {
        "group": group,
        "k": "0" if entry.route_to_vanilla else str(_given(entry.k)),
        "route": "yes" if entry.route_to_vanilla else "no",
        "alpha": _three(entry.alpha),
        "fit_speed": triple(fit, fixed, "×") if fit is not None and fit.model_fields_set else MISSING,
        "predicted": f"{fixed(predicted.run_k)}× / {fixed(predicted.policy)}×"
        if predicted is not None and predicted.model_fields_set
        else MISSING,
        "reason": str(entry.reason or MISSING),
    }


def _policy_reaudit(part: PolicyReaudit) -> dict[str, Any]:
    """The policies' timed re-audit on held-out prompts: per group and overall, speed-up without
    the policy (speculation at the run's k everywhere), with it, and with / without."""
    if part.status != "run":
        return {"ran": False, "reason": str(part.reason or "not timed")}
    rows = []
    for group, row in part.groups.items():
        overall = group == OVERALL
        rows.append(
            {
                "group": "overall" if overall else str(group),
                "overall": overall,
                "policy": "—" if overall else "plain decoding" if row.route_to_vanilla else f"speculate, k = {row.k}",
                "n": integer(row.n_prompts),
                "without": triple(row.speedup_without_policy, fixed, "×"),
                "with": triple(row.speedup_with_policy, fixed, "×"),
                "gain": triple(row.gain_with_policy, fixed, "×"),
                "slower": bool(row.slower_than_vanilla_with_policy),
            }
        )
    slower = [str(g) for g in part.slower_than_vanilla_with_policy]
    timed = part.groups.get(OVERALL)
    return {
        "ran": True,
        "rows": rows,
        "run_k": _given(part.run_k),
        "timed": integer(timed.n_prompts if timed is not None else None),
        "max_new_tokens": _given(part.max_new_tokens),
        "routed": ", ".join(str(g) for g in part.routed) or "none",
        "slower": ", ".join(slower) or "none",
        "slower_badge": badge(NOT_RUN)
        if not rows
        else {"text": "SLOWER", "css": "fail", "symbol": "↓", "key": "slower"}
        if slower
        else {"text": "NONE SLOWER", "css": "pass", "symbol": "✓", "key": "none-slower"},
        "method": str(part.method or "") + (f"; decoded by {part.engines}" if part.engines else ""),
    }


def _equivalence(snapshot: Snapshot, summary: MitigatedEquivalence) -> dict[str, Any]:
    """The verdict on the mitigated draft: the snapshot's own equivalence result for its
    speculative engine(s); 'not run' (with the summary's reason) when the re-audit did not run."""
    section = snapshot.equivalence
    engines = [(str(n), engine_status(e)) for n, e in section.engines.items() if n != section.control]
    if not engines or all(status == EquivalenceStatus.NOT_RUN for _, status in engines):
        return {
            "ran": False,
            "badge": badge(NOT_RUN),
            "reason": str(summary.reason or "the re-audit run with the mitigated draft has no equivalence result"),
        }
    order = [EquivalenceStatus.VIOLATION, EquivalenceStatus.NO_VIOLATION_FOUND, EquivalenceStatus.EQUIVALENT, EquivalenceStatus.NOT_RUN]
    worst_first = sorted(engines, key=lambda e: order.index(e[1]))
    name, status = worst_first[0]
    return {
        "ran": True,
        "badge": status_badge(status),
        "engine": name,
        "prompts": len(summary.prompts) or MISSING,
        "records": integer(snapshot.run.n_records),
        "tokens": integer(snapshot.run.n_output_tokens),
        "gof_p": num(summary.goodness_of_fit_p),
        "tv_upper": num(summary.tv_bound),
    }


__all__ = ["mitigation_view"]
