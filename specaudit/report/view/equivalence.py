"""The equivalence section of the report view: per engine, the tests, the TV bound, power, and
greedy divergences."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import specaudit.charts as charts
from specaudit.contracts import CheckStatus
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import control_failed
from specaudit.report.view.base import MAX_ROWS, NOT_RUN, Ids, generic_rows
from specaudit.report.view.format import (
    MISSING,
    badge,
    finite,
    get,
    integer,
    is_status,
    num,
    percent,
    pvalue,
    setting,
    test_label,
    with_ci,
)
from specaudit.report.view.statuses import engine_status, not_run_reason, status_badge


def equivalence_view(section: Mapping[str, Any], ids: Ids, samples: Any = None) -> dict[str, Any]:
    # a failed control voids the audit: the section shows ERROR, not the battery's FAIL
    status = "error" if control_failed(section) else get(section, "status", default=NOT_RUN)
    engines = get(section, "engines", default={})
    if status == NOT_RUN or not isinstance(engines, Mapping) or not engines:
        return {
            "ran": False,
            "status": NOT_RUN,
            "badge": badge(NOT_RUN),
            "reason": get(
                section,
                "message",
                default="the equivalence tests were not run for this snapshot (run `specaudit analyze` without --no-equivalence)",
            ),
        }
    control = get(section, "control", default=CONTROL_ENGINE)
    greedy = get(section, "mode") == "greedy"
    # the reference speculative engine first, other audited engines next, the control last
    order = sorted(engines, key=lambda e: (e == control, e != SPECULATIVE_ENGINE, str(e)))
    views = [
        _greedy_engine(str(name), get(engines, name, default={}), name == control, ids)
        if greedy
        else _sampling_engine(str(name), get(engines, name, default={}), name == control, ids, samples)
        for name in order
    ]
    return {
        "ran": True,
        "status": status,
        "badge": badge(status),
        "mode": "greedy" if greedy else "sampling",
        "alpha": setting(get(section, "alpha")),
        "delta": setting(get(section, "delta")),
        "family_rule": get(section, "family_rule", default=MISSING),
        "message": get(section, "message"),
        "warning": get(section, "control_warning"),
        "control": control,
        "engines": views,
    }


def _gate_rows(table: Any) -> dict[str, Mapping[str, Any]]:
    return {str(r.get("test")): r for r in (table or []) if isinstance(r, Mapping)}


def _test_rows(block: Mapping[str, Any], *, two_sample: bool = False, samples: Any = None, control: bool = False) -> list[dict[str, Any]]:
    holm = _gate_rows(get(block, "gate"))
    rows = []
    for name, test in (get(block, "tests", default={}) or {}).items():
        if not isinstance(test, Mapping):
            continue
        gated = holm.get(str(name))
        reason = not_run_reason(test, two_sample=two_sample, samples=samples)
        rows.append(_test_row(str(name), test, gated, gated is not None, reason, control))
        ks = test.get("ks")
        if isinstance(ks, Mapping):
            rows.append(_test_row(str(ks.get("name", "pit_ks")), ks, None, False, None, control))
    return rows


TEST_BADGES = {  # a test rejects or does not; "not rejected" is not a pass
    "rejected": {"text": "REJECTED", "css": "fail", "symbol": "✗", "key": "fail"},
    "rejected_control": {"text": "REJECTED AT α", "css": "warn", "symbol": "!", "key": "warn"},
    "not_rejected": {"text": "NOT REJECTED", "css": "none", "symbol": "–", "key": "not rejected"},
    "not_run": {"text": "NOT RUN", "css": "none", "symbol": "–", "key": "not run"},
}


def _test_row(
    name: str, test: Mapping[str, Any], gated: Mapping[str, Any] | None, in_gate: bool, reason: str | None = None, control: bool = False
) -> dict[str, Any]:
    verdict = test.get("verdict")
    if gated is not None:  # the gate's decision is the Holm-corrected one
        verdict = CheckStatus.FAIL if gated.get("reject") else CheckStatus.PASS
    if reason:
        shown = TEST_BADGES["not_run"]
    elif is_status(verdict, CheckStatus.FAIL):
        shown = TEST_BADGES["rejected_control" if control else "rejected"]
    else:
        shown = TEST_BADGES["not_rejected"]
    return {
        "not_run": reason,
        "name": test_label(name),
        "statistic": num(test.get("statistic")),
        "pvalue": pvalue(test.get("pvalue")),
        "holm": pvalue(get(gated, "holm_pvalue")) if in_gate else "not gated",
        "n": integer(test.get("n")),
        "method": test.get("method") or MISSING,
        "badge": shown,
        "gated": in_gate,
    }


def _sampling_engine(name: str, entry: Mapping[str, Any], is_control: bool, ids: Ids, samples: Any = None) -> dict[str, Any]:
    gof = get(entry, "goodness_of_fit", default={})
    two = get(entry, "two_sample", default={})
    impossible = get(gof, "impossible_tokens", default={})
    tv = get(entry, "tv_bound", default={})
    power = get(entry, "power", default={})
    histogram = get(gof, "tests", "pit", "histogram", default=[])
    pit = get(gof, "tests", "pit", default={})
    chart = None
    if histogram:
        chart = charts.pit_histogram(
            histogram,
            chart_id=ids("pit"),
            title=f"PIT histogram, {name} ({integer(sum(c for c in histogram if finite(c)))} tokens)",
            desc=(
                f"Randomised PIT values of every scored token of {name} on {len(histogram)} equal bins. A sampler that "
                f"follows the target gives a flat histogram inside the grey 95% range. Anderson–Darling p = "
                f"{pvalue(pit.get('pvalue'))}."
            ),
        )
    offenders = [o for o in (get(impossible, "offenders", default=[]) or []) if isinstance(o, Mapping)]
    gated = [r for block in (gof, two) for r in (get(block, "gate", default=[]) or []) if isinstance(r, Mapping)]
    holm_values = [r["holm_pvalue"] for r in gated if finite(r.get("holm_pvalue"))]
    status = engine_status(entry)
    return {
        "name": name,
        "is_control": is_control,
        "mode": "sampling",
        "status": status,
        "samples": samples,
        "badge": _control_badge(get(entry, "verdict")) if is_control else status_badge(status),
        "n_tokens": integer(get(gof, "n_tokens")),
        "battery_p": pvalue(min(holm_values)) if holm_values else MISSING,  # over both batteries
        # a proven bug that needs no test: the sampler's verify contract, or a server's impossible output
        "proof": get(entry, "message") if (get(entry, "server_violations") or get(entry, "verify_violations")) else None,
        "rejected": [f"{test_label(str(r.get('test')))} (Holm p = {pvalue(r.get('holm_pvalue'))})" for r in gated if r.get("reject")],
        "tests": _test_rows(gof, control=is_control),
        "two_sample": {
            "ran": bool(two),
            "badge": _two_sample_badge(two, samples),
            "rows": _test_rows(two, two_sample=True, samples=samples),
            "reference": get(two, "reference", default=CONTROL_ENGINE),
            "n_prompts": integer(get(two, "n_prompts")),
            "flagged_prompts": generic_rows(get(two, "flagged_prompts", default=[])),
            "flagged_groups": generic_rows(get(two, "flagged_groups", default=[])),
        }
        if not is_control
        else {"ran": False},
        "impossible": {
            "count": integer(get(impossible, "statistic", default=0)),
            "n": integer(get(impossible, "n")),
            "badge": badge(get(impossible, "verdict", default=NOT_RUN)),
            "offenders": offenders[:MAX_ROWS],
            "more": max(0, len(offenders) - MAX_ROWS),
        },
        "tv": _tv_view(tv),
        "pit_bound": pit_bound_view(get(entry, "pit_bound", default={})),
        "power": _power_rows(power),
        "pit_chart": chart,
        "flagged_groups": generic_rows(get(gof, "flagged_groups", default=[])),
    }


def _control_badge(verdict: Any) -> dict[str, str]:
    """The control either behaves as a correct sampler must, or says why the audit is suspect."""
    text, css, symbol = {
        CheckStatus.PASS: ("CONTROL OK", "pass", "✓"),
        CheckStatus.WARN: ("CONTROL WARN", "warn", "!"),
        CheckStatus.FAIL: ("CONTROL FAILED", "fail", "✗"),
    }.get(next((s for s in CheckStatus if is_status(verdict, s)), None), ("NOT RUN", "none", "–"))
    return {"text": text, "css": css, "symbol": symbol, "key": str(verdict).lower()}


def _two_sample_badge(two: Mapping[str, Any], samples: Any) -> dict[str, str]:
    tests = [t for t in (get(two, "tests", default={}) or {}).values() if isinstance(t, Mapping)]
    if tests and all(not_run_reason(t, two_sample=True, samples=samples) for t in tests):
        return TEST_BADGES["not_run"]
    return TEST_BADGES["rejected"] if is_status(get(two, "verdict"), CheckStatus.FAIL) else TEST_BADGES["not_rejected"]


def _tv_view(tv: Mapping[str, Any]) -> dict[str, Any]:
    if not tv:
        return {"ran": False}
    verdict = get(tv, "verdict", default=NOT_RUN)
    status = {"equivalent within delta": "pass", "not shown": "warn", "different": "fail"}.get(verdict, NOT_RUN)
    return {
        "ran": True,
        "delta_value": tv.get("delta"),
        "samples_to_show": tv.get("samples_to_show"),
        "estimate": num(tv.get("estimate")),
        "upper": num(tv.get("upper")),
        "kl_upper": num(tv.get("kl_upper")),
        "delta": setting(tv.get("delta")),
        "pvalue": pvalue(tv.get("pvalue")),
        "n_samples": integer(tv.get("n_samples")),
        "n_prompts": integer(tv.get("n_prompts")),
        "position": tv.get("position", 0),
        "reference": tv.get("reference", "target"),
        "verdict": verdict,
        "badge": badge(status),
    }


def pit_bound_view(bound: Mapping[str, Any]) -> dict[str, Any]:
    """The positive statement: "no distortion of the PIT above d, shown at 95%" (stats.equivalence.pit_bound)."""
    upper, level = bound.get("upper") if bound else None, bound.get("level") if bound else None
    if not finite(upper) or not finite(level) or not bound.get("n") or upper >= 1.0:
        return {"ran": False}
    shown_at = f"{level * 100:.0f}%"
    return {
        "ran": True,
        "upper": f"{upper:.3f}",
        "level": shown_at,
        "n": integer(bound.get("n")),
        "observed": f"{bound.get('observed'):.3f}",
        "margin": f"{bound.get('margin'):.3f}",
        "sentence": (
            f"no distortion of the PIT above {upper:.3f}, shown at {shown_at} (Kolmogorov distance of the PIT from "
            f"uniform over {integer(bound.get('n'))} tokens: observed {bound.get('observed'):.3f} plus the DKW margin "
            f"{bound.get('margin'):.3f})"
        ),
    }


POWER_TEXT = {
    "z_shift": ("z shift", "shift of a martingale z statistic detected with 80% power"),
    "martingale_mu": ("per-token shift μ", "mean standardised per-token shift the z-tests detect (surprisal, affinity, acceptance)"),
    "pit_tv": ("PIT distance δ", "sup-distance of the PIT law from uniform (= TV for monotone distortions) the PIT test detects"),
    "first_token_tv": ("first-token TV", "TV of the first-token distribution per prompt, against the known target"),
    "first_token_tv_two_sample": ("first-token TV, two-sample", "the same against a vanilla sample of equal size"),
}


def _power_rows(power: Any) -> list[dict[str, str]]:
    if not isinstance(power, Mapping):
        return []
    rows = []
    for key, value in power.items():
        label, meaning = POWER_TEXT.get(key, (str(key).replace("_", " "), ""))
        rows.append({"label": label, "value": num(value), "meaning": meaning, "raw": value})
    return rows


def _greedy_engine(name: str, entry: Mapping[str, Any], is_control: bool, ids: Ids) -> dict[str, Any]:
    result = get(entry, "greedy", default={})
    divergences = [d for d in (get(result, "divergences", default=[]) or []) if isinstance(d, Mapping)]
    rows = [
        {
            "prompt_id": d.get("prompt_id", MISSING),
            "position": d.get("position", MISSING),
            "token": d.get("token", MISSING),
            "reference_token": d.get("reference_token", MISSING),
            "logit_gap": num(d.get("logit_gap")),
            "top2_gap": num(d.get("top2_gap")),
            "tolerance": num(d.get("tolerance")),
            "classification": d.get("classification", MISSING),
            "benign": d.get("classification") == "near-tie",
        }
        for d in divergences
    ]
    kinds: dict[str, int] = {}
    for d in divergences:
        kinds[str(d.get("classification"))] = kinds.get(str(d.get("classification")), 0) + 1
    return {
        "name": name,
        "is_control": is_control,
        "status": engine_status(entry),
        "mode": "greedy",
        "badge": badge(get(entry, "verdict", default=NOT_RUN)),
        "match_rate": with_ci(get(result, "match_rate"), get(result, "ci_low"), get(result, "ci_high"), fmt=percent),
        "n_pairs": integer(get(result, "n_pairs")),
        "n_matches": integer(get(result, "n_matches")),
        "kinds": kinds,
        "divergences": rows[:MAX_ROWS],
        "more": max(0, len(rows) - MAX_ROWS),
    }
