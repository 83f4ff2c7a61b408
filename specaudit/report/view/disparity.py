"""The disparity section of the report view: per dimension, ratio forests, group and pairwise
tables, drill-downs and the advice on k and routing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import specaudit.charts as charts
from specaudit.contracts import DEFAULT_BAND, DisparityStatus
from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.report.view.base import FOREST_METRICS, MAX_ROWS, NOT_RUN, Ids, guard
from specaudit.report.view.format import (
    METRIC_FAMILIES,
    MISSING,
    badge,
    finite,
    fixed,
    get,
    integer,
    metric_label,
    num,
    percent,
    pvalue,
    setting,
    triple,
    visible,
    with_ci,
    worst,
)
from specaudit.report.view.statuses import band_of, comparison_status, comparisons, detectable_ratios, status_badge

if TYPE_CHECKING:
    from collections.abc import Callable


def disparity_view(snapshot: Mapping[str, Any], ids: Ids) -> dict[str, Any]:
    groups = get(snapshot, "groups", default={})
    disparities = get(snapshot, "disparities", default={})
    recommendations = get(snapshot, "recommendations", default={})
    names = list(dict.fromkeys([*(groups or {}), *(disparities or {})]))
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
            get(groups, name, default={}),
            get(disparities, name, default={}),
            get(recommendations, name, default={}),
            ids,
        )
        for name in names
    ]
    for number, (view, name) in enumerate(zip(dimensions, names), start=1):
        view.setdefault("name", str(name))
        view["anchor"] = f"dim-{number}"  # ids from user data could clash or hold odd characters
    status = worst([d.get("status", NOT_RUN) for d in dimensions])
    return {
        "ran": True,
        "status": status,
        "badge": badge(status),
        "dimensions": dimensions,
        "engine": get(snapshot, "run", "disparity_engine", default=SPECULATIVE_ENGINE),
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


def _dimension_view(name: str, groups: Mapping[str, Any], part: Mapping[str, Any], advice: Mapping[str, Any], ids: Ids) -> dict[str, Any]:
    by_group = get(groups, "by_group", default={})
    reference = get(part, "reference", default=get(groups, "reference", default="overall"))
    band = band_of(part)
    metrics = get(part, "metrics", default={})
    colours = {str(g): charts.group_colour(i) for i, g in enumerate(by_group)}
    comps = [c for c in comparisons({"disparities": {name: part}})]
    headline = dimension_summary([c["status"] for c in comps])
    status = {"FLAG": "fail", "WITHIN": "pass"}.get(headline.value, "warn") if headline else NOT_RUN
    counts = {s.value: sum(c["status"] == s for c in comps) for s in DisparityStatus}
    view = {
        "ran": True,
        "name": name,
        "status": status,
        "badge": status_badge(headline) if headline else badge(NOT_RUN),
        "counts": counts,
        "reference": reference,
        "reference_reason": get(groups, "reference_reason") or "not recorded by the analysis that wrote this snapshot",
        "band": f"{band[0]:g}–{band[1]:g}",
        "alpha": setting(get(part, "alpha")) if finite(get(part, "alpha")) else None,
        "correction": get(part, "correction", default=MISSING),
        "n_groups": len(by_group),
        "overall_n": integer(get(groups, "overall", "n_prompts")),
        "forest": _ratio_forest(name, groups, metrics, reference, band, colours, ids),
        "group_tables": _group_tables(groups),
        "tests": _pairwise_tables(metrics, reference, band),
        "across": _across_rows(metrics),
        "flags": [
            {
                "metric": metric_label(c["metric"]),
                "group": c["group"],
                "status": c["status"].value,
                "badge": status_badge(c["status"]),
                "ratio": triple(c["row"].get("ratio"), fixed),
                "pvalue_holm": pvalue(c["row"].get("pvalue_holm")),
            }
            for c in comps
            if c["status"] == DisparityStatus.FLAG
        ],
        "warnings": [str(w) for w in (get(part, "warnings", default=[]) or [])],
        "drilldown": guard(f"drill-down ({name})", _drilldown_view, name, get(part, "drilldown", default={}), ids, colours),
        "advice": guard(f"recommendations ({name})", _advice_view, advice),
    }
    return view


def _ratio_forest(
    dimension: str,
    groups: Mapping[str, Any],
    metrics: Mapping[str, Any],
    reference: str,
    band: tuple[float, float],
    colours: dict[str, str],
    ids: Ids,
) -> dict[str, Any] | None:
    """One chart per dimension: each group's ratio to the reference, one panel per metric."""
    shown = [m for m in FOREST_METRICS if get(metrics, m, "pairwise")]
    if not shown:
        return None
    by_group = get(groups, "by_group", default={})
    rows, described = [], []
    for group, entry in by_group.items():
        cells = []
        for metric in shown:
            row = get(metrics, metric, "pairwise", group)
            if str(group) == str(reference):
                cells.append(charts.RatioCell(1.0, None, None, "reference", "reference"))
                continue
            if not isinstance(row, Mapping):
                cells.append(charts.RatioCell(None, None, None, "INSUFFICIENT", "not compared"))
                continue
            status = comparison_status(row, band)
            ratio = get(row, "ratio", default={})
            cells.append(
                charts.RatioCell(
                    get(ratio, "value"),
                    get(ratio, "ci_low"),
                    get(ratio, "ci_high"),
                    status.value,
                    with_ci(get(ratio, "value"), get(ratio, "ci_low"), get(ratio, "ci_high"), fmt=fixed),
                )
            )
            described.append(f"{group} {metric_label(metric)} {cells[-1].text} {status.value}")
        rows.append(charts.RatioRow(str(group), get(entry, "n_prompts"), colours.get(str(group), charts.OVERALL_COLOUR), cells))
    labels = [metric_label(m) for m in shown]
    counts = {}
    for row in rows:
        for cell in row.cells:
            counts[cell.status] = counts.get(cell.status, 0) + 1
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


