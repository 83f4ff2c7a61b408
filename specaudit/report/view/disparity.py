"""The disparity section of the report view: per dimension, ratio forests, group and pairwise
tables, drill-downs and the advice on k and routing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import specaudit.report.charts as charts
from specaudit.contracts import DEFAULT_BAND, DisparityStatus
from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import (
    AcceptanceCell,
    DimensionDisparities,
    DimensionGroups,
    Drilldown,
    Fallback,
    GroupEntry,
    KruskalTest,
    MetricEstimate,
)
from specaudit.report.view.base import FOREST_METRICS, MAX_ROWS, NOT_RUN, Ids, guard
from specaudit.report.view.format import (
    METRIC_FAMILIES,
    MISSING,
    badge,
    finite,
    fixed,
    integer,
    metric_label,
    num,
    percent,
    pvalue,
    recorded,
    setting,
    triple,
    visible,
    with_ci,
    worst,
)
from specaudit.report.view.statuses import band_of, comparison_status, detectable_ratios, dimension_comparisons, status_badge

if TYPE_CHECKING:
    from collections.abc import Callable

    from specaudit.contracts.snapshot import DimensionAdvice, MetricDisparity, Snapshot


def disparity_view(snapshot: Snapshot, ids: Ids) -> dict[str, Any]:
    groups, disparities = snapshot.groups, snapshot.disparities
    names = list(dict.fromkeys([*groups, *disparities]))
    if not names:
        return {
            "ran": False,
            "status": NOT_RUN,
            "badge": badge(NOT_RUN),
            "dimensions": [],
            "reason": "no disparity results in this snapshot (the run needs the vanilla engine, a speculative engine "
            "and prompts with at least one attribute)",
        }
    dimensions = [
        guard(
            f"disparity ({name})",
            _dimension_view,
            str(name),
            groups.get(name) or DimensionGroups(),
            disparities.get(name) or DimensionDisparities(),
            snapshot.recommendations.get(name),
            ids,
        )
        for name in names
    ]
    for number, (view, name) in enumerate(zip(dimensions, names), start=1):
        view.setdefault("name", str(name))
        view["anchor"] = f"dim-{number}"  # ids from user data could clash or hold odd characters
    status = worst([d["status"] for d in dimensions])
    return {
        "ran": True,
        "status": status,
        "badge": badge(status),
        "dimensions": dimensions,
        "engine": snapshot.run.disparity_engine or SPECULATIVE_ENGINE,
    }


def dimension_summary(statuses: list[DisparityStatus]) -> DisparityStatus | None:
    """A dimension's headline status: FLAG if any comparison is flagged, WITHIN only if every one is."""
    order = [DisparityStatus.FLAG, DisparityStatus.INCONCLUSIVE, DisparityStatus.INSUFFICIENT]
    if not statuses:
        return None
    for status in order:
        if status in statuses:
            return status
    return DisparityStatus.WITHIN


# a dimension's section: one it cannot decide (too few prompts as much as an interval across an edge) asks for a look
HEADLINE_CSS = {
    DisparityStatus.FLAG: "fail",
    DisparityStatus.WITHIN: "pass",
    DisparityStatus.INCONCLUSIVE: "warn",
    DisparityStatus.INSUFFICIENT: "warn",
}


def _dimension_view(
    name: str, groups: DimensionGroups, part: DimensionDisparities, advice: DimensionAdvice | None, ids: Ids
) -> dict[str, Any]:
    by_group = groups.by_group
    reference = part.reference or groups.reference or "overall"
    band = band_of(part)
    metrics = part.metrics
    colours = {str(g): charts.group_colour(i) for i, g in enumerate(by_group)}
    comps = dimension_comparisons(name, part)
    headline = dimension_summary([c.status for c in comps])
    status = HEADLINE_CSS[headline] if headline else NOT_RUN
    counts = {s.value: sum(c.status == s for c in comps) for s in DisparityStatus}
    view = {
        "ran": True,
        "name": name,
        "status": status,
        "badge": status_badge(headline) if headline else badge(NOT_RUN),
        "counts": counts,
        "reference": reference,
        "reference_reason": groups.reference_reason or "not recorded by the analysis that wrote this snapshot",
        "band": f"{band[0]:g}–{band[1]:g}",
        "alpha": setting(part.alpha) if finite(part.alpha) else None,
        "correction": part.correction or MISSING,
        "n_groups": len(by_group),
        "overall_n": integer(groups.overall.n_prompts if groups.overall is not None else None),
        "forest": _ratio_forest(name, groups, metrics, reference, band, colours, ids),
        "group_tables": _group_tables(groups),
        "tests": _pairwise_tables(metrics, reference, band),
        "across": _across_rows(metrics),
        "flags": [
            {
                "metric": metric_label(c.metric),
                "group": c.group,
                "status": c.status.value,
                "badge": status_badge(c.status),
                "ratio": triple(c.row.ratio, fixed),
                "pvalue_holm": pvalue(c.row.pvalue_holm),
            }
            for c in comps
            if c.status == DisparityStatus.FLAG
        ],
        "warnings": [str(w) for w in part.warnings],
        "drilldown": guard(f"drill-down ({name})", _drilldown_view, name, part.drilldown, ids, colours),
        "advice": guard(f"recommendations ({name})", _advice_view, advice),
    }
    return view


