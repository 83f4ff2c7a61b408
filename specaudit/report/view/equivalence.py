"""The equivalence section of the report view: per engine, the tests, the TV bound, power, and
greedy divergences."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import specaudit.report.charts as charts
from specaudit.contracts import CheckStatus, EquivalenceStatus
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import BatteryTest, GreedyComparison, ImpossibleTokens
from specaudit.report.view.base import MAX_ROWS, NOT_RUN, Ids, generic_rows
from specaudit.report.view.format import (
    MISSING,
    badge,
    finite,
    integer,
    is_status,
    num,
    percent,
    pvalue,
    recorded,
    setting,
    test_label,
    with_ci,
)
from specaudit.report.view.statuses import engine_status, not_run_reason, status_badge

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import (
        EngineEquivalence,
        EquivalenceSection,
        GoodnessOfFit,
        HolmRow,
        PitBound,
        SamplePlan,
        TvBound,
        TwoSample,
    )


def equivalence_view(section: EquivalenceSection, ids: Ids, samples: Any = None) -> dict[str, Any]:
    # a failed control voids the audit: the section shows ERROR, not the battery's FAIL
    status = "error" if section.control_failed else section.status
    if status == NOT_RUN or not section.engines:
        return {
            "ran": False,
            "status": NOT_RUN,
            "badge": badge(NOT_RUN),
            "reason": section.message
            or "the equivalence tests were not run for this snapshot (run `specaudit analyze` without --no-equivalence)",
        }
    control = section.control or CONTROL_ENGINE
    greedy = section.mode == "greedy"
    # the reference speculative engine first, other audited engines next, the control last
    order = sorted(section.engines, key=lambda e: (e == control, e != SPECULATIVE_ENGINE, str(e)))
    views = [
        _greedy_engine(str(name), section.engines[name], name == control)
        if greedy
        else _sampling_engine(str(name), section.engines[name], name == control, ids, samples)
        for name in order
    ]
    return {
        "ran": True,
        "status": status,
        "badge": badge(status),
        "mode": "greedy" if greedy else "sampling",
        "alpha": setting(section.alpha),
        "delta": setting(section.delta),
        "family_rule": section.family_rule or MISSING,
        "message": section.message,
        "warning": section.control_warning,
        "control": control,
        "engines": views,
    }


def _test_rows(
    block: GoodnessOfFit | TwoSample | None, *, two_sample: bool = False, samples: Any = None, control: bool = False
) -> list[dict[str, Any]]:
    if block is None:
        return []
    holm = {str(r.test): r for r in block.gate}
    rows = []
    # each test writes the figures it has (statistic, pvalue, n, method; the PIT its histogram and ks): an open part
    for name, test in block.tests.items():
        gated = holm.get(str(name))
        reason = not_run_reason(test, two_sample=two_sample, samples=samples)
        rows.append(_test_row(str(name), test, gated, reason, control))
        if test.ks is not None:
            rows.append(_test_row(str(test.ks.name or "pit_ks"), test.ks, None, None, control))
    return rows


TEST_BADGES = {  # a test rejects or does not; "not rejected" is not a pass
    "rejected": {"text": "REJECTED", "css": "fail", "symbol": "✗", "key": "fail"},
    "rejected_control": {"text": "REJECTED AT α", "css": "warn", "symbol": "!", "key": "warn"},
    "not_rejected": {"text": "NOT REJECTED", "css": "none", "symbol": "–", "key": "not rejected"},
    "not_run": {"text": "NOT RUN", "css": "none", "symbol": "–", "key": "not run"},
}


def _test_row(name: str, test: BatteryTest, gated: HolmRow | None, reason: str | None = None, control: bool = False) -> dict[str, Any]:
    verdict = test.verdict
    if gated is not None:  # the gate's decision is the Holm-corrected one
        verdict = CheckStatus.FAIL if gated.reject else CheckStatus.PASS
    if reason:
        shown = TEST_BADGES["not_run"]
    elif is_status(verdict, CheckStatus.FAIL):
        shown = TEST_BADGES["rejected_control" if control else "rejected"]
    else:
        shown = TEST_BADGES["not_rejected"]
    return {
        "not_run": reason,
        "name": test_label(name),
        "statistic": num(test.statistic),
        "pvalue": pvalue(test.pvalue),
        "holm": pvalue(gated.holm_pvalue) if gated is not None else "not gated",
        "n": integer(test.n),
        "method": test.method or MISSING,
        "badge": shown,
        "gated": gated is not None,
    }


@dataclass(frozen=True)
class TwoSampleView:
    """An audited engine's two-sample tests against the control as shown; empty where none ran."""

    ran: bool
    badge: dict[str, str] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    reference: str | None = None
    n_prompts: str | None = None
    flagged_prompts: dict[str, Any] | None = None
    flagged_groups: dict[str, Any] | None = None


