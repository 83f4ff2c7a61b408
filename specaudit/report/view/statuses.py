"""Statuses read (or honestly derived) from the snapshot, their badges, the group comparisons and
the speed summary.

A status the contract parsed is shown as it is; one the snapshot does not carry is derived: a
comparison's from its ratio's interval against the band (an interval that straddles a band edge
is INCONCLUSIVE, never "OK"; an old label such as "ok" breaks the contract and is refused on
read), an engine's from its tests, and a two-sample test that cannot reject by construction is
"not run"."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specaudit.contracts import DEFAULT_BAND, CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.contracts.snapshot import DeviceInfo, RunConfigBlock
from specaudit.report.view.format import MISSING, finite, fixed, integer, recorded, triple
from specaudit.report.view.subject import hardware_text

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import (
        BatteryTest,
        Comparison,
        DimensionDisparities,
        EngineEquivalence,
        EquivalenceSection,
        MetricEstimate,
        Snapshot,
    )

DECIDED = (DisparityStatus.FLAG, DisparityStatus.WITHIN)


def band_of(part: DimensionDisparities | None) -> tuple[float, float]:
    tolerance = part.tolerance if part is not None else None
    if isinstance(tolerance, list) and len(tolerance) == 2 and all(map(finite, tolerance)) and 0 < tolerance[0] < tolerance[1]:
        return float(tolerance[0]), float(tolerance[1])
    return DEFAULT_BAND


def detectable_ratios(row: Comparison) -> tuple[float | None, float | None]:
    """The smallest drop and rise of the ratio the comparison detects with 80% power: its
    min_detectable_ratio_low/high, or the `mdr` extra of hand-made and early snapshots (a number,
    [low, high] or {low, high}); None where unknown."""
    mdr = getattr(row, "mdr", None)
    if isinstance(mdr, Mapping):
        low, high = mdr.get("low"), mdr.get("high")
    elif isinstance(mdr, list) and len(mdr) == 2:
        low, high = mdr
    elif finite(mdr):
        low, high = (mdr, None) if mdr < 1 else (None, mdr)
    else:
        low, high = row.min_detectable_ratio_low, row.min_detectable_ratio_high
    return (low if finite(low) else None), (high if finite(high) else None)


def comparison_status(row: Comparison, band: tuple[float, float]) -> DisparityStatus:
    """A group comparison's DisparityStatus: the one it carries, else derived from its ratio's
    interval against the band; a design whose detectable ratio lies beyond the band cannot decide."""
    if row.status is not None:
        return row.status
    low, high = (row.ratio.ci_low, row.ratio.ci_high) if row.ratio is not None else (None, None)
    mdr_low, mdr_high = detectable_ratios(row)
    decidable = (
        finite(low) and finite(high) and not ((mdr_low is not None and mdr_low < band[0]) or (mdr_high is not None and mdr_high > band[1]))
    )
    return DisparityStatus.from_interval(low if finite(low) else math.nan, high if finite(high) else math.nan, band, decidable=decidable)


def engine_status(entry: EngineEquivalence) -> EquivalenceStatus:
    """An engine's EquivalenceStatus: carried, else derived (a rejection or an impossible token is
    a violation; a bound below δ is equivalence; otherwise only "no violation found")."""
    if entry.status is not None:
        return entry.status
    if entry.goodness_of_fit is None and entry.two_sample is None and entry.greedy is None:
        return EquivalenceStatus.NOT_RUN
    impossible = entry.goodness_of_fit.impossible_tokens if entry.goodness_of_fit is not None else None
    if entry.verdict is CheckStatus.FAIL or (impossible is not None and finite(impossible.statistic) and impossible.statistic > 0):
        return EquivalenceStatus.VIOLATION
    if entry.tv_bound is not None and entry.tv_bound.verdict == "equivalent within delta":
        return EquivalenceStatus.EQUIVALENT
    return EquivalenceStatus.NO_VIOLATION_FOUND


# Worst first: a violation, then an engine left untested, then no violation found, then equivalence.
CORRECTNESS_ORDER = (
    EquivalenceStatus.VIOLATION,
    EquivalenceStatus.NOT_RUN,
    EquivalenceStatus.NO_VIOLATION_FOUND,
    EquivalenceStatus.EQUIVALENT,
)


def audited_correctness(section: EquivalenceSection) -> EquivalenceStatus:
    """The correctness of a run in the report's words: the worst status of its audited engines
    (the control excluded); NOT_RUN where none was tested."""
    control = section.control or CONTROL_ENGINE
    statuses = [engine_status(entry) for name, entry in section.engines.items() if name not in (control, SCREEN_ENGINE)]
    return min(statuses, key=CORRECTNESS_ORDER.index, default=EquivalenceStatus.NOT_RUN)


def not_run_reason(test: BatteryTest, *, two_sample: bool, samples: Any) -> str | None:
    """Why a test could not reject (`test` one of a battery's tests): the reason it carries, else
    (two-sample tests permuted within prompts) one sample per prompt and engine, which makes
    every permutation give the same statistic."""
    reason = test.not_run_reason
    if reason:
        return str(reason)
    if two_sample and finite(samples) and samples < 2:
        return (
            "one sample per prompt and engine: permuting engine labels within a prompt cannot change the statistic, "
            "so p = 1 by construction (rerun with --samples 2 or more)"
        )
    return None


STATUS_TEXT = {
    DisparityStatus.FLAG: "interval wholly outside the band",
    DisparityStatus.WITHIN: "interval wholly inside the band: parity shown",
    DisparityStatus.INCONCLUSIVE: "interval crosses a band edge: cannot tell",
    DisparityStatus.INSUFFICIENT: "too few prompts for this design to decide",
}
STATUS_CSS = {
    DisparityStatus.FLAG: "fail",
    DisparityStatus.WITHIN: "pass",
    DisparityStatus.INCONCLUSIVE: "warn",
    DisparityStatus.INSUFFICIENT: "none",
}
STATUS_SYMBOL = {
    DisparityStatus.FLAG: "■",
    DisparityStatus.WITHIN: "●",
    DisparityStatus.INCONCLUSIVE: "◆",
    DisparityStatus.INSUFFICIENT: "△",
}
EQUIVALENCE_CSS = {
    EquivalenceStatus.VIOLATION: "fail",
    EquivalenceStatus.EQUIVALENT: "pass",
    EquivalenceStatus.NO_VIOLATION_FOUND: "warn",
    EquivalenceStatus.NOT_RUN: "none",
}


def status_badge(status: DisparityStatus | EquivalenceStatus | str) -> dict[str, str]:
    if isinstance(status, DisparityStatus):
        return {"text": status.value, "css": STATUS_CSS[status], "symbol": STATUS_SYMBOL[status], "key": status.value.lower()}
    if isinstance(status, EquivalenceStatus):
        symbol = {"fail": "✗", "pass": "✓", "warn": "?", "none": "–"}[EQUIVALENCE_CSS[status]]
        return {"text": status.value.upper(), "css": EQUIVALENCE_CSS[status], "symbol": symbol, "key": status.name.lower()}
    return {"text": str(status).upper(), "css": "none", "symbol": "–", "key": str(status).lower()}


# ============================================================================ comparisons
@dataclass(frozen=True)
class GroupComparison:
    """One group's comparison with its dimension's reference on one metric: its status and figures."""

    dimension: str
    metric: str
    group: str
    status: DisparityStatus
    band: tuple[float, float]
    reference: str
    row: Comparison
    n_prompts: int | None
    mdr_low: float | None
    mdr_high: float | None


def comparisons(snapshot: Snapshot) -> list[GroupComparison]:
    """Every (dimension, metric, group) comparison with the reference, its status and figures."""
    return [c for dimension, part in snapshot.disparities.items() for c in dimension_comparisons(dimension, part)]


def dimension_comparisons(dimension: str, part: DimensionDisparities) -> list[GroupComparison]:
    """One dimension's comparisons (metric x group) with its reference."""
    out = []
    band = band_of(part)
    for metric, block in part.metrics.items():
        for group, row in block.pairwise.items():
            low, high = detectable_ratios(row)
            out.append(
                GroupComparison(
                    dimension=str(dimension),
                    metric=str(metric),
                    group=str(group),
                    status=comparison_status(row, band),
                    band=band,
                    reference=part.reference or "overall",
                    row=row,
                    n_prompts=row.n_prompts,
                    mdr_low=low,
                    mdr_high=high,
                )
            )
    return out


def prompts_to_decide(items: list[GroupComparison]) -> tuple[int, int] | None:
    """Prompts per group at which the comparisons could detect a ratio at the band's edges, from
    each comparison's own detectable ratio scaled by 1/√(prompts) (the normal approximation the
    detectable ratios come from): (median, largest) over the comparisons; None when none carries one."""
    needed = []
    for item in items:
        n = item.n_prompts
        if not (finite(n) and n > 0):
            continue
        band = item.band
        for mdr, edge in ((item.mdr_low, band[0]), (item.mdr_high, band[1])):
            if mdr is not None and abs(mdr - 1) > abs(edge - 1) > 0:
                needed.append(math.ceil(n * ((mdr - 1) / (edge - 1)) ** 2))
    if not needed:
        return None
    needed.sort()
    return needed[len(needed) // 2], needed[-1]


@dataclass(frozen=True)
class Projection:
    """The deployment projection (analysis --deployment-cost-ratio): its c and v, the range of the
    groups' projected speed-ups and how many of them fall below 1x."""

    cost: float | None
    verify: float | None
    range: str
    below_one: int
    n: int


@dataclass(frozen=True)
class SpeedSummary:
    """What the decision, the speed card and the actions say about speed."""

    predicted: bool
    word: str
    model_lines: list[str]
    ran: bool
    overall: str
    overall_block: MetricEstimate | None
    overall_scope: str
    below_one: bool
    above_one: bool
    n_groups: int
    slower: list[str]
    slower_sig: list[str]
    range: str
    conditions: list[str]
    machine: str
    projection: Projection | None


def speed_summary(snapshot: Snapshot) -> SpeedSummary:
    """Overall speed-up (the dimension covering the most prompts), groups slower than vanilla, and
    the conditions the timings were taken under."""
    overall, overall_dim, overall_n = None, None, -1
    slower, slower_sig, total, by_dim = [], [], 0, []
    for dimension, part in snapshot.groups.items():
        block = part.overall.metrics.get("speedup") if part.overall is not None else None
        n = part.overall.n_prompts if part.overall is not None and part.overall.n_prompts is not None else 0
        if block is not None and finite(block.value) and finite(n) and n > overall_n:
            overall, overall_dim, overall_n = block, dimension, n
        for group, entry in part.by_group.items():
            sp = entry.metrics.get("speedup")
            if sp is None or not finite(sp.value):
                continue
            total += 1
            if sp.value < 1:
                slower.append(f"{dimension}={group}")
                if finite(sp.ci_high) and sp.ci_high < 1:
                    slower_sig.append(f"{dimension}={group}")
            by_dim.append((sp.value, f"{dimension}={group}"))
    run = snapshot.run
    config = run.config or RunConfigBlock()
    threads = recorded((run.device or DeviceInfo()).threads, config.threads)
    repeats = config.timing_repeats
    conditions = [
        f"{threads} CPU thread{'s' if threads != 1 else ''}" if finite(threads) else "threads not recorded",
        (
            f"{repeats} extra timing run{'s' if repeats != 1 else ''} per prompt"
            if finite(repeats) and repeats > 0
            else "one timed run per prompt (no repeats)"
            if finite(repeats)
            else "timing repeats not recorded"
        ),
        f"warm-up {config.warmup}" if finite(config.warmup) else None,
        f"device {hardware_text(run)}",
        "vanilla and speculative timed back to back per prompt",
    ]
    values = sorted(by_dim)
    model = snapshot.speed
    predicted = model is not None and model.source == "cost model"
    model_lines = []
    if predicted:
        check = model.validation.measured_over_predicted if model.validation is not None else None
        model_lines.append(
            f"Predicted for every screened prompt by a cost model fitted on {integer(model.cost_model.n_prompts if model.cost_model is not None else None)} "
            f"prompts timed by both engines; out of sample, measured / predicted = {triple(check, fixed, '×')}."
        )
        smallest = model.validation_by_group_smallest_pvalue_holm
        if model.finding:
            model_lines.append(f"Finding: {model.finding}.")
        elif model.single_prompt_outliers:
            model_lines.append(f"Note: {model.single_prompt_outliers}.")
        elif finite(smallest):
            model_lines.append(
                f"Per group, no group's timed prompts differ from the other timed prompts' measured / predicted "
                f"({integer(model.validation_by_group_tested)} groups; smallest Holm-adjusted p = {smallest:.2g})."
            )
    elif model is not None and model.source == "none":
        model_lines.append(f"No speed-up: {model.reason}.")
    return SpeedSummary(
        predicted=predicted,
        word="Predicted" if predicted else "Measured",
        model_lines=model_lines,
        ran=overall is not None,
        overall=triple(overall, fixed, "×") if overall else MISSING,
        overall_block=overall,
        overall_scope=f"{integer(overall_n)} prompts of the {overall_dim} dimension" if overall else "",
        below_one=bool(overall) and finite(overall.ci_high) and overall.ci_high < 1,
        above_one=bool(overall) and finite(overall.ci_low) and overall.ci_low > 1,
        n_groups=total,
        slower=slower,
        slower_sig=slower_sig,
        range=f"{fixed(values[0][0])}× ({values[0][1]}) to {fixed(values[-1][0])}× ({values[-1][1]})" if values else MISSING,
        conditions=[c for c in conditions if c],
        machine=hardware_text(run),
        projection=_projection(snapshot),
    )


def _projection(snapshot: Snapshot) -> Projection | None:
    """The deployment projection; None where no cost ratio was given."""
    values, setting = [], None
    for part in snapshot.recommendations.values():
        if part.projection is not None:
            setting = part.projection
        for name, row in part.by_group.items():
            projected = row.projected_speedup.value if row.projected_speedup is not None else None
            if finite(projected):
                values.append((projected, name))
    if setting is None or not values:
        return None
    values.sort()
    return Projection(
        cost=setting.cost_ratio,
        verify=setting.verify_cost,
        range=f"{fixed(values[0][0])}× ({values[0][1]}) to {fixed(values[-1][0])}× ({values[-1][1]})",
        below_one=sum(v < 1 for v, _ in values),
        n=len(values),
    )
