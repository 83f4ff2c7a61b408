"""The deployment gate: thresholds → PASS / WARN / FAIL checks on a snapshot → exit code.

The gate reads only snapshot.json (docs/ARCHITECTURE.md, Contracts) and re-judges it: Holm-adjusted
p-values, TV upper bounds and ratios to the reference do not depend on the thresholds, so a
stricter or looser gate can be applied to an existing snapshot without re-running anything.

Each check is PASS, WARN or FAIL (Evidently's vocabulary, with non-critical checks warning);
the gate fails when any check fails. A check whose input is missing ("not run") warns: a gate
must not pass silently on evidence it never saw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specaudit.config import RUN_OPTIONS, GateThresholds, load_config_file
from specaudit.contracts import DisparityStatus
from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.errors import InputError

PASS, WARN, FAIL = "pass", "warn", "fail"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}
SEVERITIES = (WARN, FAIL)


def load_thresholds(source: str | Path | Mapping[str, Any] | None = None) -> GateThresholds:
    """Thresholds from a YAML config's ``gate:`` section (a path), or from a mapping (either the
    whole config with a ``gate`` key or the gate section itself). ``None`` gives the defaults."""
    if source is None:
        return GateThresholds()
    where = "gate thresholds"
    if isinstance(source, (str, Path)):
        where = f"config file {source}"
        options = load_config_file(source)
        _refuse_unknown_sections(options, where)
        section = options.get("gate", {})
    elif isinstance(source, Mapping):
        section = source["gate"] if "gate" in source else source
    else:
        raise InputError(f"gate thresholds must come from a YAML file or a mapping, got {type(source).__name__}")
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise InputError(f"{where}: the gate section must be a mapping of threshold: value, got {type(section).__name__}")
    try:
        return GateThresholds.parse(dict(section))
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def _refuse_unknown_sections(options: Mapping[str, Any], where: str) -> None:
    """A gate config is an audit config (run options, `analysis:`, `gate:`): a misspelt `gate:`
    would otherwise leave the default thresholds in force without a word."""
    known = set(RUN_OPTIONS) | {"out", "analysis", "gate"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(
            f"{where}: unknown top-level key(s) {', '.join(unknown)}; the thresholds go under `gate:` "
            "(beside the audit's run options and `analysis:`)"
        )


# ============================================================================ results
@dataclass(frozen=True)
class GateCheck:
    """One check: ``name`` is stable across runs (a JUnit test case), ``message`` says why."""

    name: str
    title: str
    status: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "status": self.status, "message": self.message, "details": self.details}


@dataclass(frozen=True)
class GateResult:
    checks: tuple[GateCheck, ...]
    thresholds: GateThresholds

    @property
    def status(self) -> str:
        return max((c.status for c in self.checks), key=_RANK.__getitem__, default=PASS)

    @property
    def exit_code(self) -> int:
        """0: pass (warnings allowed), 1: at least one check failed."""
        return 1 if self.status == FAIL else 0

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in (PASS, WARN, FAIL)}

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``gate`` section."""
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
        }

    def format(self) -> str:
        """Plain text for a terminal: one line per check, then the verdict."""
        width = max((len(c.name) for c in self.checks), default=0)
        lines = [f"{c.status.upper():4}  {c.name:<{width}}  {c.message}" for c in self.checks]
        c = self.counts
        lines.append(f"gate: {self.status.upper()} ({c[PASS]} pass, {c[WARN]} warn, {c[FAIL]} fail)")
        return "\n".join(lines)


# ============================================================================ evaluation
def evaluate_gate(snapshot: Mapping[str, Any], thresholds: GateThresholds | None = None) -> GateResult:
    """Judge a snapshot (the dict of snapshot.json) against ``thresholds`` (defaults if None)."""
    if not isinstance(snapshot, Mapping):
        raise InputError("the gate needs a snapshot (the mapping read from snapshot.json)")
    thresholds = thresholds or GateThresholds()
    checks: list[GateCheck] = []
    checks += _equivalence_checks(_mapping(snapshot.get("equivalence")), thresholds)
    checks += _disparity_checks(snapshot, thresholds)
    return GateResult(tuple(checks), thresholds)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if _finite(value) else "n/a"


