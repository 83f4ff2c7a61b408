"""The gate's equivalence checks: each audited engine, the vanilla control, impossible tokens and
the TV bound."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specaudit.contracts import CheckStatus, EquivalenceStatus
from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.contracts.snapshot import control_failed
from specaudit.gate.results import GateCheck, fmt, mapping, not_run
from specaudit.gate.thresholds import FAIL, PASS, WARN, GateThresholds, finite


def _rejections(table: Any, alpha: float) -> list[dict[str, Any]]:
    """Rows of a Holm gate table rejected at ``alpha``."""
    rows = table if isinstance(table, list) else []
    return [r for r in rows if isinstance(r, Mapping) and finite(r.get("holm_pvalue")) and r["holm_pvalue"] < alpha]


def _tested(table: Any) -> bool:
    return any(isinstance(r, Mapping) and finite(r.get("holm_pvalue")) for r in (table if isinstance(table, list) else []))


def _impossible(entry: Mapping[str, Any]) -> dict[str, Any]:
    return mapping(mapping(entry.get("goodness_of_fit")).get("impossible_tokens"))


def equivalence_checks(section: Mapping[str, Any], t: GateThresholds) -> list[GateCheck]:
    status = section.get("status")
    engines = mapping(section.get("engines"))
    if not section or status in (None, EquivalenceStatus.NOT_RUN) or not engines:
        why = section.get("message") or "the snapshot has no equivalence results (run `specaudit analyze` without --no-equivalence)"
        return [
            not_run("equivalence", "Equivalence not rejected", why),
            not_run("control", "Vanilla control passes", why),
            not_run("impossible-tokens", "No impossible tokens", why),
            not_run("tv-bound", "TV distance within the margin", why),
        ]
    alpha = t.alpha if t.alpha is not None else (section.get("alpha") if finite(section.get("alpha")) else 0.05)
    greedy = section.get("mode") == "greedy"
    control = section.get("control") or CONTROL_ENGINE
    audited = [e for e in engines if e != control]
    checks = [_engine_equivalence(e, mapping(engines[e]), alpha, greedy) for e in audited]
    if not audited:
        checks.append(not_run("equivalence", "Equivalence not rejected", "no speculative engine in the run"))
    checks.append(_control_check(control, engines.get(control), alpha, greedy, section))
    if not greedy:
        checks.append(_impossible_check(engines))
        delta = t.tv_delta
        for engine in audited:
            checks.append(_tv_check(engine, mapping(mapping(engines[engine]).get("tv_bound")), delta, t.tv_severity))
    return checks


def _engine_equivalence(engine: str, entry: Mapping[str, Any], alpha: float, greedy: bool) -> GateCheck:
    name, title = f"equivalence[{engine}]", f"Equivalence not rejected: {engine}"
    violations = mapping(entry.get("verify_violations"))
    if violations:  # the sampler's own output broke the verify contract: proven, no test needed
        first = mapping(violations.get("first"))
        return GateCheck(
            name,
            title,
            FAIL,
            f"{engine}'s verify function broke its contract in {violations.get('count')} call(s); "
            f"first: call {first.get('call')} of record {first.get('record')}, it {first.get('problem')}",
            {"verify_violations": dict(violations)},
        )
    served = _server_violations(engine, entry)
    if served is not None:
        return served
    if greedy:
        result = mapping(entry.get("greedy"))
        if not result:
            return not_run(name, title, f"no greedy comparison for {engine}")
        divergences = [d for d in result.get("divergences") or [] if isinstance(d, Mapping)]
        bad = [d for d in divergences if d.get("classification") != "near-tie"]
        pairs, matches = result.get("n_pairs"), result.get("n_matches")
        details = {"n_pairs": pairs, "n_matches": matches, "n_divergences": len(divergences), "n_unexplained": len(bad)}
        if bad:
            kinds = sorted({str(d.get("classification")) for d in bad})
            first = bad[0]
            return GateCheck(
                name,
                title,
                FAIL,
                f"{len(bad)} greedy divergence(s) not explained by a near-tie ({', '.join(kinds)}); first: prompt "
                f"{first.get('prompt_id')} at position {first.get('position')}",
                details,
            )
        extra = f"; {len(divergences)} divergence(s), all floating-point near-ties" if divergences else ""
        return GateCheck(name, title, PASS, f"greedy output matches vanilla on {matches} of {pairs} prompts{extra}", details)
    gof = mapping(entry.get("goodness_of_fit"))
    two = mapping(entry.get("two_sample"))
    rejected = [("goodness-of-fit", r) for r in _rejections(gof.get("gate"), alpha)]
    rejected += [("two-sample", r) for r in _rejections(two.get("gate"), alpha)]
    details = {
        "alpha": alpha,
        "n_tokens": gof.get("n_tokens"),
        "rejected": [{"battery": b, "test": r.get("test"), "holm_pvalue": r.get("holm_pvalue")} for b, r in rejected],
    }
    if rejected:
        listed = ", ".join(f"{r.get('test')} (Holm p = {fmt(r.get('holm_pvalue'))})" for _, r in rejected)
        return GateCheck(
            name, title, FAIL, f"{engine} does not follow the target distribution: rejected by {listed} at α = {alpha:g}", details
        )
    if not _tested(gof.get("gate")) and not _tested(two.get("gate")):
        return GateCheck(name, title, WARN, f"not run: no test of {engine} could run (no scored tokens)", {**details, "not_run": True})
    smallest = min(
        (r["holm_pvalue"] for b in (gof, two) for r in (b.get("gate") or []) if isinstance(r, Mapping) and finite(r.get("holm_pvalue"))),
        default=math.nan,
    )
    message = (
        f"no test rejects at α = {alpha:g} after Holm correction (smallest adjusted p = {fmt(smallest)}, "
        f"{gof.get('n_tokens', 'n/a')} tokens)"
    )
    if two.get("not_run_reason"):  # a test that could not reject is not counted as passed
        details["two_sample_not_run"] = two["not_run_reason"]
        message += f"; two-sample tests not run: {two['not_run_reason']}"
    if entry.get("status"):
        details["status"] = entry["status"]
        message += f"; {entry['status']}"
    return GateCheck(name, title, PASS, message, details)


def _server_violations(engine: str, entry: Any, name: str | None = None, title: str | None = None) -> GateCheck | None:
    """FAIL for an engine whose server returned impossible output (analysis.judge_server_violations)."""
    violations = mapping(mapping(entry).get("server_violations"))
    if not violations:
        return None
    first = mapping(violations.get("first"))
    return GateCheck(
        name or f"equivalence[{engine}]",
        title or f"Equivalence not rejected: {engine}",
        FAIL,
        f"the {engine} server returned impossible output at {violations.get('count')} position(s); first: record "
        f"{first.get('record')} position {first.get('position')}: {first.get('problem')}",
        {"server_violations": dict(violations)},
    )


def _control_check(control: str, entry: Any, alpha: float, greedy: bool, section: Mapping[str, Any]) -> GateCheck:
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
    if not isinstance(entry, Mapping):
        return not_run(name, title, f"the run has no {control} engine, so the battery's calibration is unchecked")
    gof = mapping(entry.get("goodness_of_fit"))
    control_alpha = section.get("control_alpha") if finite(section.get("control_alpha")) else alpha
    rejected = _rejections(gof.get("gate"), control_alpha)
    chance = [r for r in _rejections(gof.get("gate"), alpha) if r not in rejected]
    offenders = _impossible(entry).get("statistic") or 0
    details = {
        "alpha": alpha,
        "control_alpha": control_alpha,
        "rejected": [r.get("test") for r in rejected],
        "rejected_at_alpha": [r.get("test") for r in chance],
        "impossible_tokens": offenders,
    }
    failed = control_failed(section)
    if chance and not (rejected or offenders or failed):
        listed = ", ".join(f"{r.get('test')} (Holm p = {fmt(r.get('holm_pvalue'))})" for r in chance)
        return GateCheck(
            name,
            title,
            WARN,
            f"plain decoding is rejected at α = {alpha:g} by {listed} but not at the control level {control_alpha:g}: "
            "chance in 1 audit of 20, or a small scoring mismatch; rerun with another --seed",
            details,
        )
    if rejected or offenders or failed:
        why = ", ".join(f"{r.get('test')} (Holm p = {fmt(r.get('holm_pvalue'))})" for r in rejected) or (
            f"{offenders} impossible token(s)" if offenders else "the analysis marked it as failed"
        )
        return GateCheck(
            name, title, FAIL, f"plain decoding fails its own test ({why}): scoring and decoding disagree, so the audit is invalid", details
        )
    if not _tested(gof.get("gate")):
        return GateCheck(name, title, WARN, "not run: the control had no scored tokens", {**details, "not_run": True})
    return GateCheck(
        name, title, PASS, f"plain decoding passes the battery at α = {alpha:g} (the tests are calibrated on this run)", details
    )


def _impossible_check(engines: Mapping[str, Any]) -> GateCheck:
    name, title = "impossible-tokens", "No impossible tokens"
    found, tested = {}, 0
    first = None
    for engine, entry in engines.items():
        block = _impossible(mapping(entry))
        served = mapping(mapping(entry).get("server_violations"))
        if served and not block.get("statistic"):  # ids outside the vocabulary, unscored: impossible all the same
            found[engine] = int(served.get("count") or 0)
            where = mapping(served.get("first"))
            first = first or (engine, {"key": where.get("record"), "position": where.get("position")})
        if not block:
            continue
        tested += int(block.get("n") or 0)
        count = int(block.get("statistic") or 0)
        if count:
            found[engine] = count
            offenders = block.get("offenders") or []
            if first is None and offenders and isinstance(offenders[0], Mapping):
                first = (engine, offenders[0])
    if not tested and not found:
        return not_run(name, title, "no scored tokens")
    if found:
        where = ", ".join(f"{n} from {e}" for e, n in found.items())
        example = f"; first: {first[1].get('key')} position {first[1].get('position')}" if first else ""
        return GateCheck(
            name,
            title,
            FAIL,
            f"{sum(found.values())} emitted token(s) have probability 0 under the warped target ({where}){example}: proof of a bug",
            {"by_engine": found},
        )
    return GateCheck(name, title, PASS, f"every one of {tested} scored tokens is possible under the warped target", {"n_tokens": tested})


def _tv_check(engine: str, bound: Mapping[str, Any], delta: float | None, severity: CheckStatus) -> GateCheck:
    name, title = f"tv-bound[{engine}]", f"TV distance within the margin: {engine}"
    upper = bound.get("upper")
    if not finite(upper):
        return not_run(name, title, f"no TV bound for {engine}")
    delta = delta if delta is not None else (bound.get("delta") if finite(bound.get("delta")) else 0.05)
    details = {"upper": upper, "estimate": bound.get("estimate"), "delta": delta, "n_samples": bound.get("n_samples")}
    if upper <= delta:
        return GateCheck(name, title, PASS, f"TV upper bound {fmt(upper)} ≤ δ = {delta:g}: equivalent within the margin", details)
    why = (
        "and equality is rejected at this position"
        if bound.get("verdict") == "different"
        else f"not shown with {bound.get('n_samples', 'n/a')} samples; more samples per prompt tighten the bound"
    )
    return GateCheck(name, title, severity, f"TV upper bound {fmt(upper)} > δ = {delta:g}: equivalence within the margin {why}", details)
