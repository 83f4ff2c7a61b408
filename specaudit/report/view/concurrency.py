"""The report's concurrency part (a run at several concurrency levels, `--engines llama-server`):
equivalence per level, acceptance and speed-up per group x level, the crossover, and the logprob
parity finding. Read from the snapshot's `concurrency` and `logprob_parity` sections only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import specaudit.report.charts as charts
from specaudit.contracts.snapshot import EngineTimings, LevelMetrics, RatioEstimate
from specaudit.report.view.format import badge, fixed, with_ci

if TYPE_CHECKING:
    from collections.abc import Callable

    from specaudit.contracts.snapshot import ConcurrencySection, LogprobParitySection, Snapshot
    from specaudit.report.view.base import Ids

MAX_GROUPS_PER_CHART = 8  # more lines than this are no longer told apart; the table has them all


def interval_text(block: RatioEstimate | None, fmt: Callable[[Any], str] = fixed, suffix: str = "") -> str:
    """An estimate with its interval as text (a level's or a cache state's metric)."""
    block = block or RatioEstimate()
    return with_ci(block.estimate, block.ci_low, block.ci_high, fmt=fmt, suffix=suffix)


def _crossover(section: ConcurrencySection, dimension: str, group: str) -> int | None:
    return section.crossover.get(dimension, {}).get(group)


def crossover_charts(section: ConcurrencySection, ids: Ids | None = None) -> list[Any]:
    """Per dimension: speed-up and acceptance per group across the levels, with 95% intervals,
    each group's crossover (the lowest level whose speed-up interval lies below 1x) marked."""
    levels = [str(level) for level in section.levels]
    if len(levels) < 2:
        return []
    made = []
    for dimension, groups in section.groups.items():
        for metric, label, reference in (
            ("speedup", "speed-up (vanilla / speculative time per token)", 1.0),
            ("acceptance", "acceptance", None),
        ):
            series, said = [], []
            for index, (group, by_level) in enumerate(list(groups.items())[:MAX_GROUPS_PER_CHART]):
                blocks = [getattr(by_level.get(level) or LevelMetrics(), metric) or RatioEstimate() for level in levels]
                values = [b.estimate for b in blocks]
                if not any(isinstance(v, (int, float)) for v in values):
                    continue
                crossover = _crossover(section, dimension, group) if metric == "speedup" else None
                at = levels.index(str(crossover)) if crossover is not None and str(crossover) in levels else None
                colour = charts.OVERALL_COLOUR if group == "all" else charts.group_colour(index)
                series.append(charts.LevelSeries(str(group), colour, values, [b.ci_low for b in blocks], [b.ci_high for b in blocks], at))
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


def concurrency_view(snapshot: Snapshot, ids: Ids | None = None) -> dict[str, Any]:
    section, parity, stability = snapshot.concurrency, snapshot.logprob_parity, snapshot.acceptance_stability
    if section is None and parity is None:
        return {"ran": False}
    no_levels = {"levels": [], "charts": [], "message": "", "equivalence": [], "alpha_split": "", "rows": []}  # a server's parity alone
    return {
        "ran": True,
        **(_levels_view(section, ids) if section is not None else no_levels),
        "stability": {
            "ran": stability is not None,
            "badge": badge(stability.status if stability is not None else None),
            "message": (stability.message if stability is not None else None) or "",
        },
        "parity": {
            "ran": parity is not None,
            "badge": badge(parity.status if parity is not None else None),
            "message": (parity.message if parity is not None else None) or _parity_line(parity),
        },
    }


def _levels_view(section: ConcurrencySection, ids: Ids | None) -> dict[str, Any]:
    """Equivalence per level, the per group x level table with the crossover, and the charts."""
    levels = [str(level) for level in section.levels]
    equivalence = [
        {"level": level, "badge": badge(section.equivalence[level].status), "message": section.equivalence[level].message or ""}
        for level in levels
        if level in section.equivalence
    ]
    rows = []
    for dimension, groups in section.groups.items():
        for group, by_level in groups.items():
            for level in levels:
                metrics = by_level.get(level)
                if metrics is None or not metrics.model_fields_set:
                    continue
                speculative = metrics.speculative or EngineTimings()
                rows.append(
                    {
                        "dimension": dimension,
                        "group": group,
                        "level": level,
                        "acceptance": interval_text(metrics.acceptance, fmt=lambda v: f"{v:.2f}"),
                        "speedup": interval_text(metrics.speedup, suffix="×"),
                        "ttft_ms": interval_text(speculative.ttft_s, fmt=lambda v: f"{1000 * v:.0f}"),
                        "tokens_per_s": interval_text(speculative.tokens_per_s, fmt=lambda v: f"{v:.1f}"),
                        "crossover": _crossover(section, dimension, group),
                    }
                )
    return {
        "levels": levels,
        "charts": crossover_charts(section, ids),
        "message": section.message or "",
        "equivalence": equivalence,
        "alpha_split": _alpha_split_line(section),
        "rows": rows,
    }


def _alpha_split_line(section: ConcurrencySection) -> str:
    """How the run's alpha was split over the families its equivalence decision combines (none
    said for a snapshot written before the split, or a run at one level)."""
    pooled, level, independence = section.pooled_alpha, section.level_alpha, section.independence_alpha
    if pooled is None or len(section.levels) < 2:
        return ""
    return (
        f"The run's equivalence fails when the pooled battery, a level's battery or a level's independence test fails, so its "
        f"alpha is split over the three (Bonferroni): the pooled battery at {pooled:.3g}, each level's battery at {level:.3g}, "
        f"each level's independence tests at {independence:.3g} (split again over the engines). A correct server is failed at "
        "most alpha of the time."
    )


def _parity_line(parity: LogprobParitySection | None) -> str:
    if parity is None:
        return "the server returned no logprobs"
    return (
        f"{parity.positions} positions compared with the spec-OFF server's logprobs for the same prefix, none differing by more "
        f"than {fixed(parity.threshold, 3)} nats (twice the measured batch noise, {fixed(parity.batch_noise.max_abs_diff if parity.batch_noise is not None else None, 4)})"
    )


def concurrency_markdown(view: Mapping[str, Any]) -> list[str]:
    """summary.md lines for the part (none for a run without levels)."""
    part = view["concurrency"]
    if not part["ran"]:
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