def _fixed(value: Any) -> str:
    """Ratios and speed-ups: two decimals read better than significant digits (0.31, 1.00)."""
    return f"{value:.2f}" if _finite(value) else "n/a"


def _not_run(name: str, title: str, what: str) -> GateCheck:
    return GateCheck(name, title, WARN, f"not run: {what}", {"not_run": True})


def _rejections(table: Any, alpha: float) -> list[dict[str, Any]]:
    """Rows of a Holm gate table rejected at ``alpha``."""
    rows = table if isinstance(table, list) else []
    return [r for r in rows if isinstance(r, Mapping) and _finite(r.get("holm_pvalue")) and r["holm_pvalue"] < alpha]


def _tested(table: Any) -> bool:
    return any(isinstance(r, Mapping) and _finite(r.get("holm_pvalue")) for r in (table if isinstance(table, list) else []))


def _impossible(entry: Mapping[str, Any]) -> dict[str, Any]:
    return _mapping(_mapping(entry.get("goodness_of_fit")).get("impossible_tokens"))


def _equivalence_checks(section: Mapping[str, Any], t: GateThresholds) -> list[GateCheck]:
    status = section.get("status")
    engines = _mapping(section.get("engines"))
    if not section or status in (None, "not run") or not engines:
        why = section.get("message") or "the snapshot has no equivalence results (run `specaudit analyze` without --no-equivalence)"
        return [
            _not_run("equivalence", "Equivalence not rejected", why),
            _not_run("control", "Vanilla control passes", why),
            _not_run("impossible-tokens", "No impossible tokens", why),
            _not_run("tv-bound", "TV distance within the margin", why),
        ]
    alpha = t.alpha if t.alpha is not None else (section.get("alpha") if _finite(section.get("alpha")) else 0.05)
    greedy = section.get("mode") == "greedy"
    control = section.get("control") or CONTROL_ENGINE
    audited = [e for e in engines if e != control]
    checks = [_engine_equivalence(e, _mapping(engines[e]), alpha, greedy) for e in audited]
    if not audited:
        checks.append(_not_run("equivalence", "Equivalence not rejected", "no speculative engine in the run"))
    checks.append(_control_check(control, engines.get(control), alpha, greedy, section))
    if not greedy:
        checks.append(_impossible_check(engines))
        delta = t.tv_delta
        for engine in audited:
            checks.append(_tv_check(engine, _mapping(_mapping(engines[engine]).get("tv_bound")), delta, t.tv_severity))
    return checks


