"""The analysis writes each sampled engine's PIT distortion bound beside its TV bound, over the
tokens the PIT test reads, and the report states it as what the audit showed."""

from __future__ import annotations

import math

import pytest

from specaudit.report.view import build_view
from specaudit.stats.equivalence.pit_bound import dkw_margin


def test_each_sampled_engine_carries_its_pit_bound(snapshot):
    engines = snapshot["equivalence"]["engines"]
    for name in ("vanilla", "speculative"):
        bound = engines[name]["pit_bound"]
        pit = engines[name]["goodness_of_fit"]["tests"]["pit"]
        assert bound["n"] == pit["n"] > 0  # the same tokens the PIT test reads
        assert bound["level"] == pytest.approx(1 - snapshot["equivalence"]["alpha"])
        assert bound["margin"] == pytest.approx(dkw_margin(bound["n"], bound["level"]))
        assert bound["upper"] == pytest.approx(min(1.0, bound["observed"] + bound["margin"]))
        assert bound["observed"] == pytest.approx(pit["ks"]["statistic"], abs=1e-9)  # D_n is the KS statistic
    assert set(snapshot["run"]["stage_seconds"]) == {"screen", "engines"} and snapshot["run"]["stage_seconds"]["engines"] > 0


def test_the_correctness_card_states_the_bound(snapshot):
    bound = snapshot["equivalence"]["engines"]["speculative"]["pit_bound"]
    card = next(c for c in build_view(snapshot)["summary"]["cards"] if c.label == "Correctness")
    text = " ".join(card.lines)
    if bound["upper"] < 1:
        assert f"no distortion of the PIT above {bound['upper']:.3f}, shown at 95%" in text
    else:  # a handful of tokens: the bound says nothing and the card does not pretend it does
        assert "no distortion of the PIT" not in text and math.isfinite(bound["margin"])
