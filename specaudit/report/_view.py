"""snapshot.json → the view the templates lay out.

All judgement about what a section shows (and whether it ran) lives here, in Python, so the
templates stay layout only and summary.md says exactly what the HTML says. Every section is
built under a guard: a snapshot part with an unexpected shape turns into a visible note on that
section instead of a crash of the whole report.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import specaudit.report._charts as charts
import specaudit.report._verdicts as verdicts
from specaudit.report._format import (
    METRIC_FAMILIES,
    MISSING,
    badge,
    finite,
    fixed,
    get,
    integer,
    metric_label,
    num,
    percent,
    pvalue,
    setting,
    test_label,
    triple,
    visible,
    with_ci,
    worst,
)

NOT_RUN = "not run"
FOREST_METRICS = ("acceptance_rate", "speedup")
MAX_ROWS = 200  # long tables (offenders, divergences) are cut here, with the count said


class _Ids:
    """Chart ids unique within one report and identical between renders of the same snapshot."""

    def __init__(self) -> None:
        self._count = itertools.count(1)

    def __call__(self, kind: str) -> str:
        return f"{kind}{next(self._count)}"


def _guard(name: str, build: Callable[..., dict], *args: Any) -> dict:
    try:
        return build(*args)
    except Exception as err:  # a report shows what it can; the failing part says why
        return {
            "ran": False,
            "status": "error",
            "badge": badge("error"),
            "broken": True,
            "reason": f"the {name} section of the snapshot could not be rendered ({type(err).__name__}: {err})",
        }


def build_view(snapshot: Mapping[str, Any], compare: Mapping[str, Any] | None = None, compare_label: str = "") -> dict[str, Any]:
    ids = _Ids()
    snapshot = snapshot if isinstance(snapshot, Mapping) else {}
    run = _guard("run", _run_view, snapshot)
    samples = get(snapshot, "run", "config", "samples")
    equivalence = _guard("equivalence", _equivalence_view, get(snapshot, "equivalence", default={}), ids, samples)
    disparity = _guard("disparity", _disparity_view, snapshot, ids)
    gate = _guard("gate", _gate_view, snapshot.get("gate"))
    view = {
        "schema_version": snapshot.get("schema_version"),
        "run": run,
        "equivalence": equivalence,
        "disparity": disparity,
        "gate": gate,
        "reproducibility": _guard("reproducibility", _repro_view, snapshot),
    }
    view["summary"] = _guard("summary", _summary_view, view, snapshot)
    view["speed_chart"] = _guard("speed chart", lambda: {"chart": _speed_chart(snapshot, ids)})
    view["compare"] = _guard("comparison", _compare_view, snapshot, compare, compare_label) if compare is not None else {"ran": False}
    view["terms"] = verdicts.Terms()
    view["glossary"] = verdicts.glossary_rows()
    return view


# ============================================================================ run / header
def _run_view(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    run = get(snapshot, "run", default={})
    config = get(run, "config", default={})
    models = get(run, "models", default={})
    prompt_set = get(run, "prompt_set", default={})
    temperature = get(config, "temperature")
    sampling = (
        "greedy"
        if temperature == 0
        else (
            f"T = {setting(temperature)}"
            + (f", top-k {config['top_k']}" if get(config, "top_k") else "")
            + (f", top-p {setting(config['top_p'])}" if finite(get(config, "top_p")) and config["top_p"] < 1 else "")
            if finite(temperature)
            else MISSING
        )
    )
    target = get(models, "target", "name", default=get(config, "target", default=MISSING))
    draft = get(models, "draft", "name", default=get(config, "draft", default=MISSING))
    if get(models, "speculative", "url"):  # a live endpoint pair: the servers are the models audited
        target = f"{get(models, 'vanilla', 'model')} at {get(models, 'vanilla', 'url')} (speculation off)"
        draft = f"{get(models, 'speculative', 'model')} at {get(models, 'speculative', 'url')} (speculation on)"
    return {
        "ran": bool(run),
        "id": get(run, "id", default="unnamed run"),
        "created": get(run, "created", default=MISSING),
        "target": target,
        "draft": draft,
        "engines": ", ".join(map(str, get(run, "engines", default=[]))) or MISSING,
        "disparity_engine": get(run, "disparity_engine", default=MISSING),
        "n_prompts": integer(get(run, "n_prompts")),
        "n_records": integer(get(run, "n_records")),
        "n_output_tokens": integer(get(run, "n_output_tokens")),
        "dimensions": ", ".join(map(str, get(run, "dimensions", default=[]))) or MISSING,
        "sampling": sampling,
        "k": get(config, "k", default=MISSING),
        "samples": get(config, "samples", default=MISSING),
        "max_new_tokens": get(config, "max_new_tokens", default=MISSING),
        "prompt_set": f"{get(prompt_set, 'name', default=MISSING)} v{get(prompt_set, 'version', default='?')}",
        "device": _device_text(get(run, "device"), models),
    }


def _device_text(device: Any, models: Any) -> str:
    if isinstance(device, Mapping):
        parts = [str(device.get("type", "")), str(device.get("name", ""))]
        if device.get("threads"):
            parts.append(f"{device['threads']} threads")
        text = ", ".join(p for p in parts if p)
    else:
        text = str(device) if device else ""
    dtype = get(models, "dtype")
    return (f"{text} ({dtype})" if dtype else text) or MISSING


# ============================================================================ equivalence
def _equivalence_view(section: Mapping[str, Any], ids: _Ids, samples: Any = None) -> dict[str, Any]:
    status = get(section, "status", default=NOT_RUN)
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
    control = get(section, "control", default="vanilla")
    greedy = get(section, "mode") == "greedy"
    # the reference speculative engine first, other audited engines next, the control last
    order = sorted(engines, key=lambda e: (e == control, e != "speculative", str(e)))
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
        reason = verdicts.not_run_reason(test, two_sample=two_sample, samples=samples)
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
        verdict = "fail" if gated.get("reject") else "pass"
    if reason:
        shown = TEST_BADGES["not_run"]
    elif verdict == "fail":
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


def _sampling_engine(name: str, entry: Mapping[str, Any], is_control: bool, ids: _Ids, samples: Any = None) -> dict[str, Any]:
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
    status = verdicts.engine_status(entry)
    return {
        "name": name,
        "is_control": is_control,
        "mode": "sampling",
        "status": status,
        "samples": samples,
        "badge": _control_badge(get(entry, "verdict")) if is_control else verdicts.status_badge(status),
        "n_tokens": integer(get(gof, "n_tokens")),
        "battery_p": pvalue(min(holm_values)) if holm_values else MISSING,  # over both batteries
        "rejected": [f"{test_label(str(r.get('test')))} (Holm p = {pvalue(r.get('holm_pvalue'))})" for r in gated if r.get("reject")],
        "tests": _test_rows(gof, control=is_control),
        "two_sample": {
            "ran": bool(two),
            "badge": _two_sample_badge(two, samples),
            "rows": _test_rows(two, two_sample=True, samples=samples),
            "reference": get(two, "reference", default="vanilla"),
            "n_prompts": integer(get(two, "n_prompts")),
            "flagged_prompts": _generic_rows(get(two, "flagged_prompts", default=[])),
            "flagged_groups": _generic_rows(get(two, "flagged_groups", default=[])),
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
        "power": _power_rows(power),
        "pit_chart": chart,
        "flagged_groups": _generic_rows(get(gof, "flagged_groups", default=[])),
    }


def _control_badge(verdict: Any) -> dict[str, str]:
    """The control either behaves as a correct sampler must, or says why the audit is suspect."""
    text, css, symbol = {
        "pass": ("CONTROL OK", "pass", "✓"),
        "warn": ("CONTROL WARN", "warn", "!"),
        "fail": ("CONTROL FAILED", "fail", "✗"),
    }.get(str(verdict).lower(), ("NOT RUN", "none", "–"))
    return {"text": text, "css": css, "symbol": symbol, "key": str(verdict).lower()}


def _two_sample_badge(two: Mapping[str, Any], samples: Any) -> dict[str, str]:
    tests = [t for t in (get(two, "tests", default={}) or {}).values() if isinstance(t, Mapping)]
    if tests and all(verdicts.not_run_reason(t, two_sample=True, samples=samples) for t in tests):
        return TEST_BADGES["not_run"]
    return TEST_BADGES["rejected"] if get(two, "verdict") == "fail" else TEST_BADGES["not_rejected"]


def _tv_view(tv: Mapping[str, Any]) -> dict[str, Any]:
    if not tv:
        return {"ran": False}
    verdict = get(tv, "verdict", default=NOT_RUN)
    status = {"equivalent within delta": "pass", "not shown": "warn", "different": "fail"}.get(verdict, NOT_RUN)
    return {
        "ran": True,
        "delta_value": tv.get("delta"),
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


def _greedy_engine(name: str, entry: Mapping[str, Any], is_control: bool, ids: _Ids) -> dict[str, Any]:
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
        "status": verdicts.engine_status(entry),
        "mode": "greedy",
        "badge": badge(get(entry, "verdict", default=NOT_RUN)),
        "match_rate": with_ci(get(result, "match_rate"), get(result, "ci_low"), get(result, "ci_high"), fmt=percent),
        "n_pairs": integer(get(result, "n_pairs")),
        "n_matches": integer(get(result, "n_matches")),
        "kinds": kinds,
        "divergences": rows[:MAX_ROWS],
        "more": max(0, len(rows) - MAX_ROWS),
    }


def _generic_rows(rows: Any) -> dict[str, Any]:
    """A table of whatever columns a diagnostic has (they vary by test), numbers formatted."""
    rows = [r for r in (rows or []) if isinstance(r, Mapping)][:MAX_ROWS]
    columns = list(dict.fromkeys(k for r in rows for k in r if k != "flagged"))
    body = [[_cell(r.get(c)) for c in columns] for r in rows]
    return {"columns": columns, "rows": body}


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return MISSING if value is None else ("yes" if value else "no")
    if isinstance(value, float):
        return pvalue(value) if 0 <= value <= 1 and value < 0.001 else num(value)
    if isinstance(value, (list, dict)):
        return ", ".join(map(str, value)) if isinstance(value, list) else ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


# ============================================================================ disparity
def _disparity_view(snapshot: Mapping[str, Any], ids: _Ids) -> dict[str, Any]:
    groups = get(snapshot, "groups", default={})
    disparities = get(snapshot, "disparities", default={})
    recommendations = get(snapshot, "recommendations", default={})
    names = list(dict.fromkeys([*(groups or {}), *(disparities or {})]))
    if not names:
        return {
            "ran": False,
            "status": NOT_RUN,
            "badge": badge(NOT_RUN),
            "dimensions": [],
            "reason": "no disparity results in this snapshot (the run needs the vanilla engine, a speculative engine "
            "and prompts with at least one attribute)",
        }
    dimensions = [
        _guard(
            f"disparity ({name})",
            _dimension_view,
            str(name),
            get(groups, name, default={}),
            get(disparities, name, default={}),
            get(recommendations, name, default={}),
            ids,
        )
        for name in names
    ]
    for number, (view, name) in enumerate(zip(dimensions, names), start=1):
        view.setdefault("name", str(name))
        view["anchor"] = f"dim-{number}"  # ids from user data could clash or hold odd characters
    status = worst([d.get("status", NOT_RUN) for d in dimensions])
    return {
        "ran": True,
        "status": status,
        "badge": badge(status),
        "dimensions": dimensions,
        "engine": get(snapshot, "run", "disparity_engine", default="speculative"),
    }


def _dimension_summary(statuses: list[verdicts.DisparityStatus]) -> verdicts.DisparityStatus | None:
    """A dimension's headline status: FLAG if any comparison is flagged, WITHIN only if every one is."""
    order = [verdicts.DisparityStatus.FLAG, verdicts.DisparityStatus.INCONCLUSIVE, verdicts.DisparityStatus.INSUFFICIENT]
    if not statuses:
        return None
    for status in order:
        if status in statuses:
            return status
    return verdicts.DisparityStatus.WITHIN