def _group_tables(groups: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-group tables, one per metric family (value over its interval in each cell)."""
    by_group = get(groups, "by_group", default={})
    present = list(
        dict.fromkeys(m for e in [get(groups, "overall", default={}), *by_group.values()] for m in (get(e, "metrics", default={}) or {}))
    )
    families = [(title, [m for m in members if m in present]) for title, members in METRIC_FAMILIES.items()]
    known = {m for _, members in families for m in members}
    families.append(("Other metrics", [m for m in present if m not in known]))
    entries = [("overall", True, get(groups, "overall", default={}))] + [(g, False, e) for g, e in by_group.items()]
    tables = []
    for title, metrics in families:
        if not metrics:
            continue
        rows = []
        for label, is_overall, entry in entries:
            cells = []
            for metric in metrics:
                block = get(entry, "metrics", metric, default={})
                value = get(block, "value")
                fmt, suffix = (fixed, "×") if metric == "speedup" else (num, "")
                cells.append(
                    {
                        "value": f"{fmt(value)}{suffix}" if finite(value) else MISSING,
                        "ci": f"[{fmt(get(block, 'ci_low'))}, {fmt(get(block, 'ci_high'))}]" if finite(get(block, "ci_low")) else "",
                    }
                )
            rows.append({"group": label, "is_overall": is_overall, "n_prompts": integer(get(entry, "n_prompts")), "cells": cells})
        tables.append({"title": title, "metrics": [metric_label(m) for m in metrics], "rows": rows})
    return tables


def _pairwise_tables(metrics: Mapping[str, Any], reference: str, band: tuple[float, float] = DEFAULT_BAND) -> list[dict[str, Any]]:
    tables = []
    for metric, block in (metrics or {}).items():
        pairwise = get(block, "pairwise", default={})
        if not pairwise:
            continue
        fmt = fixed if metric == "speedup" else num
        rows = []
        for group, row in pairwise.items():
            status = comparison_status(row, band)
            mdr_low, mdr_high = detectable_ratios(row)
            rows.append(
                {
                    "group": group,
                    "n": f"{integer(row.get('n_prompts'))} vs {integer(row.get('n_reference_prompts'))}",
                    "ratio": triple(row.get("ratio"), fixed),
                    "difference": triple(row.get("difference"), fmt),
                    "pairs": integer(row.get("n_pairs")) if row.get("n_pairs") else MISSING,
                    "pvalue": pvalue(row.get("pvalue")),
                    "pvalue_holm": pvalue(row.get("pvalue_holm")),
                    "effect": num(row.get("effect_size"), 2),
                    "mdr": _detectable(mdr_low, mdr_high),
                    "small": bool(row.get("small_group")),
                    "status": status.value,
                    "badge": status_badge(status),
                }
            )
        names = {str(row.get("effect_size_name", "")).replace("_", "-") for row in pairwise.values()} - {""}
        tests = {str(row.get("test", "")) for row in pairwise.values()} - {""}
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


def _across_rows(metrics: Mapping[str, Any]) -> list[dict[str, str]]:
    """Per metric: Kruskal–Wallis across all groups, and the max − min / min ÷ max summaries."""
    rows = []
    for metric, block in (metrics or {}).items():
        kw = get(block, "kruskal", default={})
        fmt = fixed if metric == "speedup" else num
        rows.append(
            {
                "metric": metric_label(metric),
                "statistic": num(get(kw, "statistic")),
                "pvalue": pvalue(get(kw, "pvalue")),
                "n_groups": integer(get(kw, "n_groups")),
                "n_prompts": integer(get(kw, "n_prompts")),
                "difference": triple(get(block, "difference", "between_groups"), fmt),
                "ratio": triple(get(block, "ratio", "between_groups"), fixed),
            }
        )
    return rows


def _drilldown_view(dimension: str, drill: Mapping[str, Any], ids: Ids, colours: Mapping[str, str] | None = None) -> dict[str, Any]:
    if not drill:
        return {"ran": False, "reason": "no drill-down in this snapshot (needs per-step acceptance in the records)"}
    position_rows = [r for r in (drill.get("by_position") or []) if isinstance(r, Mapping)]
    rarity_rows = [r for r in (drill.get("by_rarity") or []) if isinstance(r, Mapping)]
    corrections = [r for r in (drill.get("corrections") or []) if isinstance(r, Mapping)]
    below = [r for r in (drill.get("below_threshold") or []) if isinstance(r, Mapping)]
    return {
        "ran": True,
        "rank_source": drill.get("rank_source", MISSING),
        "skipped_records": drill.get("skipped_records"),
        "position": _bars(dimension, position_rows, "position", "draft position", ids, lambda v: f"position {v}", colours or {}),
        "rarity": _bars(dimension, rarity_rows, "rank_bucket", "token rarity (frequency rank)", ids, lambda v: f"rank {v}", colours or {}),
        "corrections_note": drill.get("corrections_note"),
        "corrections": [
            {
                "group": r.get("group", MISSING),
                "token": visible(r.get("token", r.get("token_id", MISSING))),
                "token_id": r.get("token_id", MISSING),
                "n": integer(r.get("n_corrections")),
                "share": percent(r.get("share_of_group_corrections")),
                "rate": percent(r.get("correction_rate")),
                "prompt": r.get("example_prompt_id", MISSING),
                "context": visible(r.get("example_context", "")),
            }
            for r in corrections[:MAX_ROWS]
        ],
        "below": [
            {
                "group": r.get("group", MISSING),
                "metric": metric_label(r.get("metric", "")),
                "threshold": setting(r.get("threshold")),
                "share": f"{integer(r.get('n_below'))} of {integer(r.get('n_prompts'))} ({percent(r.get('share'))})",
                "ci": f"[{percent(r.get('ci_low'))}, {percent(r.get('ci_high'))}]" if finite(r.get("ci_low")) else MISSING,
                "lowest": [
                    {"id": str(p.get("prompt_id")), "value": num(p.get("value"))}
                    for p in (r.get("lowest_prompts") or [])
                    if isinstance(p, Mapping)
                ],
            }
            for r in below
        ],
    }


def _bars(
    dimension: str, rows: list[dict], key: str, what: str, ids: Ids, name: Callable[[Any], str], colours: dict[str, str]
) -> dict[str, Any] | None:
    rows = [r for r in rows if finite(r.get("value"))]
    if not rows:
        return None
    categories = list(dict.fromkeys(str(r.get(key)) for r in rows))
    groups = list(dict.fromkeys(str(r.get("group")) for r in rows))
    table = {(str(r.get("group")), str(r.get(key))): r for r in rows}
    # every group, in the dimension's order (so each keeps its colour), overall first
    ordered = (
        (["overall"] if "overall" in groups else [])
        + [g for g in colours if g in groups]
        + [g for g in groups if g != "overall" and g not in colours]
    )
    series = [
        charts.BarSeries(
            g,
            [get(table.get((g, c)), "value") for c in categories],
            [get(table.get((g, c)), "ci_low") for c in categories],
            [get(table.get((g, c)), "ci_high") for c in categories],
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
                with_ci(get(table.get((g, c)), "value"), get(table.get((g, c)), "ci_low"), get(table.get((g, c)), "ci_high"))
                + (f" (n={integer(get(table.get((g, c)), 'n_positions'))})" if (g, c) in table else "")
                for c in categories
            ],
        }
        for g in ordered
    ]
    return {"chart": chart, "categories": [name(c) for c in categories], "rows": table_rows, "note": ""}


def _advice_view(advice: Mapping[str, Any]) -> dict[str, Any]:
    if not advice:
        return {"ran": False, "reason": "no recommendations in this snapshot"}
    per_group = []
    for group, row in (get(advice, "by_group", default={}) or {}).items():
        per_group.append(
            {
                "group": group,
                "k": row.get("k", MISSING),
                "alpha": f"{num(row.get('alpha'))} ({str(row.get('alpha_source', '')).replace('_', ' ')})",
                "cost": num(row.get("cost_ratio")),
                "expected": fixed(row.get("expected_speedup")) + "×" if finite(row.get("expected_speedup")) else MISSING,
                "measured": triple(row.get("measured_speedup"), fixed, "×"),
                "best_k": f"{row.get('best_k', MISSING)} ({fixed(row.get('best_k_expected_speedup'))}×)",
                "slowed": "yes (interval below 1)" if row.get("slowed_down_significantly") else ("yes" if row.get("slowed_down") else "no"),
                "is_slowed": bool(row.get("slowed_down")),
                "alpha_portable": triple(row.get("alpha_portable"), num),
                "engine_rule_rate": triple(row.get("engine_rule_rate"), num),
                "projected": (
                    triple(row.get("projected_speedup"), fixed, "×")
                    + ("" if row.get("projected_from") == "mean_beta" else " (from the engine's rule: no mean β in this run)")
                )
                if row.get("projected_speedup")
                else None,
            }
        )
    fallback = get(advice, "fallback", default={})
    fallback_rows = []
    for group, row in [*(get(fallback, "by_group", default={}) or {}).items(), ("overall", get(fallback, "overall", default={}))]:
        if not row:
            continue
        fallback_rows.append(
            {
                "group": group,
                "is_overall": group == "overall",
                "routed": f"{integer(row.get('n_routed'))} of {integer(row.get('n_paired_prompts'))} ({percent(row.get('share_routed'))})",
                "speedup": f"{fixed(row.get('speedup_before'))}× → {fixed(row.get('speedup_after'))}×",
                "ratio": f"{fixed(row.get('ratio_to_reference_before'))} → {fixed(row.get('ratio_to_reference_after'))}",
            }
        )
    sweep = [
        {
            "threshold": setting(s.get("threshold")),
            "speedup": fixed(s.get("overall_speedup")) + "×" if finite(s.get("overall_speedup")) else MISSING,
            "routed": percent(s.get("share_routed")),
            "ratio": fixed(s.get("min_max_speedup_ratio")),
        }
        for s in (get(fallback, "sweep", default=[]) or [])
        if isinstance(s, Mapping)
    ]
    projection = get(advice, "projection", default={}) or {}
    return {
        "ran": True,
        "model": advice.get("model", MISSING),
        "per_group": per_group,
        "acceptance_rule": advice.get("acceptance_rule") or MISSING,
        "projection": {
            "cost": num(projection.get("cost_ratio")),
            "verify": num(projection.get("verify_cost")),
            "formula": projection.get("formula", MISSING),
            "note": projection.get("note", ""),
        }
        if projection
        else None,
        "fallback": {
            "rule": get(fallback, "rule", default=MISSING),
            "threshold": setting(get(fallback, "threshold")),
            "oracle": bool(get(fallback, "oracle")),
            "reference": get(fallback, "reference", default="overall"),
            "rows": fallback_rows,
            "sweep": sweep,
            "ratio": f"{fixed(get(fallback, 'min_max_speedup_ratio_before'))} → {fixed(get(fallback, 'min_max_speedup_ratio_after'))}",
        }
        if fallback
        else None,
        "messages": [str(m) for m in (advice.get("messages") or [])],
    }
