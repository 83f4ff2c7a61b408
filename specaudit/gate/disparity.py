"""The gate's disparity checks: each group's ratio to its reference against the band, the speed-up
floor and the group size."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit._validation import finite
from specaudit.config import DISPARITY_METRICS
from specaudit.contracts import DisparityStatus
from specaudit.contracts.snapshot import DimensionDisparities, DimensionGroups, MetricEstimate, plain_data
from specaudit.gate.results import GateCheck, fixed, fmt, not_run
from specaudit.gate.thresholds import PASS, WARN, GateThresholds

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Comparison, GroupEntry, MetricDisparity, Snapshot
    from specaudit.contracts.status import CheckStatus


def disparity_checks(snapshot: Snapshot, t: GateThresholds) -> list[GateCheck]:
    disparities, groups = snapshot.disparities, snapshot.groups
    if not disparities and not groups:
        why = "the snapshot has no disparity results (the run needs vanilla, a speculative engine and a prompt attribute)"
        return [
            not_run("disparity", "Groups within the tolerance band", why),
            not_run("min-speedup", "No group slowed down", why),
            not_run("group-size", "Groups large enough", why),
        ]
    checks: list[GateCheck] = []
    for dimension in dict.fromkeys([*disparities, *groups]):
        part = disparities.get(dimension) or DimensionDisparities()
        grouped = groups.get(dimension) or DimensionGroups()
        alpha = t.alpha if t.alpha is not None else (part.alpha if finite(part.alpha) else 0.05)
        low, high = t.band(part.tolerance)
        reference = part.reference or grouped.reference
        # by default those the analysis gated (an engine's own rule, not the mean β shown beside it), else those compared
        compared = part.gated_metrics or part.compared_metrics
        for metric in t.disparity_metrics or compared or DISPARITY_METRICS:
            checks.append(_band_check(dimension, metric, part.metrics.get(metric), reference, alpha, low, high, t.disparity_severity))
        checks.append(_speedup_check(dimension, grouped.by_group, t.min_speedup, t.slowdown_severity))
        checks.append(_size_check(dimension, grouped.by_group, t.min_group_size))
    return checks


def _comparison_status(row: Comparison, low: float, high: float, alpha: float) -> DisparityStatus | None:
    """The status of one comparison under the gate's band, from the ratio interval the analysis
    chose for it (the flag and the interval come from one method). Snapshots written before the
    intervals (no ``interval_method``) keep their rule: outside the band and Holm-significant.
    None: inside the band by the old rule."""
    ratio = row.ratio or MetricEstimate(value=None)
    if not row.has_interval_rule:
        if not finite(ratio.value) or low <= ratio.value <= high:
            return None
        significant = finite(row.pvalue_holm) and row.pvalue_holm < alpha
        return DisparityStatus.FLAG if significant else DisparityStatus.INCONCLUSIVE
    lo, hi = ratio.ci_low, ratio.ci_high
    if not (finite(lo) and finite(hi)):
        return DisparityStatus.INSUFFICIENT
    return DisparityStatus.from_interval(lo, hi, (low, high), decidable=not (lo < low and hi > high))


def _band_check(
    dimension: str,
    metric: str,
    block: MetricDisparity | None,
    reference: str | None,
    alpha: float,
    low: float,
    high: float,
    severity: CheckStatus,
) -> GateCheck:
    name, title = f"disparity[{dimension}/{metric}]", f"{dimension}: {metric} ratio to the reference within the band"
    pairwise = block.pairwise if block is not None else {}
    if not pairwise:
        return not_run(name, title, f"no pairwise test of {metric} across {dimension} groups")
    by_status: dict[DisparityStatus, list[dict]] = {s: [] for s in DisparityStatus}
    for group, row in pairwise.items():
        status = _comparison_status(row, low, high, alpha)
        if status is None:
            continue
        ratio = row.ratio or MetricEstimate(value=None)
        by_status[status].append(
            {
                "group": group,
                "ratio": ratio.value,
                "ci_low": ratio.ci_low,
                "ci_high": ratio.ci_high,
                "method": row.interval_method or f"Holm p = {fmt(row.pvalue_holm, 2)}",
                "n_prompts": row.n_prompts,
                "min_detectable_ratio": row.min_detectable_ratio_low,
            }
        )
    flagged, inconclusive = by_status[DisparityStatus.FLAG], by_status[DisparityStatus.INCONCLUSIVE]
    insufficient = by_status[DisparityStatus.INSUFFICIENT]
    details = {
        "reference": reference,
        "band": [low, high],
        "alpha": alpha,
        "flagged": flagged,
        "inconclusive": inconclusive,
        "insufficient": insufficient,
    }

    def describe(rows: list[dict]) -> str:
        return "; ".join(
            f"{r['group']} {fixed(r['ratio'])}× [{fixed(r['ci_low'])}, {fixed(r['ci_high'])}] (n = {r['n_prompts']}, {r['method']})"
            for r in rows
        )

    band = f"[{low:.3g}, {high:.3g}]"
    undecided = []
    if inconclusive:
        undecided.append(f"interval across a band edge (inconclusive): {describe(inconclusive)}")
    if insufficient:
        undecided.append(f"too few prompts to decide (insufficient): {describe(insufficient)}")
    if flagged:
        message = f"{metric} ratio to {reference}: interval wholly outside {band}: {describe(flagged)}"
        if undecided:
            message += "; " + "; ".join(undecided)
        return GateCheck(name, title, severity, message, details)
    if undecided:
        return GateCheck(name, title, WARN, f"{metric} ratio to {reference} not shown within {band}: " + "; ".join(undecided), details)
    return GateCheck(name, title, PASS, f"every {dimension} group's {metric} is within {band} of {reference}", details)


def _speedup_check(dimension: str, by_group: dict[str, GroupEntry], minimum: float, severity: CheckStatus) -> GateCheck:
    name, title = f"min-speedup[{dimension}]", f"{dimension}: no group below the minimum speed-up"
    measured = {g: e.metrics["speedup"] for g, e in by_group.items() if "speedup" in e.metrics and finite(e.metrics["speedup"].value)}
    if not measured:
        return not_run(name, title, f"no speed-up measured for {dimension} groups")
    slow = {g: m for g, m in measured.items() if m.value < minimum}
    details = {
        "min_speedup": minimum,
        "groups": {g: {k: getattr(m, k, None) for k in ("value", "ci_low", "ci_high", "n_prompts")} for g, m in slow.items()},
    }
    if slow:
        listed = "; ".join(
            f"{g} {fixed(m.value)}× [{fixed(m.ci_low)}, {fixed(m.ci_high)}]"
            + (" (interval below)" if finite(m.ci_high) and m.ci_high < minimum else "")
            for g, m in sorted(slow.items(), key=lambda item: item[1].value)
        )
        return GateCheck(
            name, title, severity, f"{len(slow)} of {len(measured)} groups measure a speed-up below {minimum:g}×: {listed}", details
        )
    slowest = min(measured.items(), key=lambda item: item[1].value)
    return GateCheck(name, title, PASS, f"every group reaches {minimum:g}× (slowest: {slowest[0]} {fixed(slowest[1].value)}×)", details)


def _size_check(dimension: str, by_group: dict[str, GroupEntry], minimum: int) -> GateCheck:
    name, title = f"group-size[{dimension}]", f"{dimension}: groups large enough to judge"
    sizes = {g: e.n_prompts for g, e in by_group.items()}
    if not sizes:
        return not_run(name, title, f"no {dimension} groups")
    small = {g: n for g, n in sizes.items() if not finite(n) or n < minimum}
    if small:
        listed = ", ".join(f"{g} ({n})" for g, n in sorted(small.items(), key=lambda item: (item[1] or 0, item[0])))
        return GateCheck(
            name,
            title,
            WARN,
            f"{len(small)} of {len(sizes)} groups have fewer than {minimum} audited prompts, the checked group size "
            f"(below it the ratio intervals are unchecked): {listed}",
            {"min_group_size": minimum, "small": small},
        )
    return GateCheck(name, title, PASS, f"every group has at least {minimum} audited prompts", {"min_group_size": minimum})


def measurement_checks(snapshot: Snapshot) -> list[GateCheck]:
    """Where the screen measured acceptance and the cost model predicted speed-ups: did each agree
    with what the engines measured on the prompts they ran? (Absent for runs without the screen.)"""
    checks = []
    screen = snapshot.screen
    ratio = screen.engine_over_screen_acceptance if screen is not None else None
    if ratio is not None and ratio.model_fields_set:
        name, title = "screen-agreement", "The screen reproduces the engine's acceptance"
        given = screen.given_engine_paths
        details = {**plain_data(ratio), "n_prompts": screen.n_prompts, "given_engine_paths": plain_data(given) if given else {}}
        message = f"engine / screen acceptance {fixed(ratio.value)} [{fixed(ratio.ci_low)}, {fixed(ratio.ci_high)}] on the same prompts"
        if given is not None and "value" in given.model_fields_set:
            message += f", {fixed(given.value)} [{fixed(given.ci_low)}, {fixed(given.ci_high)}] given the engine's own paths"
        status, message = (PASS, f"{message}: no difference at Holm-adjusted α") if screen.agrees else (WARN, str(screen.finding))
        checks.append(GateCheck(name, title, status, message, details))
    speed = snapshot.speed
    validation = speed.validation if speed is not None else None
    check = validation.measured_over_predicted if validation is not None else None
    if speed is not None and speed.source == "cost model" and check is not None and check.model_fields_set:
        name, title = "cost-model", "Predicted speed-ups match the timed prompts"
        # A finding: the overall interval excludes 1, or a group's timed prompts differ from the rest.
        holds = bool(validation.holds) and not speed.finding
        interval = f"{fixed(check.value)} [{fixed(check.ci_low)}, {fixed(check.ci_high)}]"
        smallest = speed.validation_by_group_smallest_pvalue_holm
        if speed.single_prompt_outliers:
            per_group = f"; {speed.single_prompt_outliers}"
        elif finite(smallest):
            per_group = f"; no group's timed prompts differ from the others' (smallest Holm p = {fmt(smallest, 2)})"
        else:
            per_group = ""
        message = f"measured / predicted speed-up {interval} out of sample covers 1{per_group}" if holds else str(speed.finding)
        checks.append(GateCheck(name, title, PASS if holds else WARN, message, plain_data(check)))
    return checks
