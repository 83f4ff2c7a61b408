"""Drift statistics on snapshots: the arithmetic, calibration (false alerts on re-runs without
change) and power (a planted per-group drop, a slow drift), verdict and context changes."""

from __future__ import annotations

import math
import random

import pytest
from monitor_factory import GROUPS, SE, TRUE_ACCEPTANCE, base_snapshot, edited, history, noisy_run

from specaudit.errors import InputError
from specaudit.monitor import FAIL, PASS, WARN, MetricPoint, compare_snapshots, cusum, drift_test
from specaudit.stats._results import holm

Z95 = 1.959963984540054


def _point(value, se, metric="acceptance_rate", group="aave"):
    return MetricPoint("dialect", group, metric, value, value - Z95 * se, value + Z95 * se, 40, 1900)


def test_drift_test_matches_the_normal_approximation_by_hand():
    current, baseline = _point(0.25, 0.01), _point(0.30, 0.01)
    result = drift_test(current, [baseline])
    se = math.sqrt(0.01**2 + 0.01**2)
    assert result.standard_error == pytest.approx(se)
    assert result.difference == pytest.approx(-0.05)
    assert result.statistic == pytest.approx(-0.05 / se)
    assert result.pvalue == pytest.approx(math.erfc(0.05 / se / math.sqrt(2)))  # 4.1e-4
    low, high = result.confidence_interval()
    assert (low, high) == pytest.approx((-0.05 - Z95 * se, -0.05 + Z95 * se))
    assert result.relative_change == pytest.approx(-1 / 6)
    ratio_low, ratio_high = result.ratio_confidence_interval()
    assert ratio_low < 0.25 / 0.30 < ratio_high < 1  # the ratio's CI excludes 1 as the difference's excludes 0
    assert drift_test(_point(0.3, 0.0), [baseline]) is None  # no CI width: not testable
    assert drift_test(MetricPoint("d", "g", "m", 0.3), [baseline]) is None


def test_rolling_window_pools_with_dersimonian_laird():
    se = 0.01
    steady = [_point(0.30, se) for _ in range(5)]
    result = drift_test(_point(0.30, se), steady)
    assert result.heterogeneity == 0 and result.n_baseline_runs == 5
    assert result.standard_error == pytest.approx(math.sqrt(se**2 + se**2 / 5))
    # Runs that scatter more than their CIs say: τ² by hand (equal weights w = 1/se²).
    values = [0.26, 0.34, 0.28, 0.33, 0.29]
    scattered = [_point(v, se) for v in values]
    mean = sum(values) / 5
    q = sum((v - mean) ** 2 for v in values) / se**2
    w = 1 / se**2
    tau2 = (q - 4) / (5 * w - 5 * w**2 / (5 * w))
    result = drift_test(_point(0.25, se), scattered)
    assert result.heterogeneity == pytest.approx(tau2)
    assert result.baseline == pytest.approx(mean)
    assert result.standard_error == pytest.approx(math.sqrt(se**2 + tau2 + (se**2 + tau2) / 5))
    # The same drop is unremarkable against a noisy history and remarkable against a steady one.
    assert result.pvalue > 0.05 > drift_test(_point(0.25, se), steady).pvalue


def test_holm_adjustment():
    assert holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])


def test_first_run_has_nothing_to_compare():
    result = compare_snapshots(base_snapshot(), [])
    assert result.status == PASS and result.exit_code == 0 and result.checks[0].kind == "baseline"


def _fails(result, kind=None):
    return [c for c in result.checks if c.status == FAIL and (kind is None or c.kind == kind)]


def test_calibration_and_power_over_seeds():
    """Five earlier runs (rolling baseline, CUSUM over them) and a sixth:
    - re-run without change: any FAIL in at most ~α of the seeds (Holm keeps the family-wise rate ≤ 0.05);
    - aave's acceptance down 35 %: FAIL naming aave's acceptance in nearly every seed, other groups as rarely as without drift.
    Measured over 150 seeds: 2.7 % false FAIL runs without change, 100 % detection, 2.7 % FAIL elsewhere."""
    seeds = range(150)
    false_runs = caught = elsewhere = 0
    for seed in seeds:
        runs = history(seed, 6)
        quiet = compare_snapshots(runs[5], runs[:5], history=runs[:5])
        false_runs += quiet.exit_code
        rng = random.Random(10_000 + seed)
        dropped = noisy_run(rng, 5, shift={("aave", "acceptance_rate"): -0.35})
        alert = compare_snapshots(dropped, runs[:5], history=runs[:5])
        caught += any(c.group == "aave" and c.metric == "acceptance_rate" for c in _fails(alert, "drift"))
        elsewhere += any(c.group != "aave" for c in _fails(alert))
    n = len(seeds)
    assert false_runs / n <= 0.06, false_runs / n
    assert caught / n >= 0.98, caught / n
    assert elsewhere / n <= 0.06, elsewhere / n


