"""The decision a report states (Enable, Enable with conditions, Do not enable, Insufficient
evidence) and the exit code that follows it under `--fail-on decision`.

One rule, read by the gate (to make a CI job's exit code agree with the decision) and by the report
(its banner): `decision_key` from a handful of facts; `snapshot_facts` reads them from a snapshot
and the gate's checks. By default (`fail_on: fail`) the gate exits 1 only on a failing check, and
says so when the decision is stricter than its exit code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specaudit.contracts import CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.gate.results import BLOCKING, DECISIONS, GateCheck, mapping
from specaudit.gate.thresholds import finite


@dataclass(frozen=True)
class DecisionFacts:
    judged: bool  # a gate judged the snapshot
    failing: bool  # some gate check fails
    violation: bool  # some audited engine's output is not the target's
    tested: bool  # equivalence ran on some audited engine
    slower_overall: bool  # the overall speed-up's whole interval lies below 1
    compared: bool  # the snapshot compares groups
    decided: bool  # some group comparison is decided (FLAG or WITHIN)
    gate_pass: bool  # every gate check passes


def decision_key(f: DecisionFacts) -> str:
    """Order: no gate → insufficient; a failing check or a violation → do not enable; equivalence
    not tested → insufficient; slower than vanilla overall → do not enable; no comparison decided →
    insufficient; warnings → enable with conditions; else enable."""
    if not f.judged:
        return "insufficient"
    if f.failing or f.violation:
        return "do_not"
    if not f.tested:
        return "insufficient"
    if f.slower_overall:
        return "do_not"
    if f.compared and not f.decided:
        return "insufficient"
    return "enable" if f.gate_pass else "conditions"


def overall_speedup(snapshot: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The overall speed-up block of the dimension covering the most prompts (None without one)."""
    best, best_n = None, -1
    for part in mapping(snapshot.get("groups")).values():
        overall = mapping(mapping(part).get("overall"))
        block = mapping(mapping(overall.get("metrics")).get("speedup"))
        n = overall.get("n_prompts", 0)
        if finite(block.get("value")) and finite(n) and n > best_n:
            best, best_n = block, n
    return best


def snapshot_facts(snapshot: Mapping[str, Any], checks: Iterable[GateCheck]) -> DecisionFacts:
    checks = list(checks)
    engines = mapping(mapping(snapshot.get("equivalence")).get("engines"))
    statuses = [str(mapping(e).get("status") or "") for name, e in engines.items() if name not in (CONTROL_ENGINE, SCREEN_ENGINE)]
    rows = [
        row
        for part in mapping(snapshot.get("disparities")).values()
        for block in mapping(mapping(part).get("metrics")).values()
        for row in mapping(mapping(block).get("pairwise")).values()
        if isinstance(row, Mapping)
    ]
    speed = overall_speedup(snapshot) or {}
    return DecisionFacts(
        judged=True,
        failing=any(c.status == CheckStatus.FAIL for c in checks if c.name != "decision"),
        violation=any(s == EquivalenceStatus.VIOLATION.value for s in statuses),
        tested=any(s and s != EquivalenceStatus.NOT_RUN.value for s in statuses),
        slower_overall=finite(speed.get("ci_high")) and speed["ci_high"] < 1,
        compared=bool(rows),
        decided=any(str(r.get("status")) in (DisparityStatus.FLAG.value, DisparityStatus.WITHIN.value) for r in rows),
        gate_pass=all(c.status == CheckStatus.PASS for c in checks if c.name != "decision"),
    )


def decision_check(snapshot: Mapping[str, Any], checks: Iterable[GateCheck]) -> GateCheck:
    """The `decision` check of `--fail-on decision`: FAIL where the report would say Do not enable
    or Insufficient evidence, so the exit code is 1 exactly when the decision blocks."""
    key = decision_key(snapshot_facts(snapshot, checks))
    blocking = key in BLOCKING
    return GateCheck(
        "decision",
        "The report's decision allows enabling",
        CheckStatus.FAIL if blocking else CheckStatus.PASS,
        f"the decision is {DECISIONS[key]}" + ("; --fail-on decision exits 1 on it" if blocking else ""),
        {"decision": key},
    )


__all__ = ["BLOCKING", "DECISIONS", "DecisionFacts", "decision_check", "decision_key", "overall_speedup", "snapshot_facts"]
