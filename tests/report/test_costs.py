"""Costed advice: a recommended rerun states its predicted time from the audit's cost model."""

import json
from pathlib import Path

import pytest

from specaudit.contracts.snapshot import read_snapshot
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
    assert engine_seconds_per_sample(read_snapshot(snapshot)) == pytest.approx(measured, rel=0.1)


def test_the_samples_advice_over_the_budget_gives_no_command(snapshot):
    from specaudit.report.view import build_view
    from specaudit.report.view.costs import BUDGET_HOURS, predicted_rerun

    advice = next(a for a in build_view(snapshot)["summary"]["actions"] if "Correctness is not proven" in a["text"])
    plan = snapshot["equivalence"]["engines"]["speculative"]["tv_bound"]["samples_to_show"]
    wanted = plan["samples"]
    # the samples a correct engine's TV bound needs to reach delta (stats.plugin_tv), not the first-token test's power
    assert plan["expected_upper"] <= plan["delta"] == 0.05
    cost = predicted_rerun(read_snapshot(snapshot), samples=wanted)
    assert cost.over_budget and cost.sentence() in advice["text"]
    assert f"{wanted:,} sample(s) on each of 44 engine prompts" in advice["text"]
    total, prompts, samples = min((int(p) * n, int(p), n) for p, n in plan["fewer_prompts"].items())
    assert total < 44 * wanted and f"{samples:,} samples on each of {prompts} of them" in advice["text"]
    # neither budget fits in a day: no command, and the advice says what the audit did show instead
    assert not advice["command"]
    assert f"No rerun within {BUDGET_HOURS:g} h shows it" in advice["text"] and "What this audit did show" in advice["text"]
    bare = {"schema_version": 1, "run": {}, "equivalence": {"status": "not run"}, "groups": {}, "speed": {"source": "engines"}}
    assert samples_cost(read_snapshot(bare), 8) is None  # no cost model, no measured time: no invented figure


def test_durations_read_at_a_prediction_precision():
    assert [duration(s) for s in (0.2, 75, 200, 17_000, 400_000)] == ["1 s", "75 s", "3 min", "4.7 h", "4.6 days"]


def _actions(snapshot):
    from specaudit.report.view import build_view

    return build_view(snapshot)["summary"]["actions"]


def test_every_recommended_command_states_what_it_costs(snapshot):
    import copy

    best_k = copy.deepcopy(snapshot)  # the cost model prefers a shorter draft for every group
    for part in best_k["recommendations"].values():
        for row in part["by_group"].values():
            row.update(best_k=2, best_k_expected_speedup=1.3)
    no_gate = {key: value for key, value in snapshot.items() if key != "gate"}
    violation = copy.deepcopy(snapshot)
    violation["equivalence"]["engines"]["speculative"].update(status="violation", verdict="FAIL")
    commands = {}
    for variant in (snapshot, best_k, no_gate, violation):
        for action in _actions(variant):
            if action["command"]:
                commands[action["command"]] = action["text"]
                assert "Predicted cost on this hardware" in action["text"] or "seconds" in action["text"] or "measured" in action["text"]
    assert len(commands) >= 3  # --k, gate, selftest (--samples is over the budget: no command)
    rerun = next(a["text"] for a in _actions(best_k) if "--k 2" in a["command"])
    # k = 2 at 1.3x: vanilla's time plus vanilla's / 1.3, less than this audit's engines at 0.71x
    assert "the speculative one at k = 2" in rerun
    typed = read_snapshot(snapshot)
    assert engine_seconds_per_sample(typed, speedup=1.3) < engine_seconds_per_sample(typed)