def test_planted_drop_alert_names_the_group():
    runs = history(seed=7, n=6)
    dropped = noisy_run(random.Random(1), 6, shift={("aave", "acceptance_rate"): -0.35})
    result = compare_snapshots(dropped, runs[1:], history=runs)
    assert result.exit_code == 1
    drift = [c for c in _fails(result, "drift")]
    assert [(c.dimension, c.group, c.metric) for c in drift] == [("dialect", "aave", "acceptance_rate")]
    line = drift[0].line()
    assert line.startswith("FAIL drift dialect=aave acceptance_rate: ") and "worse" in line and "Holm" in line
    details = drift[0].details
    assert details["ci_high"] < 0 and details["ratio_ci_high"] < 1 and details["relative_change"] < -0.25
    assert result.format_text().splitlines()[0] == line  # alerts first, one per line
    # Overall acceptance moves by an eighth of that: below the practical threshold, never a FAIL.
    assert not [c for c in _fails(result) if c.group == "_overall"]


def test_significant_but_small_or_favourable_changes_warn():
    base = base_snapshot()
    up = edited(base, **{"groups.dialect.by_group.sae.metrics.acceptance_rate.value": TRUE_ACCEPTANCE["sae"] * 1.3})
    result = compare_snapshots(up, base)
    sae = next(c for c in result.checks if c.group == "sae" and c.metric == "acceptance_rate")
    assert sae.status == WARN and "favourable" in sae.message and result.exit_code == 0
    overall_value = base["groups"]["dialect"]["overall"]["metrics"]["acceptance_rate"]["value"]
    small = edited(base, **{"groups.dialect.overall.metrics.acceptance_rate.value": overall_value * 0.93})
    result = compare_snapshots(small, base)  # the overall SE is small: −7 % is significant (z = 3.2), but under 10 %
    overall = next(c for c in result.checks if c.group == "_overall" and c.metric == "acceptance_rate")
    assert overall.status == WARN and "under the 10% practical threshold" in overall.message
    assert result.exit_code == 0
    assert compare_snapshots(small, base, min_change=0.05).exit_code == 1


def test_lower_is_better_metrics_alert_on_increase():
    base = base_snapshot()
    slower = edited(base, **{"groups.dialect.by_group.naija.metrics.ttft_s.value": 0.08})
    result = compare_snapshots(slower, base, metrics=["ttft_s"])
    naija = next(c for c in result.checks if c.group == "naija")
    assert naija.status == FAIL and "worse" in naija.message
    faster = edited(base, **{"groups.dialect.by_group.naija.metrics.ttft_s.value": 0.02})
    assert next(c for c in compare_snapshots(faster, base, metrics=["ttft_s"]).checks if c.group == "naija").status == WARN


