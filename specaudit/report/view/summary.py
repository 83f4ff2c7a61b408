"""The top of the report view: the decision, the cards (correctness, fairness, speed), the
headline numbers and the speed chart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import specaudit.report.charts as charts
from specaudit.contracts import DisparityStatus, EquivalenceStatus
from specaudit.contracts.run import SCREEN_ENGINE
from specaudit.contracts.snapshot import DimensionGroups, GroupEntry, ScreenTest
from specaudit.report.view.base import FOREST_METRICS, NOT_RUN, Ids
from specaudit.report.view.disparity import dimension_summary
from specaudit.report.view.format import (
    badge,
    finite,
    fixed,
    integer,
    metric_label,
    recorded,
    triple,
)
from specaudit.report.view.sampling import sampling_view
from specaudit.report.view.statuses import GroupComparison, SpeedSummary, comparisons, speed_summary, status_badge
from specaudit.report.view.subject import subject
from specaudit.report.view.verdicts import actions, decide

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import MetricEstimate, Snapshot


@dataclass(frozen=True)
class Card:
    """One of the summary's three cards: correctness, fairness, speed (only speed has timing conditions)."""

    label: str
    anchor: str
    badge: dict[str, str]
    lines: list[str]
    conditions: list[str] | None = None


def summary_view(view: dict[str, Any], snapshot: Snapshot) -> dict[str, Any]:
    eq, disp, gate = view["equivalence"], view["disparity"], view["gate"]
    engines = [(e["name"], e["status"]) for e in eq["engines"] if not e["is_control"]] if eq["ran"] else []
    comps = comparisons(snapshot)
    speed = speed_summary(snapshot)
    badges = [
        {"label": "Equivalence", "badge": eq["badge"], "anchor": "equivalence", "line": _equivalence_line(eq)},
        {"label": "Disparity", "badge": disp["badge"], "anchor": "disparity", "line": _disparity_line(disp)},
        {"label": "Gate", "badge": gate["badge"], "anchor": "gate", "line": _gate_line(gate)},
    ]
    return {
        "ran": True,
        "badges": badges,
        "headline": _headline(eq, disp, snapshot),
        "decision": decide(snapshot, engines, comps, speed),
        "cards": [_correctness_card(eq, engines), _fairness_card(comps, disp, snapshot), _speed_card(speed)],
        "subject": subject(snapshot),
        "actions": actions(snapshot, engines, comps, speed, eq),
        "sampling": sampling_view(snapshot),
    }


def _correctness_card(eq: dict[str, Any], engines: list) -> Card:
    if not eq["ran"]:
        return Card(label="Correctness", anchor="equivalence", badge=status_badge(EquivalenceStatus.NOT_RUN), lines=[eq["reason"]])
    order = [
        EquivalenceStatus.VIOLATION,
        EquivalenceStatus.NOT_RUN,
        EquivalenceStatus.NO_VIOLATION_FOUND,
        EquivalenceStatus.EQUIVALENT,
    ]
    worst_status = min((s for _, s in engines), key=order.index, default=EquivalenceStatus.NOT_RUN)
    lines = []
    for e in eq["engines"]:
        if e["is_control"]:
            lines.append(
                f"Control ({e['name']}): {e['badge']['text']}"
                + (
                    f": {eq['warning'].split(': a correct')[0]}"
                    if eq["warning"]
                    else " (plain decoding passes the same tests, so the audit can be trusted)"
                    if e["badge"]["key"] == "pass"
                    else ""
                )
            )
            continue
        if e["mode"] == "greedy":
            lines.append(f"{e['name']}: greedy output equals vanilla on {e['n_matches']} of {e['n_pairs']} prompts ({e['match_rate']}).")
            continue
        text = (
            f"{e['name']}: {e['status'].value} in {e['n_tokens']} tokens (smallest Holm-adjusted p = {e['battery_p']}, α = {eq['alpha']})"
        )
        if e["rejected"] and e["battery_p"] != "<0.001":  # a rejection chance makes now and then (p = 0 is a proof): how often
            text += (
                "; a correct engine is rejected like this in about α of audits (the reference engine at the quick budget: "
                "2 of 42 seeds, docs/statistics.md): rerun with another --seed, where chance rarely rejects twice"
            )
        if e["proof"]:
            text = f"{e['name']}: {e['status'].value}: {e['proof']}"
        if e["pit_bound"].ran:
            text += f"; {e['pit_bound'].sentence}"
        if e["tv"].ran:
            text += f"; TV upper bound {e['tv'].upper} against δ = {e['tv'].delta}: {e['tv'].verdict}"
        pit = next((p for p in e["power"] if p.label.startswith("PIT")), None)
        if pit:
            text += f"; a PIT distortion of {pit.value} or more would have been found (80% power)"
        lines.append(text + ".")
    return Card(label="Correctness", anchor="equivalence", badge=status_badge(worst_status), lines=lines)


