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
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from specaudit.contracts import CheckStatus
from specaudit.contracts.snapshot import (
    AnalysisBlock,
    DeviceInfo,
    GateSection,
    ModelInfo,
    ModelsBlock,
    PromptSetInfo,
    RunConfigBlock,
    RunSection,
    Snapshot,
    read_snapshot,
)
from specaudit.decoding._shapes import describe_steps
from specaudit.report.view.base import NOT_RUN, Ids, guard
from specaudit.report.view.concurrency import concurrency_view
from specaudit.report.view.context import context_view
from specaudit.report.view.disparity import disparity_view
from specaudit.report.view.equivalence import equivalence_view
from specaudit.report.view.format import (
    MISSING,
    badge,
    finite,
    integer,
    metric_label,
    recorded,
    setting,
)
from specaudit.report.view.glossary import Terms, glossary_rows, group_names
from specaudit.report.view.mitigation import mitigation_view
from specaudit.report.view.prefix_cache import prefix_cache_view
from specaudit.report.view.shapes import shapes_view
from specaudit.report.view.subject import model_hash
from specaudit.report.view.summary import speed_chart, summary_view


def build_view(
    snapshot: Snapshot | Mapping[str, Any] | str | Path,
    compare: Snapshot | Mapping[str, Any] | str | Path | None = None,
    compare_label: str = "",
) -> dict[str, Any]:
    """The view of a snapshot (a Snapshot, or a mapping or path validated into one: InputError if
    it breaks the contract); with `compare`, another run's snapshot to show what changed."""
    snapshot = read_snapshot(snapshot)
    compare = read_snapshot(compare) if compare is not None else None
    ids = Ids()
    run = guard("run", _run_view, snapshot.run)
    samples = (snapshot.run.config or RunConfigBlock()).samples
    equivalence = guard("equivalence", equivalence_view, snapshot.equivalence, ids, samples)
    disparity = guard("disparity", disparity_view, snapshot, ids)
    gate = guard("gate", _gate_view, snapshot.gate, snapshot.run.analysis)
    view = {
        "schema_version": snapshot.schema_version,
        "run": run,
        "equivalence": equivalence,
        "disparity": disparity,
        "gate": gate,
        "reproducibility": guard("reproducibility", _repro_view, snapshot),
    }
    view["summary"] = guard("summary", summary_view, view, snapshot)
    view["speed_chart"] = guard("speed chart", lambda: {"chart": speed_chart(snapshot, ids)})
    view["context"] = guard("long context", context_view, snapshot.context)
    view["shapes"] = guard("shapes", shapes_view, snapshot.shapes)
    view["mitigation"] = guard("before/after mitigation", mitigation_view, snapshot)
    view["concurrency"] = guard("concurrency", concurrency_view, snapshot, ids)
    view["prefix_cache"] = guard("prefix cache", prefix_cache_view, snapshot)
    view["compare"] = guard("comparison", _compare_view, snapshot, compare, compare_label) if compare is not None else {"ran": False}
    view["terms"] = Terms()
    view["glossary"] = glossary_rows()
    view["group_names"] = group_names(snapshot.run)
    return view


# ============================================================================ run / header
def _run_view(run: RunSection) -> dict[str, Any]:
    config = run.config or RunConfigBlock()
    models = run.models or ModelsBlock()
    prompt_set = run.prompt_set or PromptSetInfo()
    temperature = config.temperature
    sampling = (
        "greedy"
        if temperature == 0
        else (
            f"T = {setting(temperature)}"
            + (f", top-k {config.top_k}" if config.top_k else "")
            + (f", top-p {setting(config.top_p)}" if finite(config.top_p) and config.top_p < 1 else "")
            if finite(temperature)
            else MISSING
        )
    )
    target = (models.target or ModelInfo()).name or config.target or MISSING
    draft = (models.draft or ModelInfo()).name or config.draft or MISSING
    if (models.speculative or ModelInfo()).url:  # a live endpoint pair: the servers are the models audited
        vanilla, speculative = models.vanilla or ModelInfo(), models.speculative or ModelInfo()
        target = f"{vanilla.model} at {vanilla.url} (speculation off)"
        draft = f"{speculative.model} at {speculative.url} (speculation on)"
    return {
        "ran": True,
        "id": run.id or "unnamed run",
        "created": run.created or MISSING,
        "target": target,
        "draft": draft,
        "engines": ", ".join(map(str, run.engines)) or MISSING,
        "disparity_engine": run.disparity_engine or MISSING,
        "n_prompts": integer(run.n_prompts),
        "n_records": integer(run.n_records),
        "n_output_tokens": integer(run.n_output_tokens),
        "dimensions": ", ".join(map(str, run.dimensions)) or MISSING,
        "sampling": sampling,
        "steps": describe_steps(config.as_written()),  # what each speculative engine offered per step
        "samples": recorded(config.samples),
        "max_new_tokens": recorded(config.max_new_tokens),
        "prompt_set": f"{prompt_set.written('name', MISSING)} v{prompt_set.written('version', '?')}",
        "device": _device_text(run.device, models),
    }