def test_cusum_catches_a_slow_drift_the_rolling_window_follows():
    """aave's acceptance falls 2 % of its value per run after run 5. Against a rolling window of 5
    each run differs little from the last ones; the CUSUM over the history accumulates the drift.
    Measured over 8 seeds: CUSUM alarm in all 8, after a median of 10 runs of drift (a 20 % drop;
    the CUSUM's slack is half the 10 % practical threshold); the rolling drift test alone caught it
    first in 2 of 8. Steady histories of 12 runs: no CUSUM alarm."""
    detected, delays, rolling_first, null_alarms = 0, [], 0, 0
    for seed in range(8):
        rng = random.Random(seed)
        runs, first, rolled = [], None, False
        for i in range(18):
            shift = {("aave", "acceptance_rate"): -0.02 * (i - 5)} if i > 5 else None
            runs.append(noisy_run(rng, i, shift=shift))
            if i > 5 and first is None:
                result = compare_snapshots(runs[-1], runs[-6:-1], history=runs[:-1])
                rolled = rolled or any(c.group == "aave" for c in _fails(result, "drift"))
                if any(c.group == "aave" for c in _fails(result, "cusum")):
                    first = i
                    rolling_first += rolled
        if first is not None:
            detected += 1
            delays.append(first - 5)
        steady = history(20_000 + seed, 12)
        result = compare_snapshots(steady[-1], steady[-6:-1], history=steady[:-1])
        null_alarms += bool(_fails(result, "cusum"))
    assert detected == 8
    assert sorted(delays)[len(delays) // 2] <= 11, delays
    assert rolling_first <= 4
    assert null_alarms == 0


def test_cusum_statistic_by_hand():
    se = 0.01
    series = [_point(v, se) for v in (0.30, 0.30, 0.30, 0.27, 0.27, 0.27)]
    result = cusum(series, direction=1, reference=0.5, threshold=3.0)
    assert all(math.isnan(r) for r in result.residuals[:2])
    assert result.residuals[2] == pytest.approx(0.0)
    expected_z3 = -0.03 / math.sqrt(se**2 + se**2 / 3)
    assert result.residuals[3] == pytest.approx(expected_z3)
    assert result.path[3] == pytest.approx(-expected_z3 - 0.5)
    # Keeps rising while the level stays low, though the recursive mean (and τ²) slowly follow it.
    assert result.path == tuple(sorted(result.path)) and result.path[5] == pytest.approx(3.44, abs=0.01)
    assert result.alarm and result.excursion_start == 3
    assert not cusum(series, direction=1, threshold=5.0).alarm
    assert not cusum(series, direction=-1).alarm  # a drop is not a worsening of a lower-is-better metric


def test_equivalence_verdict_changes_always_alert():
    base = base_snapshot()
    failing = edited(base, **{"equivalence.status": "fail", "equivalence.engines.speculative.verdict": "fail"})
    result = compare_snapshots(failing, base)
    kinds = {(c.subject, c.status) for c in result.checks if c.kind == "equivalence"}
    assert ("equivalence", FAIL) in kinds and ("equivalence speculative", FAIL) in kinds and result.exit_code == 1
    recovered = compare_snapshots(base, failing)  # FAIL → PASS is a change too: look at it
    assert any(c.kind == "equivalence" and c.status == FAIL and "FAIL → PASS" in c.message for c in recovered.checks)
    # a snapshot from before the contracts spells the same statuses in lower case: not a change
    old_spelling = edited(base, **{"equivalence.status": "pass", "equivalence.engines.speculative.verdict": "pass"})
    for a, b in ((old_spelling, base), (base, old_spelling)):
        same = [c for c in compare_snapshots(a, b).checks if c.kind == "equivalence"]
        assert [c.status for c in same] == [PASS] and "status PASS (baseline run" in same[0].message
    untested = compare_snapshots(edited(base, **{"equivalence": {"status": "not run"}}), base)
    assert [c.status for c in untested.checks if c.kind == "equivalence"] == [WARN] and untested.exit_code == 0


def test_model_prompt_config_and_library_changes_are_context():
    base = base_snapshot()
    changed = edited(
        base,
        **{
            "run.models.draft.sha256": {"model.gguf": "b" * 64},
            "run.config.k": 6,
            "run.prompt_set.checksum": "d" * 64,
            "run.prompt_set.version": 2,
            "run.versions.torch": "2.14.0",
            "run.models.target.name": "/elsewhere/default",
        },
    )
    result = compare_snapshots(changed, base)
    context = {c.subject: c for c in result.checks if c.kind == "context"}
    assert set(context) == {"draft model", "prompt set", "config", "library versions"}  # a renamed target is the same model
    assert all(c.status == WARN for c in context.values()) and result.exit_code == 0
    assert "config.k 4 → 6" in context["config"].message
    assert "torch '2.13.0+cpu' → '2.14.0'" in context["library versions"].message
    assert "core@1" in context["prompt set"].message and "core@2" in context["prompt set"].message


def test_missing_and_new_groups_are_reported():
    base = base_snapshot()
    fewer = edited(base)
    del fewer["groups"]["dialect"]["by_group"]["jamaican"]
    result = compare_snapshots(fewer, base)
    missing = [c for c in result.checks if c.kind == "coverage"]
    assert [(c.status, c.group) for c in missing] == [(WARN, "jamaican")]
    result = compare_snapshots(base, fewer)
    assert [(c.status, c.group) for c in result.checks if c.kind == "coverage"] == [(PASS, "jamaican")]


def test_bad_options_are_input_errors():
    base = base_snapshot()
    with pytest.raises(InputError, match="--alpha"):
        compare_snapshots(base, base, alpha=1.5)
    with pytest.raises(InputError, match="--min-change"):
        compare_snapshots(base, base, min_change=-1)


def test_factory_noise_matches_the_stated_standard_error():
    # The calibration figures above mean something only if runs scatter as their CIs claim.
    rng = random.Random(5)
    values = [noisy_run(rng, i)["groups"]["dialect"]["by_group"]["aave"]["metrics"]["acceptance_rate"]["value"] for i in range(400)]
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    assert sd == pytest.approx(SE["acceptance_rate"], rel=0.1)
    assert mean == pytest.approx(TRUE_ACCEPTANCE["aave"], abs=0.003)
    assert len(GROUPS) == 8