def _dimension_view(name: str, groups: Mapping[str, Any], part: Mapping[str, Any], advice: Mapping[str, Any], ids: _Ids) -> dict[str, Any]:
    by_group = get(groups, "by_group", default={})
    reference = get(part, "reference", default=get(groups, "reference", default="overall"))
    band = verdicts.band_of(part)
    metrics = get(part, "metrics", default={})
    colours = {str(g): charts.group_colour(i) for i, g in enumerate(by_group)}
    comps = [c for c in verdicts.comparisons({"disparities": {name: part}})]
    headline = _dimension_summary([c["status"] for c in comps])
    status = {"FLAG": "fail", "WITHIN": "pass"}.get(headline.value, "warn") if headline else NOT_RUN
    counts = {s.value: sum(c["status"] == s for c in comps) for s in verdicts.DisparityStatus}
    view = {
        "ran": True,
        "name": name,
        "status": status,
        "badge": verdicts.status_badge(headline) if headline else badge(NOT_RUN),
        "counts": counts,
        "reference": reference,
        "band": f"{band[0]:g}–{band[1]:g}",
        "alpha": setting(get(part, "alpha")) if finite(get(part, "alpha")) else None,
        "correction": get(part, "correction", default=MISSING),
        "n_groups": len(by_group),
        "overall_n": integer(get(groups, "overall", "n_prompts")),
        "forest": _ratio_forest(name, groups, metrics, reference, band, colours, ids),
        "group_tables": _group_tables(groups),
        "tests": _pairwise_tables(metrics, reference, band),
        "across": _across_rows(metrics),
        "flags": [
            {
                "metric": metric_label(c["metric"]),
                "group": c["group"],
                "status": c["status"].value,
                "badge": verdicts.status_badge(c["status"]),
                "ratio": triple(c["row"].get("ratio"), fixed),
                "pvalue_holm": pvalue(c["row"].get("pvalue_holm")),
            }
            for c in comps
            if c["status"] == verdicts.DisparityStatus.FLAG
        ],
        "warnings": [str(w) for w in (get(part, "warnings", default=[]) or [])],
        "drilldown": _guard(f"drill-down ({name})", _drilldown_view, name, get(part, "drilldown", default={}), ids, colours),
        "advice": _guard(f"recommendations ({name})", _advice_view, advice),
    }
    return view


