"""The gate's equivalence checks: each audited engine, the vanilla control, impossible tokens and
the TV bound."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from specaudit._validation import finite
from specaudit.contracts import EquivalenceStatus
from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.contracts.snapshot import TokenSite, Violation
from specaudit.gate.results import GateCheck, fmt, not_run
from specaudit.gate.thresholds import FAIL, PASS, WARN, GateThresholds

if TYPE_CHECKING:
    from specaudit.contracts import CheckStatus
    from specaudit.contracts.snapshot import (
        EngineEquivalence,
        EquivalenceSection,
        GoodnessOfFit,
        HolmRow,
        ImpossibleTokens,
        TvBound,
        TwoSample,
    )


def _rejections(table: list[HolmRow], alpha: float) -> list[HolmRow]:
    """Rows of a Holm gate table rejected at ``alpha``."""
    return [r for r in table if finite(r.holm_pvalue) and r.holm_pvalue < alpha]


def _tested(table: list[HolmRow]) -> bool:
    return any(finite(r.holm_pvalue) for r in table)


def _table(result: GoodnessOfFit | TwoSample | None) -> list[HolmRow]:
    return result.gate if result is not None else []


def _impossible(entry: EngineEquivalence | None) -> ImpossibleTokens | None:
    return entry.goodness_of_fit.impossible_tokens if entry is not None and entry.goodness_of_fit is not None else None


def equivalence_checks(section: EquivalenceSection, t: GateThresholds) -> list[GateCheck]:
    engines = section.engines
    if section.status == EquivalenceStatus.NOT_RUN or not engines:
        why = section.message or "the snapshot has no equivalence results (run `specaudit analyze` without --no-equivalence)"
        return [
            not_run("equivalence", "Equivalence not rejected", why),
            not_run("control", "Vanilla control passes", why),
            not_run("impossible-tokens", "No impossible tokens", why),
            not_run("tv-bound", "TV distance within the margin", why),
        ]
    alpha = t.alpha if t.alpha is not None else (section.alpha if finite(section.alpha) else 0.05)
    greedy = section.mode == "greedy"
    control = section.control or CONTROL_ENGINE
    audited = [e for e in engines if e != control]
    checks = [_engine_equivalence(e, engines[e], alpha, greedy) for e in audited]
    if not audited:
        checks.append(not_run("equivalence", "Equivalence not rejected", "no speculative engine in the run"))
    checks.append(_control_check(control, engines.get(control), alpha, greedy, section))
    if not greedy:
        checks.append(_impossible_check(engines))
        for engine in audited:
            checks.append(_tv_check(engine, engines[engine].tv_bound, t.tv_delta, t.tv_severity))
    return checks


def _engine_equivalence(engine: str, entry: EngineEquivalence, alpha: float, greedy: bool) -> GateCheck:
    name, title = f"equivalence[{engine}]", f"Equivalence not rejected: {engine}"
    violations = entry.verify_violations
    if violations is not None:  # the sampler's own output broke the verify contract: proven, no test needed
        first = violations.first or Violation()
        return GateCheck(
            name,
            title,
            FAIL,
            f"{engine}'s verify function broke its contract in {violations.count} call(s); "
            f"first: call {first.call} of record {first.record}, it {first.problem}",
            {"verify_violations": violations.model_dump(exclude_unset=True)},
        )
    served = _server_violations(engine, entry)
    if served is not None:
        return served
    if greedy:
        result = entry.greedy
        if result is None:
            return not_run(name, title, f"no greedy comparison for {engine}")
        divergences = result.divergences
        bad = [d for d in divergences if d.classification != "near-tie"]
        pairs, matches = result.n_pairs, result.n_matches
        details = {"n_pairs": pairs, "n_matches": matches, "n_divergences": len(divergences), "n_unexplained": len(bad)}
        if bad:
            kinds = sorted({str(d.classification) for d in bad})
            first = bad[0]
            return GateCheck(
                name,
                title,
                FAIL,
                f"{len(bad)} greedy divergence(s) not explained by a near-tie ({', '.join(kinds)}); first: prompt "
                f"{first.prompt_id} at position {first.position}",
                details,
            )
        extra = f"; {len(divergences)} divergence(s), all floating-point near-ties" if divergences else ""
        return GateCheck(name, title, PASS, f"greedy output matches vanilla on {matches} of {pairs} prompts{extra}", details)
    gof, two = entry.goodness_of_fit, entry.two_sample
    rejected = [("goodness-of-fit", r) for r in _rejections(_table(gof), alpha)]
    rejected += [("two-sample", r) for r in _rejections(_table(two), alpha)]
    n_tokens = gof.n_tokens if gof is not None else None
    details = {
        "alpha": alpha,
        "n_tokens": n_tokens,
        "rejected": [{"battery": b, "test": r.test, "holm_pvalue": r.holm_pvalue} for b, r in rejected],
    }
    if rejected:
        listed = ", ".join(f"{r.test} (Holm p = {fmt(r.holm_pvalue)})" for _, r in rejected)
        return GateCheck(
            name, title, FAIL, f"{engine} does not follow the target distribution: rejected by {listed} at α = {alpha:g}", details
        )
    if not _tested(_table(gof)) and not _tested(_table(two)):
        return GateCheck(name, title, WARN, f"not run: no test of {engine} could run (no scored tokens)", {**details, "not_run": True})
    smallest = min((r.holm_pvalue for r in (*_table(gof), *_table(two)) if finite(r.holm_pvalue)), default=math.nan)
    message = (
        f"no test rejects at α = {alpha:g} after Holm correction (smallest adjusted p = {fmt(smallest)}, "
        f"{n_tokens if n_tokens is not None else 'n/a'} tokens)"
    )
    if two is not None and two.not_run_reason:  # a test that could not reject is not counted as passed
        details["two_sample_not_run"] = two.not_run_reason
        message += f"; two-sample tests not run: {two.not_run_reason}"
    if entry.status:
        details["status"] = entry.status
        message += f"; {entry.status}"
    return GateCheck(name, title, PASS, message, details)


def _server_violations(engine: str, entry: EngineEquivalence | None, name: str | None = None, title: str | None = None) -> GateCheck | None:
    """FAIL for an engine whose server returned impossible output (analysis.judge_server_violations)."""
    violations = entry.server_violations if entry is not None else None
    if violations is None:
        return None
    first = violations.first or Violation()
    return GateCheck(
        name or f"equivalence[{engine}]",
        title or f"Equivalence not rejected: {engine}",
        FAIL,
        f"the {engine} server returned impossible output at {violations.count} position(s); first: record "
        f"{first.record} position {first.position}: {first.problem}",
        {"server_violations": violations.model_dump(exclude_unset=True)},
    )


def _control_check(control: str, entry: EngineEquivalence | None, alpha: float, greedy: bool, section: EquivalenceSection) -> GateCheck:
    name, title = f"control[{control}]", "Vanilla control passes"
    served = _server_violations(control, entry, name, title)
    if served is not None:  # the control's own server is broken: proven, whatever the tests say
        return served
    if greedy:
        return GateCheck(
            name,
            title,
            PASS,
            "greedy mode: outputs are compared with vanilla directly; the control has no test of its own",
            {"mode": "greedy"},
        )
    if entry is None:
        return not_run(name, title, f"the run has no {control} engine, so the battery's calibration is unchecked")
    table = _table(entry.goodness_of_fit)
    control_alpha = section.control_alpha if finite(section.control_alpha) else alpha
    rejected = _rejections(table, control_alpha)
    chance = [r for r in _rejections(table, alpha) if r not in rejected]
    impossible = _impossible(entry)
    offenders = (impossible.statistic if impossible is not None else None) or 0
    details = {
        "alpha": alpha,
        "control_alpha": control_alpha,
        "rejected": [r.test for r in rejected],
        "rejected_at_alpha": [r.test for r in chance],
        "impossible_tokens": offenders,
    }
    failed = section.control_failed
    if chance and not (rejected or offenders or failed):
        listed = ", ".join(f"{r.test} (Holm p = {fmt(r.holm_pvalue)})" for r in chance)
        return GateCheck(
            name,
            title,
            WARN,
            f"plain decoding is rejected at α = {alpha:g} by {listed} but not at the control level {control_alpha:g}: "
            "chance in 1 audit of 20, or a small scoring mismatch; rerun with another --seed",
            details,
        )
    if rejected or offenders or failed:
        why = ", ".join(f"{r.test} (Holm p = {fmt(r.holm_pvalue)})" for r in rejected) or (
            f"{offenders} impossible token(s)" if offenders else "the analysis marked it as failed"
        )
        return GateCheck(
            name, title, FAIL, f"plain decoding fails its own test ({why}): scoring and decoding disagree, so the audit is invalid", details
        )
    if not _tested(table):
        return GateCheck(name, title, WARN, "not run: the control had no scored tokens", {**details, "not_run": True})
    return GateCheck(
        name, title, PASS, f"plain decoding passes the battery at α = {alpha:g} (the tests are calibrated on this run)", details
    )


def _impossible_check(engines: dict[str, EngineEquivalence]) -> GateCheck:
    name, title = "impossible-tokens", "No impossible tokens"
    found, tested = {}, 0
    first = None
    for engine, entry in engines.items():
        block = _impossible(entry)
        served = entry.server_violations
        if served is not None and not (
            block is not None and block.statistic
        ):  # ids outside the vocabulary, unscored: impossible all the same
            found[engine] = int(served.count or 0)
            where = served.first or Violation()
            first = first or (engine, TokenSite(key=where.record, position=where.position))
        if block is None:
            continue
        tested += int(block.n or 0)
        count = int(block.statistic or 0)
        if count:
            found[engine] = count
            if first is None and block.offenders:
                first = (engine, block.offenders[0])
    if not tested and not found:
        return not_run(name, title, "no scored tokens")
    if found:
        where = ", ".join(f"{n} from {e}" for e, n in found.items())
        example = f"; first: {first[1].key} position {first[1].position}" if first else ""
        return GateCheck(
            name,
            title,
            FAIL,
            f"{sum(found.values())} emitted token(s) have probability 0 under the warped target ({where}){example}: proof of a bug",
            {"by_engine": found},
        )
    return GateCheck(name, title, PASS, f"every one of {tested} scored tokens is possible under the warped target", {"n_tokens": tested})


def _tv_check(engine: str, bound: TvBound | None, delta: float | None, severity: CheckStatus) -> GateCheck:
    name, title = f"tv-bound[{engine}]", f"TV distance within the margin: {engine}"
    if bound is None or not finite(bound.upper):
        return not_run(name, title, f"no TV bound for {engine}")
    upper = bound.upper
    delta = delta if delta is not None else (bound.delta if finite(bound.delta) else 0.05)
    details = {"upper": upper, "estimate": bound.estimate, "delta": delta, "n_samples": bound.n_samples}
    if upper <= delta:
        return GateCheck(name, title, PASS, f"TV upper bound {fmt(upper)} ≤ δ = {delta:g}: equivalent within the margin", details)
    why = (
        "and equality is rejected at this position"
        if bound.verdict == "different"
        else f"not shown with {bound.n_samples if bound.n_samples is not None else 'n/a'} samples; more samples per prompt tighten the bound"
    )
    return GateCheck(name, title, severity, f"TV upper bound {fmt(upper)} > δ = {delta:g}: equivalence within the margin {why}", details)
