"""Checks of stored runs: baseline choice (rolling, pinned, explicit), environments kept apart,
alerts recorded in the store, bad options."""

from __future__ import annotations

import random

import pytest
from monitor_factory import edited, history, noisy_run

from specaudit.errors import InputError
from specaudit.monitor import FAIL, check, open_store, resolve_baseline

DROP = {("aave", "acceptance_rate"): -0.35}


@pytest.fixture
def store(store_url):
    with open_store(store_url) as s:
        for snap in history(seed=11, n=6):
            s.add(snap, environment="prod")
        # A staging series whose aave acceptance is much lower: it must never leak into prod's baseline.
        for i, snap in enumerate(history(seed=12, n=3, drift_at=0, shift=DROP)):
            s.add(edited(snap, **{"run.id": f"staging-{i}"}), environment="staging")
        yield s


def test_rolling_baseline_uses_the_same_environment_and_passes_on_a_rerun(store):
    result = check(store, environment="prod")
    assert result.run == "#6 run-5" and result.exit_code == 0
    assert result.baseline == "the last 5 runs in environment 'prod'"
    assert result.baseline_runs == ("#1 run-0", "#2 run-1", "#3 run-2", "#4 run-3", "#5 run-4")
    assert not [a for a in store.alerts() if a["status"] == FAIL]


def test_planted_drop_fails_and_the_alert_is_recorded(store):
    dropped = store.add(noisy_run(random.Random(3), 6, shift=DROP), environment="prod").run
    result = check(store, dropped.id)
    assert result.exit_code == 1
    fails = [c for c in result.checks if c.status == FAIL]
    assert {(c.kind, c.group) for c in fails} >= {("drift", "aave")}
    assert all(c.group == "aave" for c in fails)
    stored = [a for a in store.alerts([dropped]) if a["status"] == FAIL]
    assert {(a["kind"], a["group"], a["metric"]) for a in stored} == {(c.kind, c.group, c.metric) for c in fails}
    check(store, dropped.id)  # checking again replaces that run's alerts instead of piling them up
    assert len([a for a in store.alerts([dropped]) if a["status"] == FAIL]) == len(fails)


def test_pinned_and_explicit_baselines(store):
    dropped = store.add(noisy_run(random.Random(4), 6, shift=DROP), environment="prod").run
    store.set_baseline("run-2")
    result = check(store, "latest", environment="prod")
    assert result.baseline == "pinned baseline #3 run-2" and result.baseline_runs == ("#3 run-2",)
    assert result.exit_code == 1
    explicit = check(store, dropped.id, baseline="1")
    assert explicit.baseline == "run #1 run-0" and explicit.exit_code == 1
    # The pinned run itself, checked, has nothing earlier to compare with in "pinned" mode.
    assert check(store, "run-2", baseline="pinned").checks[0].kind == "baseline"
    one = resolve_baseline(store, dropped, "rolling:1")
    assert one.kind == "rolling" and [r.name for r in one.runs] == ["run-5"]


def test_first_run_of_an_environment_passes(store):
    first = store.add(edited(history(seed=13, n=1)[0], **{"run.id": "canary-0"}), environment="canary").run
    result = check(store, first.id)
    assert result.exit_code == 0 and [c.kind for c in result.checks] == ["baseline"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"baseline": "rolling:0"}, "rolling:N with N >= 1"),
        ({"baseline": "pinned"}, "no pinned baseline in environment 'prod'"),
        ({"baseline": "6"}, "is the run being checked"),
        ({"baseline": "nope"}, "no run 'nope'"),
        ({"metrics": ["acceptance_rat"]}, "--metrics acceptance_rat: run #6 run-5 has no such metric"),
        ({"alpha": 0}, "--alpha must be in"),
    ],
)
def test_bad_check_options_are_input_errors(store, options, message):
    with pytest.raises(InputError, match=message):
        check(store, "latest", environment="prod", **options)
