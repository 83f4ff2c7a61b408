"""The decision a report states (Enable, Enable with conditions, Do not enable, Insufficient
evidence) and the exit code that follows it.

One rule, read by the gate (to make a CI job's exit code agree with the decision), by `audit`'s last
line and by the report (its banner): `decision_key` from a handful of facts; `snapshot_facts` reads
them from a snapshot and the gate's checks. By default (`fail_on: do-not-enable`) `audit` and `gate`
exit 1 on Do not enable (a failing check is one cause of it); `fail_on: decision` also on
Insufficient evidence, `fail_on: fail` on failing checks only. Where the decision does not allow
enabling but the exit code is 0, the gate says which policy would exit 1 on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specaudit._validation import finite
from specaudit.contracts import CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE
from specaudit.gate.results import BLOCKING, DECISIONS, EXIT_ON, GateCheck

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import MetricEstimate, Snapshot


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


def overall_speedup(snapshot: Snapshot) -> MetricEstimate | None:
    """The overall speed-up of the dimension covering the most prompts (None without one)."""
    best, best_n = None, -1
    for part in snapshot.groups.values():
        if part.overall is None:
            continue
        block, n = part.overall.metrics.get("speedup"), part.overall.n_prompts
        n = 0 if n is None else n
        if block is not None and finite(block.value) and n > best_n:
            best, best_n = block, n
    return best


def snapshot_facts(snapshot: Snapshot, checks: Iterable[GateCheck]) -> DecisionFacts:
    checks = list(checks)
    engines = snapshot.equivalence.engines
    statuses = [e.status for name, e in engines.items() if name not in (CONTROL_ENGINE, SCREEN_ENGINE)]
    rows = [row for part in snapshot.disparities.values() for block in part.metrics.values() for row in block.pairwise.values()]
    speed = overall_speedup(snapshot)
    return DecisionFacts(
        judged=True,
        failing=any(c.status == CheckStatus.FAIL for c in checks if c.name != "decision"),
        violation=EquivalenceStatus.VIOLATION in statuses,
        tested=any(s is not None and s != EquivalenceStatus.NOT_RUN for s in statuses),
        slower_overall=speed is not None and finite(speed.ci_high) and speed.ci_high < 1,
        compared=bool(rows),
        decided=any(r.status in (DisparityStatus.FLAG, DisparityStatus.WITHIN) for r in rows),
        gate_pass=all(c.status == CheckStatus.PASS for c in checks if c.name != "decision"),
    )


def decision_check(snapshot: Snapshot, checks: Iterable[GateCheck], fail_on: str) -> GateCheck:
    """The `decision` check of a `fail_on` policy other than "fail": FAIL where the report's
    decision is one the policy exits on (EXIT_ON), so the exit code is 1 exactly then."""
    key = decision_key(snapshot_facts(snapshot, checks))
    exits = key in EXIT_ON[fail_on]
    return GateCheck(
        "decision",
        "The report's decision allows enabling",
        CheckStatus.FAIL if exits else CheckStatus.PASS,
        f"the decision is {DECISIONS[key]}" + (f"; --fail-on {fail_on} exits 1 on it" if exits else ""),
        {"decision": key},
    )


__all__ = ["BLOCKING", "DECISIONS", "EXIT_ON", "DecisionFacts", "decision_check", "decision_key", "overall_speedup", "snapshot_facts"]