def _engine_equivalence(engine: str, entry: Mapping[str, Any], alpha: float, greedy: bool) -> GateCheck:
    name, title = f"equivalence[{engine}]", f"Equivalence not rejected: {engine}"
    violations = _mapping(entry.get("verify_violations"))
    if violations:  # the sampler's own output broke the verify contract: proven, no test needed
        first = _mapping(violations.get("first"))
        return GateCheck(
            name,
            title,
            FAIL,
            f"{engine}'s verify function broke its contract in {violations.get('count')} call(s); "
            f"first: call {first.get('call')} of record {first.get('record')}, it {first.get('problem')}",
            {"verify_violations": dict(violations)},
        )
    if greedy:
        result = _mapping(entry.get("greedy"))
        if not result:
            return _not_run(name, title, f"no greedy comparison for {engine}")
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
    gof = _mapping(entry.get("goodness_of_fit"))
    two = _mapping(entry.get("two_sample"))
    rejected = [("goodness-of-fit", r) for r in _rejections(gof.get("gate"), alpha)]
    rejected += [("two-sample", r) for r in _rejections(two.get("gate"), alpha)]
    details = {
        "alpha": alpha,
        "n_tokens": gof.get("n_tokens"),
        "rejected": [{"battery": b, "test": r.get("test"), "holm_pvalue": r.get("holm_pvalue")} for b, r in rejected],
    }
    if rejected:
        listed = ", ".join(f"{r.get('test')} (Holm p = {_fmt(r.get('holm_pvalue'))})" for _, r in rejected)
        return GateCheck(
            name, title, FAIL, f"{engine} does not follow the target distribution: rejected by {listed} at α = {alpha:g}", details
        )
    if not _tested(gof.get("gate")) and not _tested(two.get("gate")):
        return GateCheck(name, title, WARN, f"not run: no test of {engine} could run (no scored tokens)", {**details, "not_run": True})
    smallest = min(
        (r["holm_pvalue"] for b in (gof, two) for r in (b.get("gate") or []) if isinstance(r, Mapping) and _finite(r.get("holm_pvalue"))),
        default=math.nan,
    )
    message = (
        f"no test rejects at α = {alpha:g} after Holm correction (smallest adjusted p = {_fmt(smallest)}, "
        f"{gof.get('n_tokens', 'n/a')} tokens)"
    )
    if two.get("not_run_reason"):  # a test that could not reject is not counted as passed
        details["two_sample_not_run"] = two["not_run_reason"]
        message += f"; two-sample tests not run: {two['not_run_reason']}"
    if entry.get("status"):
        details["status"] = entry["status"]
        message += f"; {entry['status']}"
    return GateCheck(name, title, PASS, message, details)