def _sampling_engine(name: str, entry: EngineEquivalence, is_control: bool, ids: Ids, samples: Any = None) -> dict[str, Any]:
    gof, two = entry.goodness_of_fit, entry.two_sample
    impossible = (gof.impossible_tokens if gof is not None else None) or ImpossibleTokens()
    pit = (gof.tests.get("pit") if gof is not None else None) or BatteryTest()
    histogram = pit.histogram
    chart = None
    if histogram:
        chart = charts.pit_histogram(
            histogram,
            chart_id=ids("pit"),
            title=f"PIT histogram, {name} ({integer(sum(c for c in histogram if finite(c)))} tokens)",
            desc=(
                f"Randomised PIT values of every scored token of {name} on {len(histogram)} equal bins. A sampler that "
                f"follows the target gives a flat histogram inside the grey 95% range. Anderson–Darling p = "
                f"{pvalue(pit.pvalue)}."
            ),
        )
    gated = [r for block in (gof, two) if block is not None for r in block.gate]
    holm_values = [r.holm_pvalue for r in gated if finite(r.holm_pvalue)]
    status = engine_status(entry)
    return {
        "name": name,
        "is_control": is_control,
        "mode": "sampling",
        "status": status,
        "samples": samples,
        "badge": _control_badge(entry.verdict) if is_control else status_badge(status),
        "n_tokens": integer(gof.n_tokens if gof is not None else None),
        "battery_p": pvalue(min(holm_values)) if holm_values else MISSING,  # over both batteries
        # a proven bug that needs no test: the sampler's verify contract, or a server's impossible output
        "proof": entry.message if (entry.server_violations or entry.verify_violations) else None,
        "rejected": [f"{test_label(str(r.test))} (Holm p = {pvalue(r.holm_pvalue)})" for r in gated if r.reject],
        "tests": _test_rows(gof, control=is_control),
        "two_sample": TwoSampleView(
            ran=True,
            badge=_two_sample_badge(two, samples),
            rows=_test_rows(two, two_sample=True, samples=samples),
            reference=recorded(two.reference, CONTROL_ENGINE),
            n_prompts=integer(two.n_prompts),
            flagged_prompts=generic_rows(two.flagged_prompts),
            flagged_groups=generic_rows(two.flagged_groups),
        )
        if two is not None and not is_control
        else TwoSampleView(ran=False),
        "impossible": {
            "count": integer(recorded(impossible.statistic, 0)),
            "n": integer(impossible.n),
            "badge": badge(recorded(impossible.verdict, NOT_RUN)),
            "offenders": impossible.offenders[:MAX_ROWS],
            "more": max(0, len(impossible.offenders) - MAX_ROWS),
            "near_boundary": len(impossible.near_boundary),
        },
        "tv": _tv_view(entry.tv_bound),
        "pit_bound": pit_bound_view(entry.pit_bound, violation=status == EquivalenceStatus.VIOLATION),
        "power": _power_rows(entry.power),
        "pit_chart": chart,
        "flagged_groups": generic_rows(gof.flagged_groups if gof is not None else []),
    }


def _control_badge(verdict: Any) -> dict[str, str]:
    """The control either behaves as a correct sampler must, or says why the audit is suspect."""
    text, css, symbol = {
        CheckStatus.PASS: ("CONTROL OK", "pass", "✓"),
        CheckStatus.WARN: ("CONTROL WARN", "warn", "!"),
        CheckStatus.FAIL: ("CONTROL FAILED", "fail", "✗"),
    }.get(next((s for s in CheckStatus if is_status(verdict, s)), None), ("NOT RUN", "none", "–"))
    return {"text": text, "css": css, "symbol": symbol, "key": str(verdict).lower()}


def _two_sample_badge(two: TwoSample, samples: Any) -> dict[str, str]:
    tests = list(two.tests.values())
    if tests and all(not_run_reason(t, two_sample=True, samples=samples) for t in tests):
        return TEST_BADGES["not_run"]
    return TEST_BADGES["rejected"] if two.verdict is CheckStatus.FAIL else TEST_BADGES["not_rejected"]


@dataclass(frozen=True)
class TvView:
    """An engine's first-token TV bound as shown; the figures are None where it was not run."""

    ran: bool
    delta_value: float | None = None
    samples_to_show: SamplePlan | None = None
    estimate: str | None = None
    upper: str | None = None
    kl_upper: str | None = None
    delta: str | None = None
    pvalue: str | None = None
    n_samples: str | None = None
    n_prompts: str | None = None
    position: Any = None
    reference: str | None = None
    verdict: str | None = None
    badge: dict[str, str] | None = None


