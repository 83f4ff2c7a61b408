"""Drift tested prompt by prompt: snapshots carry per-prompt values (`prompts`), and a group's
change is a paired t-test over its prompts. Calibration on re-runs without change, power on a
planted drop, and the unpaired fallback."""

from __future__ import annotations

import numpy as np
import pytest
from monitor_factory import GROUPS, base_snapshot
from scipy import stats

from specaudit.monitor import FAIL, compare_snapshots
from specaudit.monitor._drift import prompt_drift_test

pytestmark = pytest.mark.slow

PROMPTS_PER_GROUP = 12
# Prompts differ a lot (some are easy for the draft), re-runs of one prompt vary less.
PROMPT_SD, RERUN_SD = 0.10, 0.04


def _truth(seed: int) -> dict[str, tuple[str, float, float]]:
    rng = np.random.default_rng(seed)
    out = {}
    for g_index, group in enumerate(GROUPS):
        for i in range(PROMPTS_PER_GROUP):
            acceptance = 0.30 + 0.01 * g_index + rng.normal(0, PROMPT_SD)
            out[f"{group}-{i}"] = (group, acceptance, 0.8 + acceptance)
    return out


def _snapshot(truth, rng, *, drop: dict[str, float] | None = None, rename: bool = False) -> dict:
    snapshot = base_snapshot()
    rows = []
    for prompt_id, (group, acceptance, speedup) in truth.items():
        factor = 1 - (drop or {}).get(group, 0.0)
        rows.append(
            {
                "id": prompt_id + ("-b" if rename else ""),
                "pair_id": None,
                "attributes": {"dialect": group},
                "acceptance_rate": factor * acceptance + rng.normal(0, RERUN_SD),
                "speedup": speedup * (0.5 + 0.5 * factor) + rng.normal(0, RERUN_SD),
                "n_tokens": 32.0,
            }
        )
    snapshot["prompts"] = rows
    return snapshot


def test_paired_t_test_is_calibrated_and_its_interval_covers():
    """Null: 400 groups of 8 prompts re-run without change; rejections at 0.05 inside the binomial 95% interval."""
    rng = np.random.default_rng(0)
    rejected = covered = 0
    trials = 400
    for t in range(trials):
        base = rng.normal(0.4, PROMPT_SD, 8)
        current = {str(i): v + rng.normal(0, RERUN_SD) for i, v in enumerate(base)}
        window = [{str(i): v + rng.normal(0, RERUN_SD) for i, v in enumerate(base)} for _ in range(3)]
        result = prompt_drift_test(current, window, seed=t)
        rejected += result.pvalue < 0.05
        covered += result.ci_low <= 0 <= result.ci_high
        assert result.paired and result.n_current == 8 and result.n_baseline_runs == 3
    low, high = stats.binomtest(int(0.05 * trials), trials).proportion_ci(0.95)
    assert low <= rejected / trials <= high, rejected / trials
    assert covered / trials >= 0.93


def test_rerun_without_change_rarely_alerts_and_a_planted_drop_is_named():
    """Five earlier runs and a sixth, 120 seeds; 12 prompts per group, aave's acceptance down 40 %.
    Measured (60 seeds each): detection 1.00 here; 0.92 at a 30 % drop; with 8 prompts 0.70 / 0.87 / 0.95
    at 30 / 40 / 50 % drops, so a group needs about a dozen prompts for drops of a third to be caught."""
    seeds = range(120)
    false_runs = caught = elsewhere = 0
    for seed in seeds:
        truth = _truth(seed)
        rng = np.random.default_rng(10_000 + seed)
        window = [_snapshot(truth, rng) for _ in range(5)]
        quiet = compare_snapshots(_snapshot(truth, rng), window, history=window, cusum_k=0.5)
        false_runs += any(c.kind == "drift" and c.status == FAIL for c in quiet.checks)
        dropped = compare_snapshots(_snapshot(truth, rng, drop={"aave": 0.40}), window, history=window)
        fails = [c for c in dropped.checks if c.kind == "drift" and c.status == FAIL]
        caught += any(c.group == "aave" and c.metric == "acceptance_rate" for c in fails)
        elsewhere += any(c.group not in ("aave", "_overall") for c in fails)
    n = len(seeds)
    assert false_runs / n <= 0.06, false_runs / n
    assert caught / n >= 0.98, caught / n
    assert elsewhere / n <= 0.06, elsewhere / n


def test_alert_details_say_the_test_and_the_ratio_interval():
    truth = _truth(3)
    rng = np.random.default_rng(3)
    window = [_snapshot(truth, rng) for _ in range(5)]
    result = compare_snapshots(_snapshot(truth, rng, drop={"aave": 0.4}), window)
    check = next(c for c in result.checks if c.kind == "drift" and c.group == "aave" and c.metric == "acceptance_rate")
    assert check.status == FAIL and check.line().startswith("FAIL drift dialect=aave acceptance_rate")
    details = check.details
    assert details["method"] == "paired t-test on per-prompt differences" and details["n_prompts_current"] == PROMPTS_PER_GROUP
    assert details["ratio_ci_low"] <= details["ratio"] <= details["ratio_ci_high"] < 0.8
    assert details["ci_high"] < 0


def test_different_prompts_fall_back_to_welch_and_old_snapshots_to_the_group_intervals():
    truth = _truth(4)
    rng = np.random.default_rng(4)
    window = [_snapshot(truth, rng) for _ in range(3)]
    renamed = compare_snapshots(_snapshot(truth, rng, rename=True), window)
    welch = next(c for c in renamed.checks if c.kind == "drift" and c.group == "aave" and c.metric == "acceptance_rate")
    assert welch.details["method"] == "Welch t-test on per-prompt values" and not welch.details["paired"]
    old = base_snapshot()  # no `prompts` section: the group CIs are all there is
    mixed = compare_snapshots(old, window)
    check = next(c for c in mixed.checks if c.kind == "drift" and c.group == "aave" and c.metric == "acceptance_rate")
    assert check.details["method"] == "normal approximation from the group CIs"
