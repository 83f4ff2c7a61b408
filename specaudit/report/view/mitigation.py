"""The before/after section of the report: what `specaudit mitigate` changed, from the snapshot's
`mitigation` part (the re-audit's before_after.json), and the equivalence verdict of the
mitigated draft read from the snapshot's own equivalence section (checked by `analyze` on the
real engine's run, never taken from the summary's word)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specaudit.contracts import EquivalenceStatus
from specaudit.report.view.base import NOT_RUN
from specaudit.report.view.format import MISSING, badge, finite, fixed, integer, mapping, num, recorded, triple
from specaudit.report.view.statuses import engine_status, status_badge

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot

OVERALL = "(overall)"
LOSS_LIMIT = -0.05  # a group losing more than 5% of its acceptance is named


def mitigation_view(snapshot: Snapshot) -> dict[str, Any]:
    # mitigate's before_after.json as it wrote it: a summary of its own, read as the open mapping it is
    part = snapshot.mitigation
    if part is None:
        return {"ran": False}
    comparison = mapping(part.get("comparison"))
    rows = mapping(comparison.get("groups"))
    lowest = part.get("lowest_group_by_audit")
    reference = comparison.get("reference", MISSING)
    groups = [_row(str(g), r, g == lowest, g == reference) for g, r in rows.items() if g != OVERALL and isinstance(r, Mapping)]
    overall = _row("overall", mapping(rows.get(OVERALL)), False, False)
    worst = mapping(comparison.get("worst_ratio"))
    lowest_row = mapping(rows.get(lowest))
    losers = [g["group"] for g in groups if finite(g["relative"]) and g["relative"] < LOSS_LIMIT]
    return {
        "ran": True,
        "trained": bool(part.get("trained", True)),
        "not_trained": str(part.get("not_trained") or ""),
        "fit_source": recorded(mapping(part.get("policy_fit")).get("speed_source")),
        "fit_prompts": integer(part.get("train_prompts")),
        "held_prompts": integer(part.get("held_out_prompts")),
        "policy_reaudit": _policy_reaudit(mapping(part.get("policy_reaudit"))),
        "dimension": part.get("dimension", MISSING),
        "source_run": part.get("source_run", MISSING),
        "weighting": part.get("weighting", MISSING),
        "measurement": part.get("measurement", ""),
        "reference": reference,
        "lowest": lowest or MISSING,
        "lowest_badge": _change_badge(lowest_row.get("change")),
        "lowest_text": f"{triple(lowest_row.get('before'), _three)} → {triple(lowest_row.get('after'), _three)}" if lowest_row else MISSING,
        "worst_ratio": f"{fixed(worst.get('before'))} → {fixed(worst.get('after'))}",
        "overall_speedup": f"{triple(mapping(overall['raw'].get('speedup')).get('before'), fixed, '×')} → "
        f"{triple(mapping(overall['raw'].get('speedup')).get('after'), fixed, '×')}",
        "losers": losers,
        "run_k": part.get("run_k", MISSING),
        "cost_ratio": fixed(comparison.get("cost_ratio", mapping(part.get("cost")).get("cost_ratio")), 3),
        "groups": groups,
        "overall": overall,
        "weightings": [
            {
                "name": str(name),
                "overall": triple(entry.get("overall_after"), _three),
                "lowest": triple(entry.get("lowest_group_after"), _three),
                "change": triple(entry.get("lowest_group_change"), _three),
                "worst": fixed(mapping(entry.get("worst_ratio")).get("after")),
            }
            for name, entry in mapping(part.get("weightings")).items()
            if isinstance(entry, Mapping)
        ],
        "policies": [_policy(str(g), p) for g, p in mapping(part.get("policies")).items() if isinstance(p, Mapping)],
        "equivalence": _equivalence(snapshot, mapping(part.get("equivalence"))),
    }


def _three(value: Any) -> str:
    """Acceptance to three decimals (as before_after.md), so a column of intervals lines up."""
    return fixed(value, 3)


def _row(label: str, row: Mapping[str, Any], lowest: bool, reference: bool) -> dict[str, Any]:
    ratio = mapping(row.get("ratio_to_reference"))
    speed = mapping(row.get("speedup"))
    return {
        "group": label,
        "raw": row,
        "lowest": lowest,
        "reference": reference,
        "n": integer(mapping(row.get("before")).get("n_prompts")),
        "before": triple(row.get("before"), _three),
        "after": triple(row.get("after"), _three),
        "change": triple(row.get("change"), _three),
        "change_badge": _change_badge(row.get("change")),
        "relative": row.get("relative_change"),
        "relative_text": f"{100 * row['relative_change']:+.0f}%" if finite(row.get("relative_change")) else MISSING,
        "ratio": f"{fixed(ratio.get('before'))} → {fixed(ratio.get('after'))}" if ratio else "",
        "speed_before": triple(speed.get("before"), fixed, "×"),
        "speed_after": triple(speed.get("after"), fixed, "×"),
        "speed_change": triple(speed.get("change"), _three),
    }


def _change_badge(change: Any) -> dict[str, str]:
    """A paired change whose whole interval lies above 0 gained, below 0 lost, else unclear."""
    low, high = mapping(change).get("ci_low"), mapping(change).get("ci_high")
    if not (finite(low) and finite(high)):
        return badge(NOT_RUN)
    if low > 0:
        return {"text": "GAINED", "css": "pass", "symbol": "↑", "key": "gained"}
    if high < 0:
        return {"text": "LOST", "css": "fail", "symbol": "↓", "key": "lost"}
    return {"text": "NO CLEAR CHANGE", "css": "warn", "symbol": "=", "key": "unclear"}


def _policy(group: str, entry: Mapping[str, Any]) -> dict[str, str]:
    predicted = mapping(entry.get("predicted_speedup_held_out"))
    return {
        "group": group,
        "k": "0" if entry.get("route_to_vanilla") else str(entry.get("k", MISSING)),
        "route": "yes" if entry.get("route_to_vanilla") else "no",
        "alpha": _three(entry.get("alpha")),
        "fit_speed": triple(entry.get("measured_speedup_fit"), fixed, "×") if entry.get("measured_speedup_fit") else MISSING,
        "predicted": f"{fixed(predicted.get('run_k'))}× / {fixed(predicted.get('policy'))}×" if predicted else MISSING,
        "reason": str(entry.get("reason") or MISSING),
    }


def _policy_reaudit(part: Mapping[str, Any]) -> dict[str, Any]:
    """The policies' timed re-audit on held-out prompts: per group and overall, speed-up without
    the policy (speculation at the run's k everywhere), with it, and with / without."""
    if part.get("status") != "run":
        return {"ran": False, "reason": str(part.get("reason") or "not timed")}
    rows = []
    for group, row in mapping(part.get("groups")).items():
        if not isinstance(row, Mapping):
            continue
        overall = group == OVERALL
        with_policy = mapping(row.get("speedup_with_policy"))
        rows.append(
            {
                "group": "overall" if overall else str(group),
                "overall": overall,
                "policy": "—" if overall else "plain decoding" if row.get("route_to_vanilla") else f"speculate, k = {row.get('k')}",
                "n": integer(row.get("n_prompts")),
                "without": triple(row.get("speedup_without_policy"), fixed, "×"),
                "with": triple(with_policy, fixed, "×"),
                "gain": triple(row.get("gain_with_policy"), fixed, "×"),
                "slower": bool(row.get("slower_than_vanilla_with_policy")),
            }
        )
    slower = [str(g) for g in part.get("slower_than_vanilla_with_policy") or []]
    return {
        "ran": True,
        "rows": rows,
        "run_k": part.get("run_k", MISSING),
        "timed": integer(mapping(mapping(part.get("groups")).get(OVERALL)).get("n_prompts")),
        "max_new_tokens": part.get("max_new_tokens", MISSING),
        "routed": ", ".join(str(g) for g in part.get("routed") or []) or "none",
        "slower": ", ".join(slower) or "none",
        "slower_badge": badge(NOT_RUN)
        if not rows
        else {"text": "SLOWER", "css": "fail", "symbol": "↓", "key": "slower"}
        if slower
        else {"text": "NONE SLOWER", "css": "pass", "symbol": "✓", "key": "none-slower"},
        "method": str(part.get("method") or "") + (f"; decoded by {part['engines']}" if part.get("engines") else ""),
    }


def _equivalence(snapshot: Snapshot, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict on the mitigated draft: the snapshot's own equivalence result for its
    speculative engine(s); 'not run' (with the summary's reason) when the re-audit did not run."""
    section = snapshot.equivalence
    engines = [(str(n), engine_status(e)) for n, e in section.engines.items() if n != section.control]
    if not engines or all(status == EquivalenceStatus.NOT_RUN for _, status in engines):
        return {
            "ran": False,
            "badge": badge(NOT_RUN),
            "reason": str(summary.get("reason") or "the re-audit run with the mitigated draft has no equivalence result"),
        }
    order = [EquivalenceStatus.VIOLATION, EquivalenceStatus.NO_VIOLATION_FOUND, EquivalenceStatus.EQUIVALENT, EquivalenceStatus.NOT_RUN]
    worst_first = sorted(engines, key=lambda e: order.index(e[1]))
    name, status = worst_first[0]
    return {
        "ran": True,
        "badge": status_badge(status),
        "engine": name,
        "prompts": len(summary.get("prompts") or []) or MISSING,
        "records": integer(snapshot.run.n_records),
        "tokens": integer(snapshot.run.n_output_tokens),
        "gof_p": num(summary.get("goodness_of_fit_p")),
        "tv_upper": num(summary.get("tv_bound")),
    }


__all__ = ["mitigation_view"]