def _ratio_forest(
    dimension: str,
    groups: DimensionGroups,
    metrics: dict[str, MetricDisparity],
    reference: str,
    band: tuple[float, float],
    colours: dict[str, str],
    ids: Ids,
) -> dict[str, Any] | None:
    """One chart per dimension: each group's ratio to the reference, one panel per metric."""
    shown = [m for m in FOREST_METRICS if m in metrics and metrics[m].pairwise]
    if not shown:
        return None
    rows, described = [], []
    for group, entry in groups.by_group.items():
        cells = []
        for metric in shown:
            row = metrics[metric].pairwise.get(group)
            if str(group) == str(reference):
                cells.append(charts.RatioCell(1.0, None, None, "reference", "reference"))
                continue
            if row is None:
                cells.append(charts.RatioCell(None, None, None, "INSUFFICIENT", "not compared"))
                continue
            status = comparison_status(row, band)
            ratio = row.ratio or MetricEstimate(value=None)
            text = with_ci(ratio.value, ratio.ci_low, ratio.ci_high, fmt=fixed)
            cells.append(charts.RatioCell(ratio.value, ratio.ci_low, ratio.ci_high, status.value, text))
            described.append(f"{group} {metric_label(metric)} {cells[-1].text} {status.value}")
        rows.append(charts.RatioRow(str(group), entry.n_prompts, colours[str(group)], cells))
    labels = [metric_label(m) for m in shown]
    counts = Counter(cell.status for row in rows for cell in row.cells)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "reference")
    desc = (
        f"Ratio of each {dimension} group to the reference group {reference} for {' and '.join(labels)}, log scale, with each "
        f"ratio's own 95% interval against the tolerance band {band[0]:g}–{band[1]:g}. Statuses: {summary}. " + "; ".join(described)
    )
    chart = charts.ratio_forest(
        rows,
        [label.capitalize() for label in labels],
        chart_id=ids("forest"),
        title=f"{', '.join(labels).capitalize()}: ratio to {reference}, by {dimension}",
        desc=desc,
        band=band,
    )
    return {
        "chart": chart,
        "desc": f"Each group's ratio to {reference} with its own 95% interval (log scale). Marker shape and "
        f"colour give the status: {summary}.",
    }


def _group_tables(groups: DimensionGroups) -> list[dict[str, Any]]:
    """Per-group tables, one per metric family (value over its interval in each cell)."""
    overall = groups.overall or GroupEntry(metrics={})
    present = list(dict.fromkeys(m for e in [overall, *groups.by_group.values()] for m in e.metrics))
    families = [(title, [m for m in members if m in present]) for title, members in METRIC_FAMILIES.items()]
    known = {m for _, members in families for m in members}
    families.append(("Other metrics", [m for m in present if m not in known]))
    entries = [("overall", True, overall)] + [(g, False, e) for g, e in groups.by_group.items()]
    tables = []
    for title, metrics in families:
        if not metrics:
            continue
        rows = []
        for label, is_overall, entry in entries:
            cells = []
            for metric in metrics:
                block = entry.metrics.get(metric) or MetricEstimate(value=None)
                fmt, suffix = (fixed, "×") if metric == "speedup" else (num, "")
                cells.append(
                    {
                        "value": f"{fmt(block.value)}{suffix}" if finite(block.value) else MISSING,
                        "ci": f"[{fmt(block.ci_low)}, {fmt(block.ci_high)}]" if finite(block.ci_low) else "",
                    }
                )
            rows.append({"group": label, "is_overall": is_overall, "n_prompts": integer(entry.n_prompts), "cells": cells})
        tables.append({"title": title, "metrics": [metric_label(m) for m in metrics], "rows": rows})
    return tables