def _control_check(control: str, entry: Any, alpha: float, greedy: bool, section: Mapping[str, Any]) -> GateCheck:
    name, title = f"control[{control}]", "Vanilla control passes"
    if greedy:
        return GateCheck(
            name,
            title,
            PASS,
            "greedy mode: outputs are compared with vanilla directly; the control has no test of its own",
            {"mode": "greedy"},
        )
    if not isinstance(entry, Mapping):
        return _not_run(name, title, f"the run has no {control} engine, so the battery's calibration is unchecked")
    gof = _mapping(entry.get("goodness_of_fit"))
    control_alpha = section.get("control_alpha") if _finite(section.get("control_alpha")) else alpha
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
    if chance and not (rejected or offenders or section.get("status") == "error"):
        listed = ", ".join(f"{r.get('test')} (Holm p = {_fmt(r.get('holm_pvalue'))})" for r in chance)
        return GateCheck(
            name,
            title,
            WARN,
            f"plain decoding is rejected at α = {alpha:g} by {listed} but not at the control level {control_alpha:g}: "
            "chance in 1 audit of 20, or a small scoring mismatch; rerun with another --seed",
            details,
        )
    if rejected or offenders or section.get("status") == "error":
        why = ", ".join(f"{r.get('test')} (Holm p = {_fmt(r.get('holm_pvalue'))})" for r in rejected) or (
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
        block = _impossible(_mapping(entry))
        if not block:
            continue
        tested += int(block.get("n") or 0)
        count = int(block.get("statistic") or 0)
        if count:
            found[engine] = count
            offenders = block.get("offenders") or []
            if first is None and offenders and isinstance(offenders[0], Mapping):
                first = (engine, offenders[0])
    if not tested:
        return _not_run(name, title, "no scored tokens")
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


def _tv_check(engine: str, bound: Mapping[str, Any], delta: float | None, severity: str) -> GateCheck:
    name, title = f"tv-bound[{engine}]", f"TV distance within the margin: {engine}"
    upper = bound.get("upper")
    if not _finite(upper):
        return _not_run(name, title, f"no TV bound for {engine}")
    delta = delta if delta is not None else (bound.get("delta") if _finite(bound.get("delta")) else 0.05)
    details = {"upper": upper, "estimate": bound.get("estimate"), "delta": delta, "n_samples": bound.get("n_samples")}
    if upper <= delta:
        return GateCheck(name, title, PASS, f"TV upper bound {_fmt(upper)} ≤ δ = {delta:g}: equivalent within the margin", details)
    why = (
        "and equality is rejected at this position"
        if bound.get("verdict") == "different"
        else f"not shown with {bound.get('n_samples', 'n/a')} samples; more samples per prompt tighten the bound"
    )
    return GateCheck(name, title, severity, f"TV upper bound {_fmt(upper)} > δ = {delta:g}: equivalence within the margin {why}", details)


def _disparity_checks(snapshot: Mapping[str, Any], t: GateThresholds) -> list[GateCheck]:
    disparities = _mapping(snapshot.get("disparities"))
    groups = _mapping(snapshot.get("groups"))
    if not disparities and not groups:
        why = "the snapshot has no disparity results (the run needs vanilla, a speculative engine and a prompt attribute)"
        return [
            _not_run("disparity", "Groups within the tolerance band", why),
            _not_run("min-speedup", "No group slowed down", why),
            _not_run("group-size", "Groups large enough", why),
        ]
    checks: list[GateCheck] = []
    for dimension in dict.fromkeys([*disparities, *groups]):
        part = _mapping(disparities.get(dimension))
        alpha = t.alpha if t.alpha is not None else (part.get("alpha") if _finite(part.get("alpha")) else 0.05)
        low, high = t.band(part.get("tolerance"))
        reference = part.get("reference") or _mapping(groups.get(dimension)).get("reference")
        for metric in t.disparity_metrics:
            checks.append(
                _band_check(
                    dimension,
                    metric,
                    _mapping(_mapping(part.get("metrics")).get(metric)),
                    reference,
                    alpha,
                    low,
                    high,
                    t.disparity_severity,
                )
            )
        by_group = _mapping(_mapping(groups.get(dimension)).get("by_group"))
        checks.append(_speedup_check(dimension, by_group, t.min_speedup, t.slowdown_severity))
        checks.append(_size_check(dimension, by_group, t.min_group_size))
    return checks


def _comparison_status(row: Mapping[str, Any], low: float, high: float, alpha: float) -> DisparityStatus | None:
    """The status of one comparison under the gate's band, from the ratio interval the analysis
    chose for it (the flag and the interval come from one method). Snapshots written before the
    intervals (no ``interval_method``) keep their rule: outside the band and Holm-significant.
    None: inside the band by the old rule."""
    ratio = _mapping(row.get("ratio"))
    if "interval_method" not in row:
        value = ratio.get("value")
        if not _finite(value) or low <= value <= high:
            return None
        significant = _finite(row.get("pvalue_holm")) and row["pvalue_holm"] < alpha
        return DisparityStatus.FLAG if significant else DisparityStatus.INCONCLUSIVE
    lo, hi = ratio.get("ci_low"), ratio.get("ci_high")
    if not (_finite(lo) and _finite(hi)):
        return DisparityStatus.INSUFFICIENT
    return DisparityStatus.from_interval(lo, hi, (low, high), decidable=not (lo < low and hi > high))


def _band_check(dimension, metric, block, reference, alpha, low, high, severity) -> GateCheck:
    name, title = f"disparity[{dimension}/{metric}]", f"{dimension}: {metric} ratio to the reference within the band"
    pairwise = _mapping(block.get("pairwise"))
    if not pairwise:
        return _not_run(name, title, f"no pairwise test of {metric} across {dimension} groups")
    by_status: dict[DisparityStatus, list[dict]] = {s: [] for s in DisparityStatus}
    for group, row in pairwise.items():
        row = _mapping(row)
        status = _comparison_status(row, low, high, alpha)
        if status is None:
            continue
        ratio = _mapping(row.get("ratio"))
        by_status[status].append(
            {
                "group": group,
                "ratio": ratio.get("value"),
                "ci_low": ratio.get("ci_low"),
                "ci_high": ratio.get("ci_high"),
                "method": row.get("interval_method") or f"Holm p = {_fmt(row.get('pvalue_holm'), 2)}",
                "n_prompts": row.get("n_prompts"),
                "min_detectable_ratio": row.get("min_detectable_ratio_low"),
            }
        )
    flagged, inconclusive = by_status[DisparityStatus.FLAG], by_status[DisparityStatus.INCONCLUSIVE]
    insufficient = by_status[DisparityStatus.INSUFFICIENT]
    details = {
        "reference": reference,
        "band": [low, high],
        "alpha": alpha,
        "flagged": flagged,
        "inconclusive": inconclusive,
        "insufficient": insufficient,
    }

    def describe(rows):
        return "; ".join(
            f"{r['group']} {_fixed(r['ratio'])}× [{_fixed(r['ci_low'])}, {_fixed(r['ci_high'])}] (n = {r['n_prompts']}, {r['method']})"
            for r in rows
        )

    band = f"[{low:.3g}, {high:.3g}]"
    undecided = []
    if inconclusive:
        undecided.append(f"interval across a band edge (inconclusive): {describe(inconclusive)}")
    if insufficient:
        undecided.append(f"too few prompts to decide (insufficient): {describe(insufficient)}")
    if flagged:
        message = f"{metric} ratio to {reference}: interval wholly outside {band}: {describe(flagged)}"
        if undecided:
            message += "; " + "; ".join(undecided)
        return GateCheck(name, title, severity, message, details)
    if undecided:
        return GateCheck(name, title, WARN, f"{metric} ratio to {reference} not shown within {band}: " + "; ".join(undecided), details)
    return GateCheck(name, title, PASS, f"every {dimension} group's {metric} is within {band} of {reference}", details)


def _speedup_check(dimension, by_group, minimum, severity) -> GateCheck:
    name, title = f"min-speedup[{dimension}]", f"{dimension}: no group below the minimum speed-up"
    measured = {g: _mapping(_mapping(_mapping(e).get("metrics")).get("speedup")) for g, e in by_group.items()}
    measured = {g: m for g, m in measured.items() if _finite(m.get("value"))}
    if not measured:
        return _not_run(name, title, f"no speed-up measured for {dimension} groups")
    slow = {g: m for g, m in measured.items() if m["value"] < minimum}
    details = {
        "min_speedup": minimum,
        "groups": {g: {k: m.get(k) for k in ("value", "ci_low", "ci_high", "n_prompts")} for g, m in slow.items()},
    }
    if slow:
        listed = "; ".join(
            f"{g} {_fixed(m['value'])}× [{_fixed(m.get('ci_low'))}, {_fixed(m.get('ci_high'))}]"
            + (" (interval below)" if _finite(m.get("ci_high")) and m["ci_high"] < minimum else "")
            for g, m in sorted(slow.items(), key=lambda item: item[1]["value"])
        )
        return GateCheck(
            name, title, severity, f"{len(slow)} of {len(measured)} groups measure a speed-up below {minimum:g}×: {listed}", details
        )
    slowest = min(measured.items(), key=lambda item: item[1]["value"])
    return GateCheck(name, title, PASS, f"every group reaches {minimum:g}× (slowest: {slowest[0]} {_fixed(slowest[1]['value'])}×)", details)


def _size_check(dimension, by_group, minimum) -> GateCheck:
    name, title = f"group-size[{dimension}]", f"{dimension}: groups large enough to judge"
    sizes = {g: _mapping(e).get("n_prompts") for g, e in by_group.items()}
    if not sizes:
        return _not_run(name, title, f"no {dimension} groups")
    small = {g: n for g, n in sizes.items() if not _finite(n) or n < minimum}
    if small:
        listed = ", ".join(f"{g} ({n})" for g, n in sorted(small.items(), key=lambda item: (item[1] or 0, item[0])))
        return GateCheck(
            name,
            title,
            WARN,
            f"{len(small)} of {len(sizes)} groups have fewer than {minimum} prompts, so their intervals and tests are weak: {listed}",
            {"min_group_size": minimum, "small": small},
        )
    return GateCheck(name, title, PASS, f"every group has at least {minimum} prompts", {"min_group_size": minimum})


__all__ = ["FAIL", "PASS", "WARN", "GateCheck", "GateResult", "GateThresholds", "evaluate_gate", "load_thresholds"]
