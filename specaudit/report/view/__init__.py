"""snapshot.json → the view the templates lay out.

All judgement about what a section shows (and whether it ran) lives here, in Python, so the
templates stay layout only and summary.md says exactly what the HTML says. Every section is
built under a guard: a snapshot part with an unexpected shape turns into a visible note on that
section instead of a crash of the whole report. The sections live beside this module
(equivalence.py, disparity.py, summary.py, mitigation.py; shared parts in base.py, format.py,
statuses.py, verdicts.py, subject.py, glossary.py); this one assembles them and builds the run header, the gate, reproducibility and the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape

from specaudit.contracts import CheckStatus
from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.report.view.base import NOT_RUN, Ids, guard
from specaudit.report.view.concurrency import concurrency_view
from specaudit.report.view.context import context_view
from specaudit.report.view.disparity import disparity_view
from specaudit.report.view.equivalence import equivalence_view
from specaudit.report.view.format import (
    MISSING,
    badge,
    finite,
    get,
    integer,
    is_status,
    metric_label,
    setting,
)
from specaudit.report.view.glossary import Terms, glossary_rows, group_names
from specaudit.report.view.mitigation import mitigation_view
from specaudit.report.view.shapes import shapes_view
from specaudit.report.view.subject import model_hash
from specaudit.report.view.summary import speed_chart, summary_view


def build_view(snapshot: Mapping[str, Any], compare: Mapping[str, Any] | None = None, compare_label: str = "") -> dict[str, Any]:
    ids = Ids()
    snapshot = snapshot if isinstance(snapshot, Mapping) else {}
    run = guard("run", _run_view, snapshot)
    samples = get(snapshot, "run", "config", "samples")
    equivalence = guard("equivalence", equivalence_view, get(snapshot, "equivalence", default={}), ids, samples)
    disparity = guard("disparity", disparity_view, snapshot, ids)
    gate = guard("gate", _gate_view, snapshot.get("gate"), get(snapshot, "run", "analysis", default={}))
    view = {
        "schema_version": snapshot.get("schema_version"),
        "run": run,
        "equivalence": equivalence,
        "disparity": disparity,
        "gate": gate,
        "reproducibility": guard("reproducibility", _repro_view, snapshot),
    }
    view["summary"] = guard("summary", summary_view, view, snapshot)
    view["speed_chart"] = guard("speed chart", lambda: {"chart": speed_chart(snapshot, ids)})
    view["context"] = guard("long context", context_view, snapshot)
    view["shapes"] = guard("shapes", shapes_view, snapshot)
    view["mitigation"] = guard("before/after mitigation", mitigation_view, snapshot)
    view["concurrency"] = guard("concurrency", concurrency_view, snapshot, ids)
    view["compare"] = guard("comparison", _compare_view, snapshot, compare, compare_label) if compare is not None else {"ran": False}
    view["terms"] = Terms()
    view["glossary"] = glossary_rows()
    view["group_names"] = group_names(snapshot)
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
    if get(models, SPECULATIVE_ENGINE, "url"):  # a live endpoint pair: the servers are the models audited
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


# ============================================================================ gate
def _threshold_value(name: str, value: Any, analysis: Mapping[str, Any]) -> str:
    """A gate threshold as set, or where the gate takes it from the analysis (None), the analysis's value."""
    if value is None:
        band = analysis.get("tolerance") if isinstance(analysis.get("tolerance"), list) else None
        taken = {
            "alpha": analysis.get("alpha"),
            "tv_delta": analysis.get("delta"),
            "band_low": band[0] if band else None,
            "band_high": band[1] if band else None,
        }.get(name)
        if name == "disparity_metrics":
            return "each dimension's gated metrics (the analysis's)"
        return f"{taken:g} (the analysis's)" if finite(taken) else "the analysis's (not recorded)"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _gate_view(gate: Any, analysis: Mapping[str, Any] | None = None) -> dict[str, Any]:
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
        "counts": {s.lower(): sum(is_status(c["status"], s) for c in checks) for s in CheckStatus},
        "thresholds": [
            {"name": k, "value": _threshold_value(k, v, analysis if isinstance(analysis, Mapping) else {})} for k, v in thresholds.items()
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
        derived = model.get("derived") or model.get("kind")
        name = model.get("name") or (f"{derived} of {model.get('from') or 'the target'}" if derived else get(run, "config", role))
        # only what the run recorded: a derived draft has no class or parameter count of its own
        text = [f"<code>{escape(str(name or MISSING))}</code>"]
        text += [escape(str(model["class"]))] if model.get("class") else []
        text += [f"{integer(model['parameters'])} parameters"] if model.get("parameters") else []
        text += [escape(str(derived))] if derived and model.get("name") else []
        hash_text = hash_rows or ([model_hash(model)] if model_hash(model) != "not recorded" else [])
        if not hash_text and derived:
            hash_text = [f"derived in process from the target ({derived}): the target's hash identifies it"]
        models.append(
            {
                "role": role,
                "name": name or MISSING,
                "summary": Markup(" · ".join(text)),
                "class": model.get("class", MISSING),
                "parameters": integer(model.get("parameters")),
                "revision": model.get("revision"),
                "hashes": hash_text or [model.get("revision") or "no hash recorded by the engine"],
                "derived": derived,
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


# ============================================================================ compare
def _compare_view(snapshot: Mapping[str, Any], other: Mapping[str, Any], label: str) -> dict[str, Any]:
    """Per group and metric, what changed against another run: the monitor's drift tests."""
    from specaudit.monitor import compare_snapshots

    result = compare_snapshots(snapshot, other)
    words = {
        CheckStatus.PASS: ("NO SIGNIFICANT CHANGE", "none", "="),
        CheckStatus.WARN: ("CHANGED", "warn", "!"),
        CheckStatus.FAIL: ("WORSE", "fail", "✗"),
    }
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
    counts = {s: sum(c.status == s for c in result.checks if c.kind == "drift") for s in CheckStatus}
    return {
        "ran": True,
        "label": label or get(other, "run", "id", default="the other run"),
        "rows": rows,
        "notes": notes,
        "counts": counts,
        "status": result.status,
        "other_id": get(other, "run", "id", default=MISSING),
    }


__all__ = ["build_view"]