def _screen_line(snapshot: Snapshot) -> str | None:
    """Where acceptance per group came from, when the screen measured it, and its check against the engine."""
    if snapshot.run.disparity_engine != SCREEN_ENGINE:
        return None
    check = snapshot.screen
    line = "Acceptance per group is the screen's: the expected acceptance along target samples of every prompt."
    ratio = check.engine_over_screen_acceptance if check is not None else None
    if ratio is not None:
        given = check.given_engine_paths or ScreenTest()
        line += (
            f" On the {integer(check.n_prompts)} prompts the speculative engine also ran, its acceptance is "
            f"{triple(ratio, fixed, '×')} the screen's"
            + (
                f", and {triple(given, fixed, '×')} what the screen's model gives its own paths"
                if "value" in given.model_fields_set
                else ""
            )
        )
        if check.agrees:
            line += " (agrees)."
        elif given.rejected:
            line += ": the screen may not reproduce this engine (see the gate's screen-agreement check)."
        else:
            line += (
                ": the same-prompts interval excludes 1; along the engine's own paths no error of the screen's model is shown "
                "(a correct screen differs like this in about 1 audit in 20)."
            )
    return line


def _fairness_card(comps: list[GroupComparison], disp: dict[str, Any], snapshot: Snapshot) -> Card:
    if not comps:
        return Card(
            label="Fairness",
            anchor="disparity",
            badge=badge(NOT_RUN),
            lines=[disp["reason"] if not disp["ran"] else "no group comparisons"],
        )
    headline = dimension_summary([c.status for c in comps])
    counts = {s: sum(c.status == s for c in comps) for s in DisparityStatus}
    groups = {(c.dimension, c.group) for c in comps}
    dims = {c.dimension for c in comps}
    sizes = [c.n_prompts for c in comps if finite(c.n_prompts)]
    lows = [c.mdr_low for c in comps if c.mdr_low is not None]
    reference_line = (
        "Reference groups: "
        + "; ".join(
            f"{dimension}: {recorded(part.reference, 'overall')} ({part.reference_reason or 'reason not recorded'})"
            for dimension, part in snapshot.groups.items()
            if dimension in dims
        )
        + "."
    )
    lines = [
        f"{len(comps)} comparisons of {len(groups)} groups with their reference in {len(dims)} dimension(s): "
        + ", ".join(f"{counts[s]} {s.value}" for s in DisparityStatus)
        + "."
    ]
    if sizes:
        lines.append(
            f"Groups hold {min(sizes)}"
            + (f"–{max(sizes)}" if max(sizes) != min(sizes) else "")
            + " prompts"
            + (f"; at that size a ratio must fall below about {fixed(max(lows))} to be detected" if lows else "")
            + "."
        )
    flagged = sorted({f"{c.dimension}={c.group}" for c in comps if c.status == DisparityStatus.FLAG})
    if flagged:
        lines.append("Outside the band: " + ", ".join(flagged) + ".")
    lines.append(reference_line)
    both = [str(d) for d, part in snapshot.disparities.items() if {"acceptance_rate", "mean_beta"} <= set(part.compared_metrics or [])]
    if both:
        lines.append(
            "The engine accepts by a rule of its own: groups are compared on the rule's acceptance rate (what decides its users' "
            "speed-up; the gate judges it), with mean acceptance β̄ = Σ min(p, q) beside it as what rejection sampling would "
            "give this pair; both with intervals."
        )
    screen = _screen_line(snapshot)
    if screen:
        lines.append(screen)
    return Card(label="Fairness", anchor="disparity", badge=status_badge(headline), lines=lines)