def _device_text(device: DeviceInfo | None, models: ModelsBlock) -> str:
    text = ""
    if device is not None:
        parts = [str(device.written("type", "")), str(device.written("name", ""))]
        if device.threads:
            parts.append(f"{device.threads} threads")
        text = ", ".join(p for p in parts if p)
    return (f"{text} ({models.dtype})" if models.dtype else text) or MISSING


# ============================================================================ gate
def _threshold_value(name: str, value: Any, analysis: AnalysisBlock) -> str:
    """A gate threshold as set, or where the gate takes it from the analysis (None), the analysis's value."""
    if value is None:
        band = analysis.tolerance
        taken = {
            "alpha": analysis.alpha,
            "tv_delta": analysis.delta,
            "band_low": band[0] if band else None,
            "band_high": band[1] if band else None,
        }.get(name)
        if name == "disparity_metrics":
            return "each dimension's gated metrics (the analysis's)"
        return f"{taken:g} (the analysis's)" if finite(taken) else "the analysis's (not recorded)"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _gate_view(gate: GateSection | None, analysis: AnalysisBlock | None) -> dict[str, Any]:
    if gate is None:
        return {
            "ran": False,
            "status": NOT_RUN,
            "badge": badge(NOT_RUN),
            "checks": [],
            "reason": "the gate has not judged this snapshot (run `specaudit gate SNAPSHOT --write`, or `specaudit audit`)",
        }
    checks = [
        {
            "name": c.name or MISSING,
            "title": c.title or c.name or MISSING,
            "status": c.status,
            "badge": badge(c.status),
            "message": c.message or "",
        }
        for c in gate.checks
    ]
    return {
        "ran": True,
        "status": gate.status,
        "badge": badge(gate.status),
        "checks": checks,
        "counts": {s.lower(): sum(c["status"] is s for c in checks) for s in CheckStatus},
        "thresholds": [
            {"name": k, "value": _threshold_value(k, v, analysis or AnalysisBlock())}
            for k, v in (gate.thresholds.model_dump(exclude_unset=True) if gate.thresholds is not None else {}).items()
        ],
    }


# ============================================================================ reproducibility
def _repro_view(snapshot: Snapshot) -> dict[str, Any]:
    run = snapshot.run
    if not run.model_fields_set:
        return {"ran": False, "reason": "the snapshot's run section is empty"}
    block, config = run.models or ModelsBlock(), run.config or RunConfigBlock()
    models = []
    for role, model, configured in (("target", block.target, config.target), ("draft", block.draft, config.draft)):
        if model is None:
            continue
        hash_rows = [f"{k}: {v}" for k, v in (model.sha256 or {}).items()]
        derived = model.derived
        name = model.name or (f"{derived} of {model.from_ or 'the target'}" if derived else configured)
        # only what the run recorded: a derived draft has no class or parameter count of its own
        text = [f"<code>{escape(str(name or MISSING))}</code>"]
        text += [escape(model.class_)] if model.class_ else []
        text += [f"{integer(model.parameters)} parameters"] if model.parameters else []
        text += [escape(derived)] if derived and model.name else []
        hash_text = hash_rows or ([model_hash(model)] if model_hash(model) != "not recorded" else [])
        if not hash_text and derived:
            hash_text = [f"derived in process from the target ({derived}): the target's hash identifies it"]
        models.append(
            {
                "role": role,
                "summary": Markup(" · ".join(text)),
                "hashes": hash_text or [model.revision or "no hash recorded by the engine"],
            }
        )
    prompt_set = run.prompt_set or PromptSetInfo()
    analysis = run.analysis.model_dump(exclude_unset=True) if run.analysis is not None else {}
    return {
        "ran": True,
        "command": run.command or MISSING,
        "models": models,
        "model_extra": {k: v for k, v in block.model_dump(exclude_unset=True).items() if k not in ("target", "draft")},
        "versions": run.versions.model_dump(exclude_unset=True) if run.versions is not None else {},
        "device_text": _device_text(run.device, block),
        "seeds": run.seeds.model_dump(exclude_unset=True) if run.seeds is not None else {},
        "prompt_set": {
            "name": prompt_set.written("name", MISSING),
            "version": prompt_set.written("version", MISSING),
            "checksum": prompt_set.written("checksum", MISSING),
            "source": prompt_set.written("source", MISSING),
            "n_prompts": integer(prompt_set.n_prompts),
        },
        "config": {k: _plain(v) for k, v in config.as_written().items()},
        "analysis": {k: _plain(v) for k, v in analysis.items()},
        "schema_version": snapshot.schema_version,
        "created": run.created or MISSING,
        "dir": run.dir or MISSING,
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
def _compare_view(snapshot: Snapshot, other: Snapshot, label: str) -> dict[str, Any]:
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
        text, css, symbol = words[check.status]
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
        "label": label or other.run.id or "the other run",
        "rows": rows,
        "notes": notes,
        "counts": counts,
        "status": result.status,
        "other_id": other.run.id or MISSING,
    }


__all__ = ["build_view"]