def _tv_view(tv: TvBound | None) -> TvView:
    if tv is None:
        return TvView(ran=False)
    verdict = tv.verdict or NOT_RUN
    status = {"equivalent within delta": "pass", "not shown": "warn", "different": "fail"}.get(verdict, NOT_RUN)
    return TvView(
        ran=True,
        delta_value=tv.delta,
        samples_to_show=tv.samples_to_show,
        estimate=num(tv.estimate),
        upper=num(tv.upper),
        kl_upper=num(tv.kl_upper),
        delta=setting(tv.delta),
        pvalue=pvalue(tv.pvalue),
        n_samples=integer(tv.n_samples),
        n_prompts=integer(tv.n_prompts),
        position=tv.position,
        reference=tv.reference,
        verdict=verdict,
        badge=badge(status),
    )


@dataclass(frozen=True)
class PitBoundView:
    """An engine's PIT bound as shown; the figures are None where it says nothing."""

    ran: bool
    violation: bool = False
    upper: str | None = None
    level: str | None = None
    n: str | None = None
    observed: str | None = None
    margin: str | None = None
    claim: str | None = None
    sentence: str | None = None


def pit_bound_view(bound: PitBound | None, *, violation: bool = False) -> PitBoundView:
    """The bounded statement (stats.equivalence.pit_bound): "no distortion of the PIT above d, shown
    at 95%" where no test found a violation; where one did, the same bound words what it is there,
    an upper limit on the violation's size on the PIT scale, never a claim of correctness."""
    upper, level = (bound.upper, bound.level) if bound is not None else (None, None)
    if not finite(upper) or not finite(level) or not bound.n or upper >= 1.0:
        return PitBoundView(ran=False)
    shown_at = f"{level * 100:.0f}%"
    how = (
        f"(Kolmogorov distance of the PIT from uniform over {integer(bound.n)} tokens: observed "
        f"{bound.observed:.3f} plus the DKW margin {bound.margin:.3f})"
    )
    claim = (
        f"whatever the violation is, it distorts the PIT by at most {upper:.3f} ({shown_at} upper bound)"
        if violation
        else f"no distortion of the PIT above {upper:.3f}, shown at {shown_at}"
    )
    return PitBoundView(
        ran=True,
        violation=violation,
        upper=f"{upper:.3f}",
        level=shown_at,
        n=integer(bound.n),
        observed=f"{bound.observed:.3f}",
        margin=f"{bound.margin:.3f}",
        claim=claim,
        sentence=f"{claim} {how}",
    )


POWER_TEXT = {
    "z_shift": ("z shift", "shift of a martingale z statistic detected with 80% power"),
    "martingale_mu": ("per-token shift μ", "mean standardised per-token shift the z-tests detect (surprisal, affinity, acceptance)"),
    "pit_tv": ("PIT distance δ", "sup-distance of the PIT law from uniform (= TV for monotone distortions) the PIT test detects"),
    "first_token_tv": ("first-token TV", "TV of the first-token distribution per prompt, against the known target"),
    "first_token_tv_two_sample": ("first-token TV, two-sample", "the same against a vanilla sample of equal size"),
}


@dataclass(frozen=True)
class PowerRow:
    """What the budget could detect with 80% power, by one measure: its label, the value shown, what
    it means and the value as recorded."""

    label: str
    value: str
    meaning: str
    raw: Any


def _power_rows(power: Any) -> list[PowerRow]:
    if not isinstance(power, Mapping):
        return []
    rows = []
    for key, value in power.items():
        label, meaning = POWER_TEXT.get(key, (str(key).replace("_", " "), ""))
        rows.append(PowerRow(label=label, value=num(value), meaning=meaning, raw=value))
    return rows


def _greedy_engine(name: str, entry: EngineEquivalence, is_control: bool) -> dict[str, Any]:
    result = entry.greedy or GreedyComparison()
    rows = [
        {
            "prompt_id": recorded(d.prompt_id),
            "position": recorded(d.position),
            "token": recorded(d.token),
            "reference_token": recorded(d.reference_token),
            "logit_gap": num(d.logit_gap),
            "top2_gap": num(d.top2_gap),
            "tolerance": num(d.tolerance),
            "classification": recorded(d.classification),
            "benign": d.classification == "near-tie",
        }
        for d in result.divergences
    ]
    kinds = dict(Counter(str(d.classification) for d in result.divergences))
    return {
        "name": name,
        "is_control": is_control,
        "status": engine_status(entry),
        "mode": "greedy",
        "badge": badge(recorded(entry.verdict, NOT_RUN)),
        "match_rate": with_ci(result.match_rate, result.ci_low, result.ci_high, fmt=percent),
        "n_pairs": integer(result.n_pairs),
        "n_matches": integer(result.n_matches),
        "kinds": kinds,
        "divergences": rows[:MAX_ROWS],
        "more": max(0, len(rows) - MAX_ROWS),
    }
