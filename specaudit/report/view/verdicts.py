"""What the report concludes: the decision banner and the deduplicated "What to do" list. Layout
lives in the templates; this module only decides what is said.

What it builds on lives beside it and is importable from here too: statuses, badges, group
comparisons and the speed summary in `_statuses.py`, the audit subject and rerun commands in
`_subject.py`, the glossary in `_glossary.py`. Statuses come from specaudit.contracts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specaudit.contracts import CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.contracts.engines import BEYOND_CHAINS, engine_settings, step_shape
from specaudit.contracts.snapshot import GateThresholdsBlock, PitBound, RunConfigBlock, SamplePlan
from specaudit.decoding._shapes import DEFAULT_LEVEL_K, speculative_engines
from specaudit.gate.decision import BLOCKING, DecisionFacts, decision_key
from specaudit.gate.results import fail_on_for
from specaudit.report.view.costs import BUDGET_HOURS, best_k_speedup, predicted_rerun, rerun_cost
from specaudit.report.view.format import finite, recorded
from specaudit.report.view.statuses import (
    DECIDED,
    GroupComparison,
    SpeedSummary,
    prompts_to_decide,
)
from specaudit.report.view.subject import with_flags

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot

# ============================================================================ decision
DECISIONS = {
    "enable": ("Enable", "pass"),
    "conditions": ("Enable with conditions", "warn"),
    "do_not": ("Do not enable", "fail"),
    "insufficient": ("Insufficient evidence", "none"),
}


def decide(
    snapshot: Snapshot, engines: list[tuple[str, EquivalenceStatus]], comps: list[GroupComparison], speed: SpeedSummary
) -> dict[str, Any]:
    """The banner: derived from the gate, with the evidence that decides it.

    Order: no gate → insufficient; a failing gate check or an equivalence violation → do not
    enable; equivalence not tested → insufficient; speculation slower than vanilla overall (the
    gate's min-speed-up checks) → do not enable; no disparity comparison decidable → insufficient;
    warnings → enable with conditions; else enable."""
    gate = snapshot.gate
    checks = gate.checks if gate is not None else []
    gate_status = gate.status if gate is not None else None
    reasons: list[str] = []
    violations = [name for name, status in engines if status == EquivalenceStatus.VIOLATION]
    # the `decision` check (--fail-on decision) restates the decision: it is not evidence for it
    failing = [c for c in checks if c.status is CheckStatus.FAIL and c.name != "decision"]
    decided = [c for c in comps if c.status in DECIDED]
    flagged = [c for c in comps if c.status == DisparityStatus.FLAG]
    tested = bool(engines) and not all(status == EquivalenceStatus.NOT_RUN for _, status in engines)
    key = decision_key(
        DecisionFacts(
            judged=gate_status is not None,
            failing=bool(failing),
            violation=bool(violations),
            tested=tested,
            slower_overall=bool(speed.below_one),
            compared=bool(comps),
            decided=bool(decided),
            gate_pass=gate_status == CheckStatus.PASS,
        )
    )
    if gate_status is None:
        reasons.append("No deployment gate has judged this snapshot.")
    elif failing or violations:
        reasons += [f"{name}: its output is not distributed as the target's." for name in violations]
        reasons += [
            f"Gate check {c.name} fails: {recorded(c.message, '')}"
            for c in failing
            if not any(str(c.name or "").endswith(f"[{v}]") for v in violations)
        ]
    elif not tested:
        reasons.append("Equivalence with the target was not tested.")
    elif speed.below_one:
        reasons.append(
            f"Speculation is slower than vanilla on the audit's machine ({speed.machine}): overall speed-up "
            f"{speed.overall} ({speed.overall_scope}); {len(speed.slower)} of {speed.n_groups} groups below 1×."
            + (
                f" Projected for the deployment described (c = {speed.projection.cost}): {speed.projection.range}."
                if speed.projection
                else ""
            )
        )
    # what else the reader must know, whatever the decision
    if engines and key != "insufficient" and not violations:
        no_proof = [name for name, status in engines if status == EquivalenceStatus.NO_VIOLATION_FOUND]
        if no_proof:
            shown = [
                f"no distortion of {name}'s PIT above {bound.upper:.3f}, shown at {bound.level * 100:.0f}%"
                for name in no_proof
                for bound in [_pit_bound(snapshot, name)]
                if finite(bound.upper) and bound.upper < 1 and finite(bound.level)
            ]
            reasons.append(
                f"Correctness: no test found a violation for {', '.join(no_proof)}, but equivalence within δ is not shown"
                + (f"; {'; '.join(shown)}." if shown else ".")
            )
    if engines and any(status != EquivalenceStatus.NOT_RUN for _, status in engines):
        from specaudit.report.view.sampling import sampling_view

        blind = sampling_view(snapshot).sentence
        if blind:  # a pass holds for the setting tested; say which real bug classes it cannot cover
            reasons.append(blind)
    if comps:
        undecided = len(comps) - len(decided)
        if flagged:
            reasons.append(
                f"Fairness: {len(flagged)} group comparison(s) outside the band: "
                + ", ".join(sorted({f"{c.dimension}={c.group}" for c in flagged}))
                + "."
            )
        if undecided:
            reasons.append(
                f"Fairness: {undecided} of {len(comps)} group comparisons cannot be decided with these prompts "
                "(INCONCLUSIVE or INSUFFICIENT)."
            )
    elif key != "insufficient" and gate_status is not None:
        reasons.append("Fairness: no group comparisons in this snapshot.")
    if speed.ran and not speed.below_one and speed.slower:
        reasons.append(f"Speed: {len(speed.slower)} of {speed.n_groups} groups run slower than vanilla.")
    if key == "conditions":
        families = Counter(str(check.name or "").split("[", 1)[0] for check in checks if check.status is CheckStatus.WARN)
        reasons.insert(0, "Conditions (the gate's warnings): " + ", ".join(f"{family} ({n})" for family, n in families.items()) + ".")
    title, css = DECISIONS[key]
    exit_code = gate.exit_code if gate is not None and finite(gate.exit_code) else int(gate_status == CheckStatus.FAIL)
    line = f"Gate: {gate_status.value} (exit {exit_code})" if gate_status else "Gate: not run"
    note = None
    if gate_status and key in BLOCKING and exit_code == 0:
        note = f"The gate exits 0 on {title}: `--fail-on {fail_on_for(key)}` (gate or audit) makes it exit 1 on this decision."
    return {"key": key, "title": title, "css": css, "reasons": reasons, "gate": line, "gate_note": note}


def _pit_bound(snapshot: Snapshot, engine: str) -> PitBound:
    """An engine's PIT bound (stats.equivalence.pit_bound: upper, level, ...), empty where it has none."""
    entry = snapshot.equivalence.engines.get(engine)
    return (entry.pit_bound if entry is not None else None) or PitBound()


# ============================================================================ what to do
def actions(
    snapshot: Snapshot,
    engines: list[tuple[str, EquivalenceStatus]],
    comps: list[GroupComparison],
    speed: SpeedSummary,
    equivalence_view: Mapping[str, Any],
) -> list[dict[str, str]]:
    """One item per problem (never one per dimension), MUST before SHOULD, each with a command."""
    run = snapshot.run
    command = run.command
    config = run.config or RunConfigBlock()
    run_dir = recorded(run.dir, "RUN_DIR")
    items: list[dict[str, str]] = []

    def add(level: str, text: str, anchor: str, cmd: str | None = None) -> None:
        items.append({"level": level, "text": text, "anchor": anchor, "command": cmd or ""})

    def costed(text: str, cost: str | None) -> str:
        return f"{text} {cost}" if cost else text

    if equivalence_view["ran"] and equivalence_view["status"] == "error":
        add(
            "fail",
            costed(
                "Fix the audit before reading it: plain decoding fails its own goodness-of-fit, so scoring (model, dtype, "
                "warping) does not match the decoder.",
                rerun_cost(snapshot),
            ),
            "equivalence",
            with_flags(command, {}),
        )
    for name, status in engines:
        if status == EquivalenceStatus.VIOLATION:
            add(
                "fail",
                f"Do not ship {name}: its output does not follow the target distribution. Check the acceptance rule, the "
                "residual distribution and that temperature/top-k/top-p reach both draft and target. The self-test runs "
                "on its own tiny models, not in this audit's cost model: about 15 min on a 2-core CPU (measured, docs/selftest.md).",
                "equivalence",
                "specaudit selftest --quick",
            )
    gate_checks = snapshot.gate.checks if snapshot.gate is not None else []
    for check in gate_checks:
        name = str(check.name or "")
        # the `decision` check restates the decision (the banner's): not a problem of its own
        if check.status is CheckStatus.FAIL and name != "decision" and not name.startswith(("equivalence[", "disparity[")):
            add("fail", f"Gate check {name} fails: {recorded(check.message, '')}", "gate")
    flagged = sorted({f"{c.dimension}={c.group}" for c in comps if c.status == DisparityStatus.FLAG})
    if flagged:
        add(
            "fail",
            f"{len(flagged)} group(s) get a ratio to their reference outside the band: {', '.join(flagged)}. Route them to "
            "vanilla decoding or train the draft on them; the fallback simulation shows the effect of routing.",
            "disparity",
        )
    if speed.slower:
        best_k = _common_best_k(snapshot)
        flag = _draft_length_flag(config, best_k) if best_k else None
        level = "fail" if speed.below_one else "warn"
        text = (
            f"Speculation is slower than vanilla for {len(speed.slower)} of {speed.n_groups} groups "
            f"({len(speed.slower_sig)} with the whole interval below 1×; range {speed.range}). "
            + ("Do not enable it with this draft on this hardware; " if level == "fail" else "Route those groups to vanilla; ")
            + (
                f"the cost model's best draft length is k = {best_k}, so re-audit with it, or use a cheaper or better-matched draft."
                if flag
                else "use a cheaper or better-matched draft."
            )
        )
        if flag:
            text = costed(
                text, rerun_cost(snapshot, speedup=best_k_speedup(snapshot, best_k), why=f", the speculative one at k = {best_k}")
            )
        add(level, text, "speed", with_flags(command, flag) if flag else None)
    undecided = [c for c in comps if c.status not in DECIDED]
    if undecided:
        planned = prompts_to_decide(undecided)
        need = planned[0] if planned else None
        minimum = ((snapshot.gate.thresholds if snapshot.gate is not None else None) or GateThresholdsBlock()).min_group_size
        per_group = max([n for n in (need, int(minimum) if finite(minimum) else None) if n] or [0]) or None
        groups = sorted({f"{c.dimension}={c.group}" for c in undecided})
        text = (
            f"{len(undecided)} of {len(comps)} group comparisons ({len(groups)} groups) cannot be decided: their intervals "
            "cross a band edge or the design cannot detect a ratio at the band's edges."
        )
        if need:
            text += (
                f" About {need} prompts per group would make a ratio of {comps[0].band[0]:g} detectable for half of them, "
                + (f"{planned[1]:,} for all" if planned[1] <= 100 * need else "far more for the hardest of them")
                + " (each comparison's detectable ratio scaled by 1/√prompts)"
                + (f"; the gate asks for {int(minimum)}" if finite(minimum) and minimum > need else "")
                + "."
            )
        cost = predicted_rerun(snapshot, per_group=per_group, why="; the engines decode one prompt per group") if per_group else None
        if cost is not None and cost.over_budget:
            text += f" {cost.sentence()} No rerun within {BUDGET_HOURS:g} h decides them, so none is recommended; the decided comparisons stand."
            per_group = None
        elif cost is not None:
            text += f" {cost.sentence()}"
        add("warn", text, "disparity", with_flags(command, {"--per-group": per_group}) if per_group else None)
    if equivalence_view["ran"]:
        # an engine with a violation has its MUST item above: showing its equivalence is moot; a
        # greedy audit has no TV bound nor two-sample tests to show it with
        audited = [
            e
            for e in equivalence_view["engines"]
            if not e["is_control"] and e["status"] != EquivalenceStatus.VIOLATION and e["mode"] == "sampling"
        ]
        not_shown = [e for e in audited if e["tv"].verdict == "not shown"]
        not_run = [e for e in audited if any(r["not_run"] for r in e["two_sample"].rows)]
        if not_shown or not_run:
            samples = recorded(config.samples, 1)
            plan = not_shown[0]["tv"].samples_to_show if not_shown else None
            parts = []
            if not_shown:
                parts.append(f"equivalence within δ = {not_shown[0]['tv'].delta} is not shown (TV upper bound {not_shown[0]['tv'].upper})")
            if not_run:
                parts.append("the two-sample tests cannot reject with one sample per prompt")
            text = "Correctness is not proven: " + " and ".join(parts) + ". "
            if plan is not None and plan.model_fields_set and plan.samples is None:
                add(
                    "warn",
                    text + f"No number of samples up to 2**20 per prompt brings a correct engine's bound to δ = "
                    f"{plan.delta}: the plug-in distance of the target's own samples stays above it. Audit at a larger δ.",
                    "equivalence",
                )
            else:
                wanted, how = _samples_wanted(plan, not_shown[0] if not_shown else None)
                wanted = max(wanted or 0, 2 if not_run else 0, (samples or 1) + 1)
                cost = predicted_rerun(snapshot, samples=wanted)
                fewer = _fewer_prompts(snapshot, plan, wanted)
                if cost is not None and cost.over_budget:
                    text += f"Showing it needs more samples per prompt: about {wanted:,} {how}. {cost.sentence()} "
                    cheap = fewer if fewer and fewer[1] is not None and not fewer[1].over_budget else None
                    if cheap:
                        text += f"{cheap[0]} "
                    else:
                        text += (f"{fewer[0]} " if fewer else "") + f"No rerun within {BUDGET_HOURS:g} h shows it, so none is recommended. "
                    text += _what_was_shown(audited[0])
                    add("warn", text, "equivalence", with_flags(command, cheap[2]) if cheap else None)
                else:
                    text += f"Sample more outputs per prompt: about {wanted:,} {how}."
                    for part in (cost.sentence() if cost else None, fewer[0] if fewer else None):
                        text += f" {part}" if part else ""
                    add("warn", text, "equivalence", with_flags(command, {"--samples": wanted}))
        if equivalence_view["warning"]:
            cost = rerun_cost(snapshot, why=", another seed")
            add(
                "warn",
                f"Rerun with another seed: {str(equivalence_view['warning']).split(': a correct')[0]}." + (f" {cost}" if cost else ""),
                "equivalence",
                with_flags(command, {"--seed": (config.seed or 0) + 1}),
            )
    else:
        add(
            "warn",
            "Equivalence was not tested: run the analysis with equivalence on before relying on this report (no decoding: it "
            "scores the run's records, minutes on a CPU; not in the cost model, which times decoding).",
            "equivalence",
            f"specaudit analyze {run_dir}",
        )
    if not gate_checks:
        add(
            "warn",
            "No deployment gate has judged this snapshot (seconds: the gate reads the snapshot only).",
            "gate",
            f"specaudit gate {run_dir} --write",
        )
    if not items:
        add("pass", "Nothing to fix: no violation found, and every group comparison is within the band.", "summary")
    order = {"fail": 0, "warn": 1, "pass": 2}
    return sorted(items, key=lambda a: order[a["level"]])  # stable: within a level, the order above is the impact order


def _draft_length_flag(config: RunConfigBlock, best_k: int) -> dict[str, Any] | None:
    """The option that sets the run's draft length to best_k: `--k` where a chain engine ran, the
    medium's k in `--level-k` for a staged engine alone; None for a tree alone (its depth is its
    shape) or where the run had best_k already."""
    engines = set(speculative_engines(config.as_written()))
    if engines - set(BEYOND_CHAINS):
        return {"--k": best_k} if best_k != config.k else None
    if len(engines) == 1 and step_shape(staged := next(iter(engines))) == "levels":
        # the engine's own settings section, open to the engine (absent: its default)
        small, medium = str(engine_settings(config.as_written(), staged).get("level_k", DEFAULT_LEVEL_K)).split(",")
        return {"--level-k": f"{small},{best_k}"} if int(medium) != best_k else None
    return None


def _common_best_k(snapshot: Snapshot) -> int | None:
    counts = Counter(
        row.best_k for part in snapshot.recommendations.values() for row in part.by_group.values() if isinstance(row.best_k, int)
    )
    return max(counts, key=lambda k: (counts[k], -k)) if counts else None


def _samples_wanted(plan: SamplePlan | None, engine: Mapping[str, Any] | None) -> tuple[int | None, str]:
    """Samples per prompt and what they buy. From the target's own first-token distributions
    (tv.samples_to_show, stats.plugin_tv) where the analysis had them: the samples at which a
    correct engine's TV bound is expected to reach δ. Else (server-scored runs) the samples at
    which the first-token test detects a TV of δ: this run's detectable TV scaled by 1/√samples
    (the power planner's law for that test), which detects δ but does not show equivalence."""
    if plan is not None and plan.samples is not None:
        return plan.samples, (
            f"on each of these {plan.n_prompts} prompts make a correct engine's TV bound reach δ = {plan.delta:g} with "
            f"{0.8 if plan.power is None else plan.power:.0%} power (its expected bound there: {plan.expected_upper:.3f}, the plug-in "
            f"distance of the target's own samples {plan.bias:.3f} plus the confidence margin {plan.margin:.3f}; from the target's scored "
            "first-token distributions)"
        )
    detects = "would make a first-token distance of δ detectable"
    if engine is None:
        return None, detects
    # the power an analysis computed varies with its tests: first-token TV may be absent
    mde = next((p.raw for p in engine["power"] if p.label == "first-token TV"), None)
    delta, samples = engine["tv"].delta_value, engine["samples"]
    if not (finite(mde) and finite(delta) and delta > 0 and finite(samples)):
        return None, detects
    return max(2, math.ceil(samples * (mde / delta) ** 2)), detects


def _fewer_prompts(snapshot: Snapshot, plan: SamplePlan | None, wanted: int) -> tuple[str, Any, dict[str, int]] | None:
    """The cheapest budget in decoded samples that still reaches δ, when it has fewer prompts than
    the audit: (its sentence, its RerunCost or None, its flags); its claim covers those prompts only,
    which the sentence says."""
    options = [(int(p) * int(n), int(p), int(n)) for p, n in (plan.fewer_prompts if plan is not None else {}).items() if finite(n)]
    if not options or plan.samples is None:
        return None
    total, prompts, samples = min(options)
    if total >= int(plan.n_prompts) * wanted:
        return None
    cost = predicted_rerun(snapshot, samples=samples, prompts=prompts)
    flags = "" if cost is not None and cost.over_budget else f" (`--engine-prompts {prompts} --samples {samples}`)"
    text = (
        f"The cheapest budget that reaches δ has fewer prompts: {samples:,} samples on each of {prompts} of them"
        f"{flags}, for a claim about those {prompts} prompts only; each prompt "
        "needs about as many samples as before, since the plug-in distance falls with samples per prompt, not with prompts."
    )
    return (f"{text} {cost.sentence()}" if cost else text), cost, {"--engine-prompts": prompts, "--samples": samples}


def _what_was_shown(engine: Mapping[str, Any]) -> str:
    """What the audit did show about correctness at its own budget: the PIT bound and the power."""
    parts = []
    if engine["pit_bound"].ran:
        parts.append(engine["pit_bound"].sentence)
    if engine["status"] == EquivalenceStatus.NO_VIOLATION_FOUND:
        parts.append(f"no test found a violation in {engine['n_tokens']} tokens")
    pit = next((p for p in engine["power"] if p.label.startswith("PIT")), None)
    if pit:
        parts.append(f"a PIT distortion of {pit.value} or more would have been found with 80% power")
    return ("What this audit did show: " + "; ".join(parts) + ".") if parts else ""


__all__ = ["DECISIONS", "actions", "decide"]
