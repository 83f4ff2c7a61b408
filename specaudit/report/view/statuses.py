"""Statuses read (or honestly derived) from the snapshot, their badges, the group comparisons and
the speed summary.

A snapshot written before the decisive statuses existed carries old labels ("ok", "pass"); those
are never shown as they are: a comparison's status is then derived from its ratio's interval
against the band (an interval that straddles a band edge is INCONCLUSIVE, never "OK"), and a
two-sample test that cannot reject by construction is "not run"."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specaudit.contracts import DEFAULT_BAND, CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.report.view.format import MISSING, finite, fixed, get, integer, is_status, mapping, triple
from specaudit.report.view.subject import hardware_text

DECIDED = (DisparityStatus.FLAG, DisparityStatus.WITHIN)


def band_of(part: Mapping[str, Any]) -> tuple[float, float]:
    tolerance = get(part, "tolerance")
    if isinstance(tolerance, (list, tuple)) and len(tolerance) == 2 and all(map(finite, tolerance)) and 0 < tolerance[0] < tolerance[1]:
        return float(tolerance[0]), float(tolerance[1])
    return DEFAULT_BAND


def detectable_ratios(row: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """The smallest drop and rise of the ratio the comparison detects with 80% power: the
    comparison's `mdr` (a number, [low, high] or {low, high}) or the older
    min_detectable_ratio_low/high fields; None where unknown."""
    mdr = row.get("mdr")
    if isinstance(mdr, Mapping):
        low, high = mdr.get("low"), mdr.get("high")
    elif isinstance(mdr, (list, tuple)) and len(mdr) == 2:
        low, high = mdr
    elif finite(mdr):
        low, high = (mdr, None) if mdr < 1 else (None, mdr)
    else:
        low, high = row.get("min_detectable_ratio_low"), row.get("min_detectable_ratio_high")
    return (low if finite(low) else None), (high if finite(high) else None)


def comparison_status(row: Mapping[str, Any], band: tuple[float, float]) -> DisparityStatus:
    """A group comparison's DisparityStatus: the one it carries, else derived from its ratio's
    interval against the band; a design whose detectable ratio lies beyond the band cannot decide."""
    carried = row.get("status")
    if isinstance(carried, str) and carried in DisparityStatus.__members__:  # the new vocabulary is upper case
        return DisparityStatus(carried)
    ratio = row.get("ratio") if isinstance(row.get("ratio"), Mapping) else {}
    low, high = ratio.get("ci_low"), ratio.get("ci_high")
    mdr_low, mdr_high = detectable_ratios(row)
    decidable = (
        finite(low) and finite(high) and not ((mdr_low is not None and mdr_low < band[0]) or (mdr_high is not None and mdr_high > band[1]))
    )
    return DisparityStatus.from_interval(low if finite(low) else math.nan, high if finite(high) else math.nan, band, decidable=decidable)


def engine_status(entry: Mapping[str, Any]) -> EquivalenceStatus:
    """An engine's EquivalenceStatus: carried, else derived (a rejection or an impossible token is
    a violation; a bound below δ is equivalence; otherwise only "no violation found")."""
    carried = entry.get("status")
    if isinstance(carried, str):
        try:
            return EquivalenceStatus.parse(carried)
        except ValueError:
            pass
    gof, two = get(entry, "goodness_of_fit", default={}), get(entry, "two_sample", default={})
    greedy = get(entry, "greedy", default={})
    if not (gof or two or greedy):
        return EquivalenceStatus.NOT_RUN
    impossible = get(gof, "impossible_tokens", "statistic", default=0)
    if is_status(entry.get("verdict"), CheckStatus.FAIL) or (finite(impossible) and impossible > 0):
        return EquivalenceStatus.VIOLATION
    if get(entry, "tv_bound", "verdict") == "equivalent within delta":
        return EquivalenceStatus.EQUIVALENT
    return EquivalenceStatus.NO_VIOLATION_FOUND


def not_run_reason(test: Mapping[str, Any], *, two_sample: bool, samples: Any) -> str | None:
    """Why a test could not reject: the reason it carries, else (two-sample tests permuted within
    prompts) one sample per prompt and engine, which makes every permutation give the same statistic."""
    reason = test.get("not_run_reason")
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
def comparisons(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every (dimension, metric, group) comparison with the reference, its status and figures."""
    out = []
    for dimension, part in mapping(get(snapshot, "disparities")).items():
        if not isinstance(part, Mapping):
            continue
        band = band_of(part)
        for metric, block in mapping(get(part, "metrics")).items():
            for group, row in mapping(get(block, "pairwise")).items():
                if not isinstance(row, Mapping):
                    continue
                status = comparison_status(row, band)
                low, high = detectable_ratios(row)
                out.append(
                    {
                        "dimension": str(dimension),
                        "metric": str(metric),
                        "group": str(group),
                        "status": status,
                        "band": band,
                        "reference": get(part, "reference", default="overall"),
                        "row": row,
                        "n_prompts": row.get("n_prompts"),
                        "mdr_low": low,
                        "mdr_high": high,
                    }
                )
    return out