def speed_chart(snapshot: Snapshot, ids: Ids) -> Any:
    """Every group's measured speed-up against vanilla (not a ratio to a reference group): the
    decisive fact when speculation slows groups down."""
    rows, described = [], []
    for dimension, part in snapshot.groups.items():
        for index, (group, entry) in enumerate(part.by_group.items()):
            block = entry.metrics.get("speedup")
            if block is None or not finite(block.value):
                continue
            low, high = block.ci_low, block.ci_high
            status = "SLOWER" if finite(high) and high < 1 else "FASTER" if finite(low) and low > 1 else "UNCLEAR"
            text = triple(block, fixed, "×")
            rows.append(
                charts.RatioRow(
                    f"{dimension}={group}",
                    entry.n_prompts,
                    charts.group_colour(index),
                    [charts.RatioCell(block.value, low, high, status, text)],
                )
            )
            described.append(f"{dimension}={group} {text} {status}")
    if not rows:
        return None
    counts = {s: sum(r.cells[0].status == s for r in rows) for s in ("SLOWER", "UNCLEAR", "FASTER")}
    word = "Predicted" if _predicted(snapshot) else "Measured"
    desc = (
        f"{word} speed-up of speculative over vanilla decoding for each of {len(rows)} groups, log scale, with 95% intervals; "
        f"{counts['SLOWER']} slower (interval below 1×), {counts['UNCLEAR']} unclear, {counts['FASTER']} faster. " + "; ".join(described)
    )
    return charts.ratio_forest(
        rows,
        ["Speed-up against vanilla"],
        band=None,
        chart_id=ids("speed"),
        title="Speed-up per group",
        desc=desc,
        axis_label="speed-up (log scale; 1× = as fast as vanilla)",
        value_header="speed-up [95% CI]",
    )


def _speed_card(speed: SpeedSummary) -> Card:
    if not speed.ran:
        return Card(
            label="Speed",
            anchor="speed",
            badge=badge(NOT_RUN),
            lines=speed.model_lines or ["no speed-up measured (needs the vanilla engine)"],
            conditions=speed.conditions,
        )
    shown = (
        {"text": "SLOWER", "css": "fail", "symbol": "▼", "key": "slower"}
        if speed.below_one
        else {"text": "FASTER", "css": "pass", "symbol": "▲", "key": "faster"}
        if speed.above_one
        else {"text": "UNCLEAR", "css": "warn", "symbol": "?", "key": "unclear"}
    )
    projection = speed.projection
    lines = [
        f"{speed.word} overall speed-up {speed.overall} over {speed.overall_scope}, on the audit's machine "
        f"({speed.machine}): a speed-up holds for the hardware it was measured on.",
        (
            f"{len(speed.slower)} of {speed.n_groups} groups run slower than vanilla "
            f"({len(speed.slower_sig)} with the whole interval below 1×); range {speed.range}."
        ),
        *speed.model_lines,
        (
            f"Projected for the deployment described (draft cost c = {projection.cost}, verification cost v = "
            f"{projection.verify} target steps; a projection from mean acceptance β̄, not a measurement): "
            f"{projection.range}; {projection.below_one} of {projection.n} groups below 1×."
            if projection
            else "For another machine, `--deployment-cost-ratio C` (its draft/target cost ratio) projects each group's speed-up "
            "there from its mean acceptance β̄."
        ),
    ]
    return Card(label="Speed", anchor="speed", badge=shown, lines=lines, conditions=speed.conditions)


def _equivalence_line(eq: dict[str, Any]) -> str:
    if not eq["ran"]:
        return eq["reason"]
    audited = [e for e in eq["engines"] if not e["is_control"]]
    if eq["status"] == "error":
        return eq["message"] or "the vanilla control failed: the audit cannot be trusted"
    failing = [e["name"] for e in audited if e["badge"]["key"] == "fail"]
    if failing:
        return f"{', '.join(failing)}: output is NOT distributed as the target's"
    if eq["mode"] == "greedy":
        return "greedy output matches vanilla (divergences, if any, are floating-point near-ties)"
    return (
        f"no test rejects that {', '.join(e['name'] for e in audited) or 'the engines'} sample exactly from the target "
        f"(α = {eq['alpha']}, Holm-corrected); not rejected is not proven: see the TV bound"
    )


