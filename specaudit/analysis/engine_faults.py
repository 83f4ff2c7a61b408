"""The snapshot's `engine_faults` section: the engine calls that failed during the run
(faults.jsonl, written by the run loop: specaudit.execution.faults), counted per engine with the
first message, and whether each speculative engine still drafted after the first fault.

Faults are not records, so no statistic reads them; they are counted here. An engine that failed
and then kept answering may answer differently: the section asks of each engine that drafts
whether, from some record after the first fault on, it drafted nothing at all (the served audit's
"stopped during the run" check, analysis.acceptance_stability.stopped_drafting, applied to every
engine, in the order the records were written).
"""

from __future__ import annotations

from typing import Any

from specaudit.analysis.acceptance_stability import MIN_STOPPED, stopped_drafting
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, Fault
from specaudit.contracts.snapshot import EngineFaultsSection
from specaudit.contracts.status import CheckStatus


def _speculation_after(records: list[dict], first_at: int) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Per drafting engine: records and how many drafted, before and after the first fault, and a
    finding where it stopped drafting after it."""
    parts, findings = {}, []
    # Engines that report drafts (a `proposed` count), whether or not any record drafted: an engine
    # that fails on its first call and never drafts afterwards is the case this check exists for.
    drafting = sorted(
        {r["engine"] for r in records if r["engine"] not in (CONTROL_ENGINE, SCREEN_ENGINE) and r.get("proposed") is not None}
    )
    for engine in drafting:
        ordered = [(index, r) for index, r in enumerate(records) if r["engine"] == engine and not r.get("timing_only")]
        before = [r for index, r in ordered if index < first_at]
        after = [r for index, r in ordered if index >= first_at]
        entry: dict[str, Any] = {
            "records_before": len(before),
            "drafted_before": sum((r.get("proposed") or 0) > 0 for r in before),
            "records_after": len(after),
            "drafted_after": sum((r.get("proposed") or 0) > 0 for r in after),
        }
        stop = stopped_drafting([r for _, r in ordered])
        if stop is not None and stop["request"] - 1 >= len(before):
            entry["stopped"] = True
            findings.append(
                {
                    "kind": "stopped_after_fault",
                    "engine": engine,
                    **stop,
                    "message": (
                        f"{engine} stopped drafting after the first engine fault: none of its last {stop['stopped']} records "
                        f"(from record {stop['request']} of {stop['of']}) drafted a token, where {entry['drafted_before']} of "
                        f"{entry['records_before']} before the fault did"
                    ),
                }
            )
        elif not before and not entry["drafted_after"] and len(after) >= MIN_STOPPED:
            # The fault came before the engine's first record (OpenVINO's sampled pipelines fail on their
            # first request): no record shows it drafting, so there is no "before" to compare with.
            entry["stopped"] = True
            findings.append(
                {
                    "kind": "no_drafts_after_fault",
                    "engine": engine,
                    "request": len(before) + 1,
                    "of": len(ordered),
                    "stopped": len(after),
                    "message": (
                        f"{engine} drafted no token on any of its {len(after)} records, all written after the first "
                        "engine fault (none before it shows whether it drafted before)"
                    ),
                }
            )
        else:
            entry["stopped"] = False
            if len(after) < MIN_STOPPED:
                entry["note"] = f"{len(after)} record(s) after the first fault, fewer than {MIN_STOPPED}: a stop could not be shown"
        parts[engine] = entry
    return parts, findings


def engine_faults(records: list[dict], faults: list[Fault]) -> EngineFaultsSection:
    """The section for `records` (records.jsonl in file order) and `faults` (faults.jsonl)."""
    if not faults:
        return EngineFaultsSection(status=CheckStatus.PASS, count=0, message="no engine call failed")
    recorded = {r["key"] for r in records}
    keys = {f.key for f in faults}
    engines: dict[str, dict[str, Any]] = {}
    for fault in faults:
        entry = engines.setdefault(fault.engine, {"faults": 0, "items": set(), "first_error": fault.error, "first_message": fault.message})
        entry["faults"] += 1
        entry["items"].add(fault.key)
    for entry in engines.values():
        items = entry.pop("items")
        entry.update(items=len(items), recovered=len(items & recorded))
    first = faults[0]
    speculation, findings = _speculation_after(records, min(f.records_before for f in faults))
    counts = ", ".join(f"{name} {entry['faults']}" for name, entry in engines.items())
    message = (
        f"{len(faults)} engine call(s) failed on {len(keys)} plan item(s) ({counts}); first: {first.engine} on prompt "
        f"{first.prompt_id}, sample {first.sample}: {first.error}: {' '.join(first.message.split())}"
    )
    recovered = len(keys & recorded)
    if recovered:
        message += f"; {recovered} of those items answered when asked again"
    if findings:
        message += "; " + "; ".join(f["message"] for f in findings)
    elif speculation:
        message += "; " + ", ".join(
            f"{name} drafted on {e['drafted_after']} of {e['records_after']} records after the first fault"
            for name, e in speculation.items()
        )
    return EngineFaultsSection(
        status=CheckStatus.FAIL,
        count=len(faults),
        items=len(keys),
        recovered=recovered,
        engines=engines,
        first={"key": first.key, "engine": first.engine, "error": first.error, "message": first.message, "at": first.at},
        speculation_after=speculation,
        findings=findings,
        message=message,
    )


__all__ = ["engine_faults"]