def prompts_to_decide(items: list[dict[str, Any]]) -> tuple[int, int] | None:
    """Prompts per group at which the comparisons could detect a ratio at the band's edges, from
    each comparison's own detectable ratio scaled by 1/√(prompts) (the normal approximation the
    detectable ratios come from): (median, largest) over the comparisons; None when none carries one."""
    needed = []
    for item in items:
        n = item.get("n_prompts")
        if not (finite(n) and n > 0):
            continue
        band = item["band"]
        for mdr, edge in ((item["mdr_low"], band[0]), (item["mdr_high"], band[1])):
            if mdr is not None and abs(mdr - 1) > abs(edge - 1) > 0:
                needed.append(math.ceil(n * ((mdr - 1) / (edge - 1)) ** 2))
    if not needed:
        return None
    needed.sort()
    return needed[len(needed) // 2], needed[-1]


def speed_summary(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """Overall speed-up (the dimension covering the most prompts), groups slower than vanilla, and
    the conditions the timings were taken under."""
    groups = mapping(get(snapshot, "groups"))
    overall, overall_dim, overall_n = None, None, -1
    slower, slower_sig, total, by_dim = [], [], 0, []
    for dimension, part in groups.items():
        block = get(part, "overall", "metrics", "speedup")
        n = get(part, "overall", "n_prompts", default=0)
        if isinstance(block, Mapping) and finite(block.get("value")) and finite(n) and n > overall_n:
            overall, overall_dim, overall_n = block, dimension, n
        for group, entry in mapping(get(part, "by_group")).items():
            sp = get(entry, "metrics", "speedup")
            if not isinstance(sp, Mapping) or not finite(sp.get("value")):
                continue
            total += 1
            if sp["value"] < 1:
                slower.append(f"{dimension}={group}")
                if finite(sp.get("ci_high")) and sp["ci_high"] < 1:
                    slower_sig.append(f"{dimension}={group}")
            by_dim.append((sp["value"], f"{dimension}={group}"))
    run = get(snapshot, "run", default={})
    config = get(run, "config", default={})
    device = get(run, "device", default={})
    threads = get(device, "threads", default=get(config, "threads"))
    repeats = get(config, "timing_repeats")
    conditions = [
        f"{threads} CPU thread{'s' if threads != 1 else ''}" if finite(threads) else "threads not recorded",
        (
            f"{repeats} extra timing run{'s' if repeats != 1 else ''} per prompt"
            if finite(repeats) and repeats > 0
            else "one timed run per prompt (no repeats)"
            if finite(repeats)
            else "timing repeats not recorded"
        ),
        f"warm-up {get(config, 'warmup')}" if finite(get(config, "warmup")) else None,
        f"device {hardware_text(run)}",
        "vanilla and speculative timed back to back per prompt",
    ]
    if get(device, "shared") is True:
        conditions.append("shared machine (other processes ran)")
    values = sorted(by_dim)
    model = mapping(get(snapshot, "speed"))
    predicted = model.get("source") == "cost model"
    model_lines = []
    if predicted:
        check = mapping(get(model, "validation", "measured_over_predicted"))
        model_lines.append(
            f"Predicted for every screened prompt by a cost model fitted on {integer(get(model, 'cost_model', 'n_prompts'))} "
            f"prompts timed by both engines; out of sample, measured / predicted = {triple(check, fixed, '×')}."
        )
        smallest = model.get("validation_by_group_smallest_pvalue_holm")
        if model.get("finding"):
            model_lines.append(f"Finding: {model['finding']}.")
        elif model.get("single_prompt_outliers"):
            model_lines.append(f"Note: {model['single_prompt_outliers']}.")
        elif finite(smallest):
            model_lines.append(
                f"Per group, no group's timed prompts differ from the other timed prompts' measured / predicted "
                f"({integer(model.get('validation_by_group_tested'))} groups; smallest Holm-adjusted p = {smallest:.2g})."
            )
    elif model.get("source") == "none":
        model_lines.append(f"No speed-up: {model.get('reason')}.")
    return {
        "predicted": predicted,
        "word": "Predicted" if predicted else "Measured",
        "model_lines": model_lines,
        "ran": overall is not None,
        "overall": triple(overall, fixed, "×") if overall else MISSING,
        "overall_block": overall or {},
        "overall_scope": f"{integer(overall_n)} prompts of the {overall_dim} dimension" if overall else "",
        "below_one": bool(overall) and finite(overall.get("ci_high")) and overall["ci_high"] < 1,
        "above_one": bool(overall) and finite(overall.get("ci_low")) and overall["ci_low"] > 1,
        "n_groups": total,
        "slower": slower,
        "slower_sig": slower_sig,
        "range": f"{fixed(values[0][0])}× ({values[0][1]}) to {fixed(values[-1][0])}× ({values[-1][1]})" if values else MISSING,
        "conditions": [c for c in conditions if c],
        "machine": hardware_text(run),
        "projection": _projection(snapshot),
    }


def _projection(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    """The deployment projection (analysis --deployment-cost-ratio): its c, v and the range of the
    groups' projected speed-ups; None where no cost ratio was given."""
    values, setting = [], None
    for part in mapping(get(snapshot, "recommendations")).values():
        projection = get(part, "projection")
        if isinstance(projection, Mapping):
            setting = projection
        for name, row in mapping(get(part, "by_group")).items():
            projected = get(row, "projected_speedup", "value")
            if finite(projected):
                values.append((projected, name))
    if setting is None or not values:
        return None
    values.sort()
    return {
        "cost": setting.get("cost_ratio"),
        "verify": setting.get("verify_cost"),
        "range": f"{fixed(values[0][0])}× ({values[0][1]}) to {fixed(values[-1][0])}× ({values[-1][1]})",
        "below_one": sum(v < 1 for v, _ in values),
        "n": len(values),
    }
