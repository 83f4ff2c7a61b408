"""Checks that need no statistics: every record against the output invariants, and the engine
calls that failed during the run. Each reads its snapshot section (analysis.invariants,
analysis.engine_faults); a snapshot written before these sections gets no check.

- `output-invariants` FAILs on any record that breaks an output invariant (more tokens than
  max_new_tokens, a token after end-of-sequence or a stop string, an id outside the vocabulary,
  text that is not the ids detokenised, counters that contradict each other): proof of a bug,
  named by engine, record and position.
- `engine-faults` FAILs when any engine call failed (raised, or a server's HTTP 5xx), with the
  counts and the first message, and says whether speculation went on after the first fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit.gate.results import GateCheck, section_check

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot


def robustness_checks(snapshot: Snapshot) -> list[GateCheck]:
    checks = []
    invariants = snapshot.output_invariants
    if invariants is not None:
        shown = ("records", "violations", "checks", "skipped", "first")
        checks.append(
            section_check("output-invariants", "every record holds the output invariants", invariants, invariants.message or "", shown)
        )
    faults = snapshot.engine_faults
    if faults is not None:
        shown = ("count", "items", "recovered", "engines", "first", "speculation_after", "findings")
        checks.append(section_check("engine-faults", "no engine call failed", faults, faults.message or "", shown))
    return checks