def _disparity_line(disp: dict[str, Any]) -> str:
    if not disp["ran"]:
        return disp["reason"]
    parts = []
    for d in disp["dimensions"]:
        if not d["ran"]:
            parts.append(f"{d['name']}: {d['reason']}")
            continue
        counts = ", ".join(f"{n} {s}" for s, n in d["counts"].items() if n)
        parts.append(f"{d['name']}: {counts or 'no comparisons'}")
    return "; ".join(parts)


def _gate_line(gate: dict[str, Any]) -> str:
    if not gate["ran"]:
        return gate["reason"]
    c = gate["counts"]
    return f"{c['pass']} pass, {c['warn']} warn, {c['fail']} fail"


def _predicted(snapshot: Snapshot) -> bool:
    """Whether the speed-ups are the screen's cost model's predictions (else measured)."""
    return snapshot.speed is not None and snapshot.speed.source == "cost model"


def _headline(eq: dict[str, Any], disp: dict[str, Any], snapshot: Snapshot) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for engine in eq["engines"] if eq["ran"] else []:
        if engine["is_control"]:
            continue
        if engine["mode"] == "greedy":
            rows.append(
                {
                    "what": f"greedy exact-match rate, {engine['name']}",
                    "value": engine["match_rate"],
                    "note": f"{engine['n_matches']} of {engine['n_pairs']} prompts",
                }
            )
            continue
        tv = engine["tv"]
        rows.append(
            {
                "what": f"tokens tested, {engine['name']}",
                "value": engine["n_tokens"],
                "note": f"smallest Holm-adjusted p over its tests = {engine['battery_p']}",
            }
        )
        if tv.ran:
            rows.append(
                {
                    "what": f"TV distance upper bound (first token), {engine['name']}",
                    "value": tv.upper,
                    "note": f"margin δ = {tv.delta}: {tv.verdict}",
                }
            )
        pit = next((p for p in engine["power"] if p.label.startswith("PIT")), None)
        if pit:
            rows.append(
                {
                    "what": f"smallest PIT distortion detectable (80% power), {engine['name']}",
                    "value": pit.value,
                    "note": "distortions smaller than this could pass unseen",
                }
            )
    for d in disp["dimensions"] if disp["ran"] else []:
        name = d["name"]
        reference = d["reference"] if d["ran"] else None  # a dimension that could not be rendered has none
        dim = snapshot.groups.get(name) or DimensionGroups()
        overall = dim.overall or GroupEntry(metrics={})
        n = integer(overall.n_prompts)
        if "acceptance_rate" in overall.metrics:
            rows.append(
                {
                    "what": f"acceptance rate, all prompts ({name})",
                    "value": triple(overall.metrics["acceptance_rate"]),
                    "note": f"{n} prompts",
                }
            )
        if "speedup" in overall.metrics:
            rows.append(
                {
                    "what": f"speed-up, all prompts ({name})",
                    "value": triple(overall.metrics["speedup"], fixed, "×"),
                    "note": f"{n} prompts, " + ("predicted by the cost model" if _predicted(snapshot) else "paired vanilla vs speculative"),
                }
            )
        for metric in FOREST_METRICS:
            lowest = _lowest_group(dim.by_group, metric)
            if lowest:
                group, block, size = lowest
                rows.append(
                    {
                        "what": f"lowest {metric_label(metric)}: {name}={group}",
                        "value": triple(block, fixed, "×") if metric == "speedup" else triple(block),
                        "note": f"{size} prompts; reference {reference}",
                    }
                )
    return rows


def _lowest_group(by_group: dict[str, GroupEntry], metric: str) -> tuple[str, MetricEstimate, str] | None:
    candidates = [(g, e.metrics.get(metric), e.n_prompts) for g, e in by_group.items()]
    candidates = [(g, b, n) for g, b, n in candidates if b is not None and finite(b.value)]
    if len(candidates) < 2:
        return None
    group, block, n = min(candidates, key=lambda c: c[1].value)
    return group, block, integer(n)
