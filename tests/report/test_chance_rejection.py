"""The correctness card puts a rejection beside the family's alpha and says how often a correct
engine is rejected like that (docs/statistics.md, "Reference engine at the audit budgets")."""

from __future__ import annotations

import copy

from specaudit.report.view import build_view


def _card(snapshot: dict, holm_pvalue: float) -> str:
    snapshot = copy.deepcopy(snapshot)
    entry = snapshot["equivalence"]["engines"]["speculative"]
    row = entry["goodness_of_fit"]["gate"][0]
    row.update(holm_pvalue=holm_pvalue, reject=holm_pvalue < snapshot["equivalence"]["alpha"])
    entry.update(verdict="FAIL", status="violation")
    card = next(c for c in build_view(snapshot)["summary"]["cards"] if c.label == "Correctness")
    return next(line for line in card.lines if line.startswith("speculative"))


def test_a_rejection_near_alpha_says_how_often_chance_makes_one(snapshot):
    line = _card(snapshot, 0.031)
    assert "smallest Holm-adjusted p = 0.031, α = 0.05" in line
    assert "a correct engine is rejected like this in about α of audits" in line and "rerun with another --seed" in line


def test_a_rejection_far_below_alpha_gets_no_such_note(snapshot):
    line = _card(snapshot, 0.0)  # p = 0: an impossible step or decision, a proof
    assert "smallest Holm-adjusted p = <0.001, α = 0.05" in line and "rerun with another --seed" not in line
