"""Costed advice: a recommended rerun states its predicted time from the audit's cost model."""

import json
from pathlib import Path

import pytest

from specaudit.report.view.costs import duration, engine_seconds_per_sample, samples_cost

EXAMPLE = Path(__file__).resolve().parents[2] / "reports" / "example"


@pytest.fixture(scope="module")
def snapshot():
    return json.loads((EXAMPLE / "snapshot.json").read_text())


def test_predicted_engine_time_matches_what_the_engines_took(snapshot):
    measured = sum(
        r["wall_s"]
        for r in map(json.loads, (EXAMPLE / "records.jsonl").read_text().splitlines())
        if r.get("engine") in ("vanilla", "speculative") and r.get("wall_s")
    )
    assert engine_seconds_per_sample(snapshot) == pytest.approx(measured, rel=0.1)


def test_the_samples_advice_carries_its_cost(snapshot):
    from specaudit.report.view import build_view

    advice = next(a for a in build_view(snapshot)["summary"]["actions"] if "--samples" in a["command"])
    wanted = int(advice["command"].rsplit("--samples ", 1)[1])
    assert samples_cost(snapshot, wanted) in advice["text"]
    assert f"{wanted} samples on each of 44 prompts" in advice["text"]
    assert samples_cost({"speed": {"source": "engines"}}, 8) is None  # no cost model, no invented figure


def test_durations_read_at_a_prediction_precision():
    assert [duration(s) for s in (0.2, 75, 200, 17_000, 400_000)] == ["1 s", "75 s", "3 min", "4.7 h", "4.6 days"]