def _ratio_forest(dimension, groups, metrics, reference, band, colours, ids) -> dict[str, Any] | None:
    """One chart per dimension: each group's ratio to the reference, one panel per metric."""
    shown = [m for m in FOREST_METRICS if get(metrics, m, "pairwise")]
    if not shown:
        return None
    by_group = get(groups, "by_group", default={})
    rows, described = [], []
    for group, entry in by_group.items():
        cells = []
        for metric in shown:
            row = get(metrics, metric, "pairwise", group)
            if str(group) == str(reference):
                cells.append(charts.RatioCell(1.0, None, None, "reference", "reference"))
                continue
            if not isinstance(row, Mapping):
                cells.append(charts.RatioCell(None, None, None, "INSUFFICIENT", "not compared"))
                continue
            status = verdicts.comparison_status(row, band)
            ratio = get(row, "ratio", default={})
            cells.append(
                charts.RatioCell(
                    get(ratio, "value"),
                    get(ratio, "ci_low"),
                    get(ratio, "ci_high"),
                    status.value,
                    with_ci(get(ratio, "value"), get(ratio, "ci_low"), get(ratio, "ci_high"), fmt=fixed),
                )
            )
            described.append(f"{group} {metric_label(metric)} {cells[-1].text} {status.value}")
        rows.append(charts.RatioRow(str(group), get(entry, "n_prompts"), colours.get(str(group), charts.OVERALL_COLOUR), cells))
    labels = [metric_label(m) for m in shown]
    counts = {}
    for row in rows:
        for cell in row.cells:
            counts[cell.status] = counts.get(cell.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "reference")
    desc = (
        f"Ratio of each {dimension} group to the reference group {reference} for {' and '.join(labels)}, log scale, with each "
        f"ratio's own 95% interval against the tolerance band {band[0]:g}–{band[1]:g}. Statuses: {summary}. " + "; ".join(described)
    )
    chart = charts.ratio_forest(
        rows,
        [label.capitalize() for label in labels],
        chart_id=ids("forest"),
        title=f"{', '.join(labels).capitalize()}: ratio to {reference}, by {dimension}",
        desc=desc,
        band=band,
    )
    return {
        "chart": chart,
        "desc": f"Each group's ratio to {reference} with its own 95% interval (log scale). Marker shape and "
        f"colour give the status: {summary}.",
    }


