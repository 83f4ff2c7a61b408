"""The report's concurrency part (a run at several concurrency levels, `--engines llama-server`):
equivalence per level, acceptance and speed-up per group x level, the crossover, and the logprob
parity finding. Read from the snapshot's `concurrency` and `logprob_parity` sections only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import specaudit.charts as charts
from specaudit.report.view.format import badge, fixed, get, mapping, with_ci

if TYPE_CHECKING:
    from collections.abc import Callable

    from specaudit.report.view.base import Ids

MAX_GROUPS_PER_CHART = 8  # more lines than this are no longer told apart; the table has them all


def _interval(block: Any, fmt: Callable[[Any], str] = fixed, suffix: str = "") -> str:
    return with_ci(get(block, "estimate"), get(block, "ci_low"), get(block, "ci_high"), fmt=fmt, suffix=suffix)


def crossover_charts(section: Mapping[str, Any], ids: Ids | None = None) -> list[Any]:
    """Per dimension: speed-up and acceptance per group across the levels, with 95% intervals,
    each group's crossover (the lowest level whose speed-up interval lies below 1x) marked."""
    levels = [str(level) for level in section.get("levels") or []]
    if len(levels) < 2:
        return []
    made = []
    for dimension, groups in mapping(section.get("groups")).items():
        for metric, label, reference in (
            ("speedup", "speed-up (vanilla / speculative time per token)", 1.0),
            ("acceptance", "acceptance", None),
        ):
            series, said = [], []
            for index, (group, by_level) in enumerate(list(mapping(groups).items())[:MAX_GROUPS_PER_CHART]):
                blocks = [mapping(mapping(mapping(by_level).get(level)).get(metric)) for level in levels]
                values = [b.get("estimate") for b in blocks]
                if not any(isinstance(v, (int, float)) for v in values):
                    continue
                crossover = get(section, "crossover", dimension, group) if metric == "speedup" else None
                at = levels.index(str(crossover)) if crossover is not None and str(crossover) in levels else None
                colour = charts.OVERALL_COLOUR if group == "all" else charts.group_colour(index)
                series.append(
                    charts.LevelSeries(
                        str(group), colour, values, [b.get("ci_low") for b in blocks], [b.get("ci_high") for b in blocks], at
                    )
                )
                trend = ", ".join(f"{lv}: {fixed(v)}" for lv, v in zip(levels, values))
                said.append(f"{group} ({trend}" + (f"; stops paying at {crossover})" if crossover is not None else ")"))
            if not series:
                continue
            name = "Speed-up" if metric == "speedup" else "Acceptance"
            made.append(
                {
                    "dimension": dimension,
                    "metric": metric,
                    "svg": charts.level_lines(
                        levels,
                        series,
                        title=f"{name} per {dimension} group and concurrency level",
                        desc=f"{name} of each {dimension} group at concurrency levels {', '.join(levels)}, with 95% intervals: "
                        + "; ".join(said),
                        axis_label=label,
                        reference=reference,
                        chart_id=ids("crossover") if ids is not None else f"crossover{len(made) + 1}",
                    ),
                }
            )
    return made


def concurrency_view(snapshot: Mapping[str, Any], ids: Ids | None = None) -> dict[str, Any]:
    section = mapping(get(snapshot, "concurrency"))
    parity = mapping(get(snapshot, "logprob_parity"))
    if not section and not parity:
        return {"ran": False}
    levels = [str(level) for level in section.get("levels") or []]
    equivalence = [
        {
            "level": level,
            "badge": badge(get(section, "equivalence", level, "status")),
            "message": get(section, "equivalence", level, "message") or "",
        }
        for level in levels
        if get(section, "equivalence", level)
    ]
    rows = []
    for dimension, groups in mapping(section.get("groups")).items():
        for group, by_level in mapping(groups).items():
            for level in levels:
                metrics = mapping(mapping(by_level).get(level))
                if not metrics:
                    continue
                rows.append(
                    {
                        "dimension": dimension,
                        "group": group,
                        "level": level,
                        "acceptance": _interval(metrics.get("acceptance"), fmt=lambda v: f"{v:.2f}"),
                        "speedup": _interval(metrics.get("speedup"), suffix="×"),
                        "ttft_ms": _interval(get(metrics, "speculative", "ttft_s"), fmt=lambda v: f"{1000 * v:.0f}"),
                        "tokens_per_s": _interval(get(metrics, "speculative", "tokens_per_s"), fmt=lambda v: f"{v:.1f}"),
                        "crossover": get(section, "crossover", dimension, group),
                    }
                )
    stability = mapping(get(snapshot, "acceptance_stability"))
    return {
        "ran": True,
        "levels": levels,
        "charts": crossover_charts(section, ids),
        "stability": {"ran": bool(stability), "badge": badge(stability.get("status")), "message": stability.get("message") or ""},
        "message": section.get("message") or "",
        "equivalence": equivalence,
        "alpha_split": _alpha_split_line(section),
        "rows": rows,
        "parity": {"ran": bool(parity), "badge": badge(parity.get("status")), "message": parity.get("message") or _parity_line(parity)},
    }


def _alpha_split_line(section: Mapping[str, Any]) -> str:
    """How the run's alpha was split over the families its equivalence decision combines (none
    said for a snapshot written before the split, or a run at one level)."""
    pooled, level, independence = (section.get(k) for k in ("pooled_alpha", "level_alpha", "independence_alpha"))
    if pooled is None or len(section.get("levels") or []) < 2:
        return ""
    return (
        f"The run's equivalence fails when the pooled battery, a level's battery or a level's independence test fails, so its "
        f"alpha is split over the three (Bonferroni): the pooled battery at {pooled:.3g}, each level's battery at {level:.3g}, "
        f"each level's independence tests at {independence:.3g} (split again over the engines). A correct server is failed at "
        "most alpha of the time."
    )


def _parity_line(parity: Mapping[str, Any]) -> str:
    if not parity:
        return "the server returned no logprobs"
    return (
        f"{parity.get('positions', 0)} positions compared with the spec-OFF server's logprobs for the same prefix, none differing by more "
        f"than {fixed(parity.get('threshold'), 3)} nats (twice the measured batch noise, {fixed(get(parity, 'batch_noise', 'max_abs_diff'), 4)})"
    )


def concurrency_markdown(view: Mapping[str, Any]) -> list[str]:
    """summary.md lines for the part (none for a run without levels)."""
    part = view.get("concurrency") or {}
    if not part.get("ran"):
        return []
    lines = ["", "## Concurrency", ""]
    if part["message"]:
        lines += [f"**{part['message']}**", ""]
    if part["equivalence"]:
        lines += ["| level | equivalence |", "|---|---|"]
        lines += [f"| {e['level']} | {e['badge']['symbol']} {e['badge']['text']} |" for e in part["equivalence"]]
        lines.append("")
    if part["alpha_split"]:
        lines += [part["alpha_split"], ""]
    if part["rows"]:
        lines += [
            "| dimension | group | level | acceptance | speed-up | TTFT ms | tokens/s | crossover |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in part["rows"]:
            lines.append(
                f"| {r['dimension']} | {r['group']} | {r['level']} | {r['acceptance']} | {r['speedup']} | {r['ttft_ms']} | "
                f"{r['tokens_per_s']} | {r['crossover'] if r['crossover'] is not None else '-'} |"
            )
    if part["parity"]["ran"]:
        lines += ["", f"Logprob parity: **{part['parity']['badge']['text']}**: {part['parity']['message']}"]
    return lines
