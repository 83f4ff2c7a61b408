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

from collections.abc import Mapping
from typing import Any

from specaudit.contracts import CheckStatus
from specaudit.gate.results import GateCheck, mapping
from specaudit.gate.thresholds import FAIL, PASS


def robustness_checks(snapshot: Mapping[str, Any]) -> list[GateCheck]:
    checks = []
    invariants = mapping(snapshot.get("output_invariants"))
    if invariants:
        failed = str(invariants.get("status")).upper() == CheckStatus.FAIL
        checks.append(
            GateCheck(
                "output-invariants",
                "every record holds the output invariants",
                FAIL if failed else PASS,
                str(invariants.get("message") or ""),
                {key: invariants.get(key) for key in ("records", "violations", "checks", "skipped", "first")},
            )
        )
    faults = mapping(snapshot.get("engine_faults"))
    if faults:
        failed = str(faults.get("status")).upper() == CheckStatus.FAIL
        checks.append(
            GateCheck(
                "engine-faults",
                "no engine call failed",
                FAIL if failed else PASS,
                str(faults.get("message") or ""),
                {key: faults.get(key) for key in ("count", "items", "recovered", "engines", "first", "speculation_after", "findings")},
            )
        )
    return checks
