"""The deployment gate: thresholds → PASS / WARN / FAIL checks on a snapshot → exit code.

The gate reads only snapshot.json (docs/ARCHITECTURE.md, Contracts) and re-judges it: Holm-adjusted
p-values, TV upper bounds and ratios to the reference do not depend on the thresholds, so a
stricter or looser gate can be applied to an existing snapshot without re-running anything.

Each check is PASS, WARN or FAIL (Evidently's vocabulary, with non-critical checks warning);
the gate fails when any check fails. A check whose input is missing ("not run") warns: a gate
must not pass silently on evidence it never saw.

The parts live in `specaudit/gate/`: thresholds, the check and result types, the equivalence
checks and the disparity checks; every name below is importable from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specaudit.contracts.snapshot import Snapshot, read_snapshot
from specaudit.gate.decision import decision_check, decision_key, snapshot_facts
from specaudit.gate.disparity import disparity_checks, measurement_checks
from specaudit.gate.equivalence import equivalence_checks
from specaudit.gate.identity import identity_checks
from specaudit.gate.results import GateCheck, GateResult
from specaudit.gate.robustness import robustness_checks
from specaudit.gate.serving import serving_checks
from specaudit.gate.thresholds import FAIL, PASS, WARN, GateThresholds, load_thresholds


def evaluate_gate(snapshot: Snapshot | Mapping[str, Any], thresholds: GateThresholds | None = None) -> GateResult:
    """Judge a snapshot (the typed Snapshot, or a mapping validated into one) against ``thresholds`` (defaults if None)."""
    snapshot = read_snapshot(snapshot)
    thresholds = thresholds or GateThresholds()
    checks: list[GateCheck] = []
    checks += equivalence_checks(snapshot.equivalence, thresholds)
    checks += disparity_checks(snapshot, thresholds)
    checks += measurement_checks(snapshot)
    checks += serving_checks(snapshot)
    checks += robustness_checks(snapshot)
    checks += identity_checks(snapshot)
    if thresholds.fail_on != "fail":  # the exit code follows the decision (gate.decision)
        checks.append(decision_check(snapshot, checks, thresholds.fail_on))
    return GateResult(tuple(checks), thresholds, decision_key(snapshot_facts(snapshot, checks)))


__all__ = ["FAIL", "PASS", "WARN", "GateCheck", "GateResult", "GateThresholds", "evaluate_gate", "load_thresholds"]