def _pairwise_tables(metrics: dict[str, MetricDisparity], reference: str, band: tuple[float, float] = DEFAULT_BAND) -> list[dict[str, Any]]:
    tables = []
    for metric, block in metrics.items():
        if not block.pairwise:
            continue
        fmt = fixed if metric == "speedup" else num
        rows = []
        for group, row in block.pairwise.items():
            status = comparison_status(row, band)
            mdr_low, mdr_high = detectable_ratios(row)
            rows.append(
                {
                    "group": group,
                    "n": f"{integer(row.n_prompts)} vs {integer(row.n_reference_prompts)}",
                    "ratio": triple(row.ratio, fixed),
                    "difference": triple(row.difference, fmt),
                    "pairs": integer(row.n_pairs) if row.n_pairs else MISSING,
                    "pvalue": pvalue(row.pvalue),
                    "pvalue_holm": pvalue(row.pvalue_holm),
                    "effect": num(row.effect_size, 2),
                    "mdr": _detectable(mdr_low, mdr_high),
                    "small": bool(row.small_group),
                    "status": status.value,
                    "badge": status_badge(status),
                }
            )
        names = {str(row.effect_size_name or "").replace("_", "-") for row in block.pairwise.values()} - {""}
        tests = {str(row.test or "") for row in block.pairwise.values()} - {""}
        tables.append(
            {
                "metric": metric,
                "label": metric_label(metric),
                "reference": reference,
                "rows": rows,
                "effect_name": ", ".join(sorted(names)) or "effect size",
                "tests": ", ".join(TEST_NAMES.get(t, t) for t in sorted(tests)) or MISSING,
            }
        )
    return tables


TEST_NAMES = {"mannwhitneyu": "Mann–Whitney U", "wilcoxon": "Wilcoxon signed-rank (parallel prompts)"}


def _detectable(low: Any, high: Any) -> str:
    """The ratios the test would catch with 80% power; a bound at or below 0 means no drop is detectable."""
    below = f"<{fixed(low)}" if finite(low) and low > 0 else "no drop"
    above = f">{fixed(high)}" if finite(high) else MISSING
    return f"{below} or {above}"


def _across_rows(metrics: dict[str, MetricDisparity]) -> list[dict[str, str]]:
    """Per metric: Kruskal–Wallis across all groups, and the max − min / min ÷ max summaries."""
    rows = []
    for metric, block in metrics.items():
        kw = block.kruskal or KruskalTest()
        fmt = fixed if metric == "speedup" else num
        rows.append(
            {
                "metric": metric_label(metric),
                "statistic": num(kw.statistic),
                "pvalue": pvalue(kw.pvalue),
                "n_groups": integer(kw.n_groups),
                "n_prompts": integer(kw.n_prompts),
                "difference": triple(block.difference.between_groups, fmt),
                "ratio": triple(block.ratio.between_groups, fixed),
            }
        )
    return rows


def _drilldown_view(dimension: str, drill: Drilldown | None, ids: Ids, colours: Mapping[str, str] | None = None) -> dict[str, Any]:
    if drill is None or not drill.model_fields_set:
        return {"ran": False, "reason": "no drill-down in this snapshot (needs per-step acceptance in the records)"}
    given = lambda value: MISSING if value is None else value  # noqa: E731
    return {
        "ran": True,
        "rank_source": given(drill.rank_source),
        "skipped_records": drill.skipped_records,
        "position": _bars(dimension, drill.by_position, "position", "draft position", ids, lambda v: f"position {v}", colours or {}),
        "rarity": _bars(
            dimension, drill.by_rarity, "rank_bucket", "token rarity (frequency rank)", ids, lambda v: f"rank {v}", colours or {}
        ),
        "corrections_note": drill.corrections_note,
        "corrections": [
            {
                "group": given(r.group),
                "token": visible(r.token if r.token is not None else given(r.token_id)),
                "token_id": given(r.token_id),
                "n": integer(r.n_corrections),
                "share": percent(r.share_of_group_corrections),
                "rate": percent(r.correction_rate),
                "prompt": given(r.example_prompt_id),
                "context": visible(r.example_context or ""),
            }
            for r in drill.corrections[:MAX_ROWS]
        ],
        "below": [
            {
                "group": given(r.group),
                "metric": metric_label(r.metric or ""),
                "threshold": setting(r.threshold),
                "share": f"{integer(r.n_below)} of {integer(r.n_prompts)} ({percent(r.share)})",
                "ci": f"[{percent(r.ci_low)}, {percent(r.ci_high)}]" if finite(r.ci_low) else MISSING,
                "lowest": [{"id": str(p.prompt_id), "value": num(p.value)} for p in r.lowest_prompts],
            }
            for r in drill.below_threshold
        ],
    }