def _group_tables(groups: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-group tables, one per metric family (value over its interval in each cell)."""
    by_group = get(groups, "by_group", default={})
    present = list(
        dict.fromkeys(m for e in [get(groups, "overall", default={}), *by_group.values()] for m in (get(e, "metrics", default={}) or {}))
    )
    families = [(title, [m for m in members if m in present]) for title, members in METRIC_FAMILIES.items()]
    known = {m for _, members in families for m in members}
    families.append(("Other metrics", [m for m in present if m not in known]))
    entries = [("overall", True, get(groups, "overall", default={}))] + [(g, False, e) for g, e in by_group.items()]
    tables = []
    for title, metrics in families:
        if not metrics:
            continue
        rows = []
        for label, is_overall, entry in entries:
            cells = []
            for metric in metrics:
                block = get(entry, "metrics", metric, default={})
                value = get(block, "value")
                fmt, suffix = (fixed, "×") if metric == "speedup" else (num, "")
                cells.append(
                    {
                        "value": f"{fmt(value)}{suffix}" if finite(value) else MISSING,
                        "ci": f"[{fmt(get(block, 'ci_low'))}, {fmt(get(block, 'ci_high'))}]" if finite(get(block, "ci_low")) else "",
                    }
                )
            rows.append({"group": label, "is_overall": is_overall, "n_prompts": integer(get(entry, "n_prompts")), "cells": cells})
        tables.append({"title": title, "metrics": [metric_label(m) for m in metrics], "rows": rows})
    return tables


def _pairwise_tables(metrics: Mapping[str, Any], reference: str, band: tuple[float, float] = verdicts.DEFAULT_BAND) -> list[dict[str, Any]]:
    tables = []
    for metric, block in (metrics or {}).items():
        pairwise = get(block, "pairwise", default={})
        if not pairwise:
            continue
        fmt = fixed if metric == "speedup" else num
        rows = []
        for group, row in pairwise.items():
            status = verdicts.comparison_status(row, band)
            mdr_low, mdr_high = verdicts.detectable_ratios(row)
            rows.append(
                {
                    "group": group,
                    "n": f"{integer(row.get('n_prompts'))} vs {integer(row.get('n_reference_prompts'))}",
                    "ratio": triple(row.get("ratio"), fixed),
                    "difference": triple(row.get("difference"), fmt),
                    "pairs": integer(row.get("n_pairs")) if row.get("n_pairs") else MISSING,
                    "pvalue": pvalue(row.get("pvalue")),
                    "pvalue_holm": pvalue(row.get("pvalue_holm")),
                    "effect": num(row.get("effect_size"), 2),
                    "mdr": _detectable(mdr_low, mdr_high),
                    "small": bool(row.get("small_group")),
                    "status": status.value,
                    "badge": verdicts.status_badge(status),
                }
            )
        names = {str(row.get("effect_size_name", "")).replace("_", "-") for row in pairwise.values()} - {""}
        tests = {str(row.get("test", "")) for row in pairwise.values()} - {""}
        tables.append(
            {
                "metric": metric,
                "label": metric_label(metric),
                "reference": reference,
                "rows": rows,
                "effect_name": ", ".join(sorted(names)) or "effect size",
                "tests": ", ".join(TEST_NAMES.get(t, t) for t in sorted(tests)) or MISSING,
            }
        )
    return tables


TEST_NAMES = {"mannwhitneyu": "Mann–Whitney U", "wilcoxon": "Wilcoxon signed-rank (parallel prompts)"}


def _detectable(low: Any, high: Any) -> str:
    """The ratios the test would catch with 80% power; a bound at or below 0 means no drop is detectable."""
    below = f"<{fixed(low)}" if finite(low) and low > 0 else "no drop"
    above = f">{fixed(high)}" if finite(high) else MISSING
    return f"{below} or {above}"


def _across_rows(metrics: Mapping[str, Any]) -> list[dict[str, str]]:
    """Per metric: Kruskal–Wallis across all groups, and the max − min / min ÷ max summaries."""
    rows = []
    for metric, block in (metrics or {}).items():
        kw = get(block, "kruskal", default={})
        fmt = fixed if metric == "speedup" else num
        rows.append(
            {
                "metric": metric_label(metric),
                "statistic": num(get(kw, "statistic")),
                "pvalue": pvalue(get(kw, "pvalue")),
                "n_groups": integer(get(kw, "n_groups")),
                "n_prompts": integer(get(kw, "n_prompts")),
                "difference": triple(get(block, "difference", "between_groups"), fmt),
                "ratio": triple(get(block, "ratio", "between_groups"), fixed),
            }
        )
    return rows


def _drilldown_view(dimension: str, drill: Mapping[str, Any], ids: _Ids, colours: Mapping[str, str] | None = None) -> dict[str, Any]:
    if not drill:
        return {"ran": False, "reason": "no drill-down in this snapshot (needs per-step acceptance in the records)"}
    position_rows = [r for r in (drill.get("by_position") or []) if isinstance(r, Mapping)]
    rarity_rows = [r for r in (drill.get("by_rarity") or []) if isinstance(r, Mapping)]
    corrections = [r for r in (drill.get("corrections") or []) if isinstance(r, Mapping)]
    below = [r for r in (drill.get("below_threshold") or []) if isinstance(r, Mapping)]
    return {
        "ran": True,
        "rank_source": drill.get("rank_source", MISSING),
        "skipped_records": drill.get("skipped_records"),
        "position": _bars(dimension, position_rows, "position", "draft position", ids, lambda v: f"position {v}", colours or {}),
        "rarity": _bars(dimension, rarity_rows, "rank_bucket", "token rarity (frequency rank)", ids, lambda v: f"rank {v}", colours or {}),
        "corrections_note": drill.get("corrections_note"),
        "corrections": [
            {
                "group": r.get("group", MISSING),
                "token": visible(r.get("token", r.get("token_id", MISSING))),
                "token_id": r.get("token_id", MISSING),
                "n": integer(r.get("n_corrections")),
                "share": percent(r.get("share_of_group_corrections")),
                "rate": percent(r.get("correction_rate")),
                "prompt": r.get("example_prompt_id", MISSING),
                "context": visible(r.get("example_context", "")),
            }
            for r in corrections[:MAX_ROWS]
        ],
        "below": [
            {
                "group": r.get("group", MISSING),
                "metric": metric_label(r.get("metric", "")),
                "threshold": setting(r.get("threshold")),
                "share": f"{integer(r.get('n_below'))} of {integer(r.get('n_prompts'))} ({percent(r.get('share'))})",
                "ci": f"[{percent(r.get('ci_low'))}, {percent(r.get('ci_high'))}]" if finite(r.get("ci_low")) else MISSING,
                "lowest": [
                    {"id": str(p.get("prompt_id")), "value": num(p.get("value"))}
                    for p in (r.get("lowest_prompts") or [])
                    if isinstance(p, Mapping)
                ],
            }
            for r in below
        ],
    }


def _bars(dimension, rows, key, what, ids, name, colours) -> dict[str, Any] | None:
    rows = [r for r in rows if finite(r.get("value"))]
    if not rows:
        return None
    categories = list(dict.fromkeys(str(r.get(key)) for r in rows))
    groups = list(dict.fromkeys(str(r.get("group")) for r in rows))
    table = {(str(r.get("group")), str(r.get(key))): r for r in rows}
    # every group, in the dimension's order (so each keeps its colour), overall first
    ordered = (
        (["overall"] if "overall" in groups else [])
        + [g for g in colours if g in groups]
        + [g for g in groups if g != "overall" and g not in colours]
    )
    series = [
        charts.BarSeries(
            g,
            [get(table.get((g, c)), "value") for c in categories],
            [get(table.get((g, c)), "ci_low") for c in categories],
            [get(table.get((g, c)), "ci_high") for c in categories],
        )
        for g in ordered
    ]
    palette = [charts.OVERALL_COLOUR if g == "overall" else colours.get(g, charts.OVERALL_COLOUR) for g in ordered]
    chart = charts.small_multiples(
        categories,
        series,
        palette,
        chart_id=ids("bars"),
        axis_label=f"acceptance by {what}",
        title=f"Acceptance by {what}, {dimension}",
        desc=f"Share of drafted tokens accepted at each {what}, one panel per {dimension} group ({', '.join(ordered)}), with 95% "
        "intervals; the black tick in each panel is the value over all prompts. The table below lists every value.",
    )
    table_rows = [
        {
            "group": g,
            "cells": [
                with_ci(get(table.get((g, c)), "value"), get(table.get((g, c)), "ci_low"), get(table.get((g, c)), "ci_high"))
                + (f" (n={integer(get(table.get((g, c)), 'n_positions'))})" if (g, c) in table else "")
                for c in categories
            ],
        }
        for g in ordered
    ]
    return {"chart": chart, "categories": [name(c) for c in categories], "rows": table_rows, "note": ""}


def _advice_view(advice: Mapping[str, Any]) -> dict[str, Any]:
    if not advice:
        return {"ran": False, "reason": "no recommendations in this snapshot"}
    per_group = []
    for group, row in (get(advice, "by_group", default={}) or {}).items():
        per_group.append(
            {
                "group": group,
                "k": row.get("k", MISSING),
                "alpha": f"{num(row.get('alpha'))} ({str(row.get('alpha_source', '')).replace('_', ' ')})",
                "cost": num(row.get("cost_ratio")),
                "expected": fixed(row.get("expected_speedup")) + "×" if finite(row.get("expected_speedup")) else MISSING,
                "measured": triple(row.get("measured_speedup"), fixed, "×"),
                "best_k": f"{row.get('best_k', MISSING)} ({fixed(row.get('best_k_expected_speedup'))}×)",
                "slowed": "yes (interval below 1)" if row.get("slowed_down_significantly") else ("yes" if row.get("slowed_down") else "no"),
                "is_slowed": bool(row.get("slowed_down")),
            }
        )
    fallback = get(advice, "fallback", default={})
    fallback_rows = []
    for group, row in [*(get(fallback, "by_group", default={}) or {}).items(), ("overall", get(fallback, "overall", default={}))]:
        if not row:
            continue
        fallback_rows.append(
            {
                "group": group,
                "is_overall": group == "overall",
                "routed": f"{integer(row.get('n_routed'))} of {integer(row.get('n_paired_prompts'))} ({percent(row.get('share_routed'))})",
                "speedup": f"{fixed(row.get('speedup_before'))}× → {fixed(row.get('speedup_after'))}×",
                "ratio": f"{fixed(row.get('ratio_to_reference_before'))} → {fixed(row.get('ratio_to_reference_after'))}",
            }
        )
    sweep = [
        {
            "threshold": setting(s.get("threshold")),
            "speedup": fixed(s.get("overall_speedup")) + "×" if finite(s.get("overall_speedup")) else MISSING,
            "routed": percent(s.get("share_routed")),
            "ratio": fixed(s.get("min_max_speedup_ratio")),
        }
        for s in (get(fallback, "sweep", default=[]) or [])
        if isinstance(s, Mapping)
    ]
    return {
        "ran": True,
        "model": advice.get("model", MISSING),
        "per_group": per_group,
        "fallback": {
            "rule": get(fallback, "rule", default=MISSING),
            "threshold": setting(get(fallback, "threshold")),
            "oracle": bool(get(fallback, "oracle")),
            "reference": get(fallback, "reference", default="overall"),
            "rows": fallback_rows,
            "sweep": sweep,
            "ratio": f"{fixed(get(fallback, 'min_max_speedup_ratio_before'))} → {fixed(get(fallback, 'min_max_speedup_ratio_after'))}",
        }
        if fallback
        else None,
        "messages": [str(m) for m in (advice.get("messages") or [])],
    }


# ============================================================================ gate
def _gate_view(gate: Any) -> dict[str, Any]:
    if not isinstance(gate, Mapping) or not isinstance(gate.get("checks"), list):
        return {
            "ran": False,
            "status": NOT_RUN,
            "badge": badge(NOT_RUN),
            "checks": [],
            "reason": "the gate has not judged this snapshot (run `specaudit gate SNAPSHOT --write`, or `specaudit audit`)",
        }
    checks = [
        {
            "name": c.get("name", MISSING),
            "title": c.get("title", c.get("name", MISSING)),
            "status": c.get("status"),
            "badge": badge(c.get("status")),
            "message": c.get("message", ""),
        }
        for c in gate["checks"]
        if isinstance(c, Mapping)
    ]
    thresholds = gate.get("thresholds") if isinstance(gate.get("thresholds"), Mapping) else {}
    return {
        "ran": True,
        "status": gate.get("status", NOT_RUN),
        "badge": badge(gate.get("status")),
        "checks": checks,
        "counts": {s: sum(c["status"] == s for c in checks) for s in ("pass", "warn", "fail")},
        "thresholds": [
            {"name": k, "value": ("analysis value" if v is None else ", ".join(map(str, v)) if isinstance(v, list) else str(v))}
            for k, v in thresholds.items()
        ],
    }


# ============================================================================ reproducibility
def _repro_view(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    run = get(snapshot, "run", default={})
    if not run:
        return {"ran": False, "reason": "the snapshot has no run section"}
    models = []
    for role in ("target", "draft"):
        model = get(run, "models", role)
        if not isinstance(model, Mapping):
            continue
        hashes = model.get("sha256")
        hash_rows = [f"{k}: {v}" for k, v in hashes.items()] if isinstance(hashes, Mapping) else ([str(hashes)] if hashes else [])
        models.append(
            {
                "role": role,
                "name": model.get("name", MISSING),
                "class": model.get("class", MISSING),
                "parameters": integer(model.get("parameters")),
                "revision": model.get("revision"),
                "hashes": hash_rows or [model.get("revision") or MISSING],
                "derived": model.get("derived") or model.get("kind"),
            }
        )
    prompt_set = get(run, "prompt_set", default={})
    seeds = get(run, "seeds", default={})
    analysis = get(run, "analysis", default={})
    config = get(run, "config", default={})
    return {
        "ran": True,
        "command": get(run, "command", default=MISSING),
        "models": models,
        "model_extra": {k: v for k, v in (get(run, "models", default={}) or {}).items() if k not in ("target", "draft")},
        "versions": get(run, "versions", default={}) or {},
        "device": get(run, "device"),
        "device_text": _device_text(get(run, "device"), get(run, "models")),
        "seeds": seeds if isinstance(seeds, Mapping) else {"run": seeds},
        "prompt_set": {
            "name": prompt_set.get("name", MISSING),
            "version": prompt_set.get("version", MISSING),
            "checksum": prompt_set.get("checksum", MISSING),
            "source": prompt_set.get("source", MISSING),
            "n_prompts": integer(prompt_set.get("n_prompts")),
        }
        if isinstance(prompt_set, Mapping)
        else {},
        "config": {k: _plain(v) for k, v in config.items()} if isinstance(config, Mapping) else {},
        "analysis": {k: _plain(v) for k, v in analysis.items()} if isinstance(analysis, Mapping) else {},
        "schema_version": snapshot.get("schema_version", MISSING),
        "created": get(run, "created", default=MISSING),
        "dir": get(run, "dir", default=MISSING),
    }


def _plain(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


# ============================================================================ summary
def _summary_view(view: dict[str, Any], snapshot: Mapping[str, Any]) -> dict[str, Any]:
    eq, disp, gate = view["equivalence"], view["disparity"], view["gate"]
    engines = [(e["name"], e["status"]) for e in eq.get("engines", []) if not e["is_control"]] if eq.get("ran") else []
    comps = verdicts.comparisons(snapshot)
    speed = verdicts.speed_summary(snapshot)
    badges = [
        {"label": "Equivalence", "badge": eq.get("badge", badge(NOT_RUN)), "anchor": "equivalence", "line": _equivalence_line(eq)},
        {"label": "Disparity", "badge": disp.get("badge", badge(NOT_RUN)), "anchor": "disparity", "line": _disparity_line(disp)},
        {"label": "Gate", "badge": gate.get("badge", badge(NOT_RUN)), "anchor": "gate", "line": _gate_line(gate)},
    ]
    return {
        "ran": True,
        "badges": badges,
        "headline": _headline(eq, disp, snapshot),
        "decision": verdicts.decide(snapshot, engines, comps, speed),
        "cards": [_correctness_card(eq, engines), _fairness_card(comps, disp), _speed_card(speed)],
        "subject": verdicts.subject(snapshot),
        "actions": verdicts.actions(snapshot, engines, comps, speed, eq),
    }


def _correctness_card(eq: dict[str, Any], engines: list) -> dict[str, Any]:
    if not eq.get("ran"):
        return {
            "label": "Correctness",
            "anchor": "equivalence",
            "badge": verdicts.status_badge(verdicts.EquivalenceStatus.NOT_RUN),
            "lines": [eq.get("reason", "not run")],
        }
    order = [
        verdicts.EquivalenceStatus.VIOLATION,
        verdicts.EquivalenceStatus.NOT_RUN,
        verdicts.EquivalenceStatus.NO_VIOLATION_FOUND,
        verdicts.EquivalenceStatus.EQUIVALENT,
    ]
    worst_status = min((s for _, s in engines), key=order.index, default=verdicts.EquivalenceStatus.NOT_RUN)
    lines = []
    for e in eq["engines"]:
        if e["is_control"]:
            lines.append(
                f"Control ({e['name']}): {e['badge']['text']}"
                + (
                    f": {eq['warning'].split(': a correct')[0]}"
                    if eq.get("warning")
                    else " (plain decoding passes the same tests, so the audit can be trusted)"
                    if e["badge"]["key"] == "pass"
                    else ""
                )
            )
            continue
        if e["mode"] == "greedy":
            lines.append(f"{e['name']}: greedy output equals vanilla on {e['n_matches']} of {e['n_pairs']} prompts ({e['match_rate']}).")
            continue
        text = f"{e['name']}: {e['status'].value} in {e['n_tokens']} tokens (smallest Holm-adjusted p = {e['battery_p']})"
        if e["tv"].get("ran"):
            text += f"; TV upper bound {e['tv']['upper']} against δ = {e['tv']['delta']}: {e['tv']['verdict']}"
        pit = next((p for p in e["power"] if p["label"].startswith("PIT")), None)
        if pit:
            text += f"; a PIT distortion of {pit['value']} or more would have been found (80% power)"
        lines.append(text + ".")
    return {"label": "Correctness", "anchor": "equivalence", "badge": verdicts.status_badge(worst_status), "lines": lines}


def _fairness_card(comps: list[dict[str, Any]], disp: dict[str, Any]) -> dict[str, Any]:
    if not comps:
        return {"label": "Fairness", "anchor": "disparity", "badge": badge(NOT_RUN), "lines": [disp.get("reason", "no group comparisons")]}
    headline = _dimension_summary([c["status"] for c in comps])
    counts = {s: sum(c["status"] == s for c in comps) for s in verdicts.DisparityStatus}
    groups = {(c["dimension"], c["group"]) for c in comps}
    dims = {c["dimension"] for c in comps}
    sizes = [c["n_prompts"] for c in comps if finite(c.get("n_prompts"))]
    lows = [c["mdr_low"] for c in comps if c["mdr_low"] is not None]
    lines = [
        f"{len(comps)} comparisons of {len(groups)} groups with their reference in {len(dims)} dimension(s): "
        + ", ".join(f"{counts[s]} {s.value}" for s in verdicts.DisparityStatus)
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
    flagged = sorted({f"{c['dimension']}={c['group']}" for c in comps if c["status"] == verdicts.DisparityStatus.FLAG})
    if flagged:
        lines.append("Outside the band: " + ", ".join(flagged) + ".")
    return {"label": "Fairness", "anchor": "disparity", "badge": verdicts.status_badge(headline), "lines": lines}


def _speed_chart(snapshot: Mapping[str, Any], ids: _Ids) -> Any:
    """Every group's measured speed-up against vanilla (not a ratio to a reference group): the
    decisive fact when speculation slows groups down."""
    rows, described = [], []
    for dimension, part in (get(snapshot, "groups", default={}) or {}).items():
        if not isinstance(part, Mapping):
            continue
        for index, (group, entry) in enumerate((get(part, "by_group", default={}) or {}).items()):
            block = get(entry, "metrics", "speedup")
            if not isinstance(block, Mapping) or not finite(block.get("value")):
                continue
            low, high = block.get("ci_low"), block.get("ci_high")
            status = "SLOWER" if finite(high) and high < 1 else "FASTER" if finite(low) and low > 1 else "UNCLEAR"
            text = triple(block, fixed, "×")
            rows.append(
                charts.RatioRow(
                    f"{dimension}={group}",
                    get(entry, "n_prompts"),
                    charts.group_colour(index),
                    [charts.RatioCell(block["value"], low, high, status, text)],
                )
            )
            described.append(f"{dimension}={group} {text} {status}")
    if not rows:
        return None
    counts = {s: sum(r.cells[0].status == s for r in rows) for s in ("SLOWER", "UNCLEAR", "FASTER")}
    desc = (
        f"Measured speed-up of speculative over vanilla decoding for each of {len(rows)} groups, log scale, with 95% intervals; "
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


def _speed_card(speed: dict[str, Any]) -> dict[str, Any]:
    if not speed["ran"]:
        return {
            "label": "Speed",
            "anchor": "speed",
            "badge": badge(NOT_RUN),
            "lines": ["no speed-up measured (needs the vanilla engine)"],
            "conditions": speed["conditions"],
        }
    shown = (
        {"text": "SLOWER", "css": "fail", "symbol": "▼", "key": "slower"}
        if speed["below_one"]
        else {"text": "FASTER", "css": "pass", "symbol": "▲", "key": "faster"}
        if speed["above_one"]
        else {"text": "UNCLEAR", "css": "warn", "symbol": "?", "key": "unclear"}
    )
    lines = [
        f"Overall speed-up {speed['overall']} over {speed['overall_scope']}.",
        (
            f"{len(speed['slower'])} of {speed['n_groups']} groups run slower than vanilla "
            f"({len(speed['slower_sig'])} with the whole interval below 1×); range {speed['range']}."
        ),
    ]
    return {"label": "Speed", "anchor": "speed", "badge": shown, "lines": lines, "conditions": speed["conditions"]}


# ============================================================================ compare
def _compare_view(snapshot: Mapping[str, Any], other: Mapping[str, Any], label: str) -> dict[str, Any]:
    """Per group and metric, what changed against another run: the monitor's drift tests."""
    from specaudit.monitor import compare_snapshots

    result = compare_snapshots(snapshot, other)
    words = {"PASS": ("NO SIGNIFICANT CHANGE", "none", "="), "WARN": ("CHANGED", "warn", "!"), "FAIL": ("WORSE", "fail", "✗")}
    rows, notes = [], []
    for check in result.checks:
        text, css, symbol = words.get(check.status, (check.status, "none", "–"))
        if check.kind == "drift":
            rows.append(
                {
                    "dimension": check.dimension or MISSING,
                    "group": check.group or MISSING,
                    "metric": metric_label(check.metric or ""),
                    "badge": {"text": text, "css": css, "symbol": symbol, "key": check.status.lower()},
                    "message": check.message,
                }
            )
        else:
            notes.append({"badge": badge(check.status.lower()), "subject": check.subject, "message": check.message})
    counts = {s: sum(c.status == s for c in result.checks if c.kind == "drift") for s in ("PASS", "WARN", "FAIL")}
    return {
        "ran": True,
        "label": label or get(other, "run", "id", default="the other run"),
        "rows": rows,
        "notes": notes,
        "counts": counts,
        "status": result.status,
        "other_id": get(other, "run", "id", default=MISSING),
    }


def _equivalence_line(eq: dict[str, Any]) -> str:
    if not eq.get("ran"):
        return eq.get("reason", "not run")
    audited = [e for e in eq.get("engines", []) if not e["is_control"]]
    if eq["status"] == "error":
        return eq.get("message") or "the vanilla control failed: the audit cannot be trusted"
    failing = [e["name"] for e in audited if e["badge"]["key"] == "fail"]
    if failing:
        return f"{', '.join(failing)}: output is NOT distributed as the target's"
    if eq["mode"] == "greedy":
        return "greedy output matches vanilla (divergences, if any, are floating-point near-ties)"
    return (
        f"no test rejects that {', '.join(e['name'] for e in audited) or 'the engines'} sample exactly from the target "
        f"(α = {eq.get('alpha')}, Holm-corrected); not rejected is not proven: see the TV bound"
    )


def _disparity_line(disp: dict[str, Any]) -> str:
    if not disp.get("ran"):
        return disp.get("reason", "not run")
    parts = []
    for d in disp["dimensions"]:
        if not d.get("ran"):
            parts.append(f"{d.get('name')}: {d.get('reason', 'not run')}")
            continue
        counts = ", ".join(f"{n} {s}" for s, n in d.get("counts", {}).items() if n)
        parts.append(f"{d['name']}: {counts or 'no comparisons'}")
    return "; ".join(parts)


def _gate_line(gate: dict[str, Any]) -> str:
    if not gate.get("ran"):
        return gate.get("reason", "not run")
    c = gate["counts"]
    return f"{c['pass']} pass, {c['warn']} warn, {c['fail']} fail"


def _headline(eq: dict[str, Any], disp: dict[str, Any], snapshot: Mapping[str, Any]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for engine in eq.get("engines", []) if eq.get("ran") else []:
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
        if tv.get("ran"):
            rows.append(
                {
                    "what": f"TV distance upper bound (first token), {engine['name']}",
                    "value": tv["upper"],
                    "note": f"margin δ = {tv['delta']}: {tv['verdict']}",
                }
            )
        pit = next((p for p in engine["power"] if p["label"].startswith("PIT")), None)
        if pit:
            rows.append(
                {
                    "what": f"smallest PIT distortion detectable (80% power), {engine['name']}",
                    "value": pit["value"],
                    "note": "distortions smaller than this could pass unseen",
                }
            )
    groups = get(snapshot, "groups", default={})
    for d in disp.get("dimensions", []) if disp.get("ran") else []:
        name = d.get("name")
        dim = get(groups, name, default={})
        overall = get(dim, "overall", "metrics", default={})
        n = integer(get(dim, "overall", "n_prompts"))
        if get(overall, "acceptance_rate"):
            rows.append(
                {"what": f"acceptance rate, all prompts ({name})", "value": triple(get(overall, "acceptance_rate")), "note": f"{n} prompts"}
            )
        if get(overall, "speedup"):
            rows.append(
                {
                    "what": f"speed-up, all prompts ({name})",
                    "value": triple(get(overall, "speedup"), fixed, "×"),
                    "note": f"{n} prompts, paired vanilla vs speculative",
                }
            )
        for metric in FOREST_METRICS:
            lowest = _lowest_group(get(dim, "by_group", default={}), metric)
            if lowest:
                group, block, size = lowest
                rows.append(
                    {
                        "what": f"lowest {metric_label(metric)}: {name}={group}",
                        "value": triple(block, fixed, "×") if metric == "speedup" else triple(block),
                        "note": f"{size} prompts; reference {d.get('reference')}",
                    }
                )
    return rows


def _lowest_group(by_group: Mapping[str, Any], metric: str):
    candidates = [(g, get(e, "metrics", metric), get(e, "n_prompts")) for g, e in (by_group or {}).items()]
    candidates = [(g, b, n) for g, b, n in candidates if finite(get(b, "value"))]
    if len(candidates) < 2:
        return None
    group, block, n = min(candidates, key=lambda c: c[1]["value"])
    return group, block, integer(n)


__all__ = ["build_view"]
