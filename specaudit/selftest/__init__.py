"""The auditor audits itself: mutant samplers (one real bug each) and the calibration/power harness."""

from specaudit.selftest.end_to_end import end_to_end_audit, end_to_end_selftest, subsampled_detection
from specaudit.selftest.harness import calibrate_unit, power_unit, unit_selftest
from specaudit.selftest.mutants import MUTANTS

__all__ = ["MUTANTS", "calibrate_unit", "end_to_end_audit", "end_to_end_selftest", "power_unit", "subsampled_detection", "unit_selftest"]