def _bars(
    dimension: str, rows: list[AcceptanceCell], key: str, what: str, ids: Ids, name: Callable[[Any], str], colours: dict[str, str]
) -> dict[str, Any] | None:
    rows = [r for r in rows if finite(r.value)]
    if not rows:
        return None
    categories = list(dict.fromkeys(str(getattr(r, key)) for r in rows))
    groups = list(dict.fromkeys(str(r.group) for r in rows))
    table = {(str(r.group), str(getattr(r, key))): r for r in rows}
    # every group, in the dimension's order (so each keeps its colour), overall first
    ordered = (
        (["overall"] if "overall" in groups else [])
        + [g for g in colours if g in groups]
        + [g for g in groups if g != "overall" and g not in colours]
    )
    cell = {(g, c): table.get((g, c), AcceptanceCell()) for g in ordered for c in categories}
    series = [
        charts.BarSeries(
            g,
            [cell[g, c].value for c in categories],
            [cell[g, c].ci_low for c in categories],
            [cell[g, c].ci_high for c in categories],
        )
        for g in ordered
    ]
    palette = [charts.OVERALL_COLOUR if g == "overall" else colours.get(g, charts.OVERALL_COLOUR) for g in ordered]
    chart = charts.small_multiples(
        categories,
        series,
        palette,
        chart_id=ids("bars"),
        axis_label=f"acceptance by {what}",
        title=f"Acceptance by {what}, {dimension}",
        desc=f"Share of drafted tokens accepted at each {what}, one panel per {dimension} group ({', '.join(ordered)}), with 95% "
        "intervals; the black tick in each panel is the value over all prompts. The table below lists every value.",
    )
    table_rows = [
        {
            "group": g,
            "cells": [
                with_ci(cell[g, c].value, cell[g, c].ci_low, cell[g, c].ci_high)
                + (f" (n={integer(cell[g, c].n_positions)})" if (g, c) in table else "")
                for c in categories
            ],
        }
        for g in ordered
    ]
    return {"chart": chart, "categories": [name(c) for c in categories], "rows": table_rows, "note": ""}


def _advice_view(advice: DimensionAdvice | None) -> dict[str, Any]:
    if advice is None:
        return {"ran": False, "reason": "no recommendations in this snapshot"}
    per_group = []
    for group, row in advice.by_group.items():
        per_group.append(
            {
                "group": group,
                "k": MISSING if row.k is None else row.k,
                "alpha": f"{num(row.alpha)} ({str(row.alpha_source or '').replace('_', ' ')})",
                "cost": num(row.cost_ratio),
                "expected": fixed(row.expected_speedup) + "×" if finite(row.expected_speedup) else MISSING,
                "measured": triple(row.measured_speedup, fixed, "×"),
                "best_k": f"{MISSING if row.best_k is None else row.best_k} ({fixed(row.best_k_expected_speedup)}×)",
                "slowed": "yes (interval below 1)" if row.slowed_down_significantly else ("yes" if row.slowed_down else "no"),
                "is_slowed": bool(row.slowed_down),
                "alpha_portable": triple(row.alpha_portable, num),
                "engine_rule_rate": triple(row.engine_rule_rate, num),
                "projected": (
                    triple(row.projected_speedup, fixed, "×")
                    + ("" if row.projected_from == "mean_beta" else " (from the engine's rule: no mean β in this run)")
                )
                if row.projected_speedup is not None and row.projected_speedup.model_fields_set
                else None,
            }
        )
    fallback = advice.fallback or Fallback()
    fallback_rows = []
    for group, row in [*fallback.by_group.items(), ("overall", fallback.overall)]:
        if row is None or not row.model_fields_set:
            continue
        fallback_rows.append(
            {
                "group": group,
                "is_overall": group == "overall",
                "routed": f"{integer(row.n_routed)} of {integer(row.n_paired_prompts)} ({percent(row.share_routed)})",
                "speedup": f"{fixed(row.speedup_before)}× → {fixed(row.speedup_after)}×",
                "ratio": f"{fixed(row.ratio_to_reference_before)} → {fixed(row.ratio_to_reference_after)}",
            }
        )
    sweep = [
        {
            "threshold": setting(s.threshold),
            "speedup": fixed(s.overall_speedup) + "×" if finite(s.overall_speedup) else MISSING,
            "routed": percent(s.share_routed),
            "ratio": fixed(s.min_max_speedup_ratio),
        }
        for s in fallback.sweep
    ]
    projection = advice.projection
    return {
        "ran": True,
        "model": recorded(advice.model),
        "per_group": per_group,
        "acceptance_rule": advice.acceptance_rule or MISSING,
        "projection": {
            "cost": num(projection.cost_ratio),
            "verify": num(projection.verify_cost),
            "formula": MISSING if projection.formula is None else projection.formula,
            "note": projection.note or "",
        }
        if projection is not None and projection.model_fields_set
        else None,
        "fallback": {
            "rule": recorded(fallback.rule),
            "threshold": setting(fallback.threshold),
            "oracle": bool(fallback.oracle),
            "reference": recorded(fallback.reference, "overall"),
            "rows": fallback_rows,
            "sweep": sweep,
            "ratio": f"{fixed(fallback.min_max_speedup_ratio_before)} → {fixed(fallback.min_max_speedup_ratio_after)}",
        }
        if fallback.model_fields_set
        else None,
        "messages": advice.messages,
    }
