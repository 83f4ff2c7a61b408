"""A control that a server broke is a finding (issue 42): judge_control FAILs a control whose
every output was impossible (no p-value left to compare) instead of raising TypeError (exit 70)."""

from __future__ import annotations

from specaudit.analysis.equivalence import CONTROL_ALPHA_FACTOR, judge_battery, judge_control
from specaudit.contracts.snapshot import EngineEquivalence

VIOLATIONS = {"count": 4, "records": 4, "first": {"record": "p1|vanilla|0", "position": 0, "problem": "token id 99999"}, "examples": []}


def test_a_control_with_no_pvalue_and_proven_violations_fails_the_audit():
    control = EngineEquivalence(verdict="FAIL", goodness_of_fit={"verdict": "skipped", "pvalue": None}, server_violations=VIOLATIONS)
    judged = judge_control(control, 0.05 * CONTROL_ALPHA_FACTOR)
    assert judged.verdict == "FAIL"
    battery = judge_battery({"vanilla": judged, "speculative": EngineEquivalence(verdict="PASS")})
    assert battery["status"] == "FAIL" and battery["control_failed"]


def test_a_control_with_no_pvalue_and_nothing_proven_is_not_gross():
    control = EngineEquivalence(verdict="FAIL", goodness_of_fit={"verdict": "FAIL", "pvalue": None})
    assert judge_control(control, 0.001).verdict == "WARN"
    rejected = EngineEquivalence(verdict="FAIL", goodness_of_fit={"verdict": "FAIL", "pvalue": 1e-9})
    assert judge_control(rejected, 0.001).verdict == "FAIL"
