"""The identity-draft statistic: exact law, both rules, calibration and power on simulated runs."""

import numpy as np
import pytest
from scipy.stats import poisson_binom

from specaudit.analysis.identity import judged_positions
from specaudit.contracts.status import CheckStatus
from specaudit.stats import identity
from specaudit.stats.acceptance import sample_run
from specaudit.stats.identity import GREEDY_MATCH, REJECTION_SAMPLING, identity_acceptance_test


def test_exact_law_is_the_poisson_binomial():
    chances = np.array([0.0, 1.0, 0.3, 0.7, 0.5, 0.05, 1.0])
    pmf = identity._poisson_binomial_pmf(chances)
    assert pmf.shape == (len(chances) + 1,)
    assert pmf == pytest.approx(poisson_binom(chances).pmf(np.arange(len(chances) + 1)), abs=1e-12)


def test_rejection_sampling_keeps_everything_within_the_tolerance():
    every = identity_acceptance_test(400, [1.0] * 400)
    assert every.verdict == CheckStatus.PASS and every.pvalue == pytest.approx(1.0)
    assert every.confidence_interval().high == 1.0 and every.expected_rate == 1.0
    # one rounding rejection in 400 is what the tolerance is for
    assert identity_acceptance_test(399, [1.0] * 400).verdict == CheckStatus.PASS
    # without tolerance any rejection is proof
    assert identity_acceptance_test(399, [1.0] * 400, tolerance=0.0).verdict == CheckStatus.FAIL
    short = identity_acceptance_test(380, [1.0] * 400)
    assert short.verdict == CheckStatus.FAIL and short.pvalue < 1e-20
    assert short.low <= 400 and short.low > 380
    assert "380 of 400" in short.describe()


def test_greedy_match_is_two_sided_around_the_sum_of_chances():
    chances = np.full(1000, 0.6)
    assert identity_acceptance_test(600, chances, rule=GREEDY_MATCH).verdict == CheckStatus.PASS
    result = identity_acceptance_test(600, chances, rule=GREEDY_MATCH)
    low, high = result.confidence_interval().low, result.confidence_interval().high
    assert 0.56 < low < 0.6 < high < 0.64  # ~ ±1.96 sd of 15.5 around 600, plus the tolerance
    assert result.expected == pytest.approx(600.0)
    assert identity_acceptance_test(700, chances, rule=GREEDY_MATCH).verdict == CheckStatus.FAIL  # over-accepting
    assert identity_acceptance_test(500, chances, rule=GREEDY_MATCH).verdict == CheckStatus.FAIL  # under-accepting
    # rejection sampling cannot over-accept, so it is tested on the lower side only
    assert identity_acceptance_test(1000, [1.0] * 1000, rule=REJECTION_SAMPLING).high == 1000


def test_nothing_judged_is_skipped_and_bad_counts_are_refused():
    assert identity_acceptance_test(0, []).verdict == "skipped"
    with pytest.raises(ValueError):
        identity_acceptance_test(5, [1.0] * 4)
    with pytest.raises(ValueError):
        identity_acceptance_test(1, [1.0], rule="typical acceptance")


def test_normal_approximation_agrees_with_the_exact_law(monkeypatch):
    rng = np.random.default_rng(0)
    chances = rng.uniform(0.2, 0.95, 3000)
    exact = identity_acceptance_test(int(chances.sum()) - 40, chances, rule=GREEDY_MATCH)
    monkeypatch.setattr(identity, "_EXACT_LIMIT", 10)
    approx = identity_acceptance_test(int(chances.sum()) - 40, chances, rule=GREEDY_MATCH)
    assert "normal" in approx.method and "exact" in exact.method
    assert approx.pvalue == pytest.approx(exact.pvalue, rel=0.1)
    assert abs(approx.low - exact.low) <= 1 and abs(approx.high - exact.high) <= 1


def test_judged_positions_follow_the_steps_and_stop_at_the_path():
    # steps: 2 of 4 kept (positions 0-2 judged, 3 tokens emitted), then 4 of 4 (3-6 judged, the
    # bonus token at 7), then 0 of 4 (8 judged)
    record = {"accepted_per_step": [2, 4, 0], "proposed_per_step": [4, 4, 4], "output_token_ids": list(range(9))}
    assert judged_positions(record) == ([0, 1, 2, 3, 4, 5, 6, 8], 6)
    # llama.cpp's prompt pass proposes nothing and emits position 0
    record = {"accepted_per_step": [0, 1], "proposed_per_step": [0, 3], "output_token_ids": list(range(3))}
    assert judged_positions(record) == ([1, 2], 1)
    # a path that ended (end-of-sequence) inside a step: drafts past it are not judged
    record = {"accepted_per_step": [4], "proposed_per_step": [4], "output_token_ids": [5, 6]}
    assert judged_positions(record) == ([0, 1], 2)
    assert judged_positions({"proposed": 8, "accepted": 8, "output_token_ids": [1]}) is None


def _simulated_runs(rng, keep, *, runs=6, length=40, k=4):
    """The judged chances and kept count of `runs` greedy-match decodings along random paths, each
    draft kept with probability keep(a_t) in the engine's own step structure (sample_run)."""
    chances, kept = [], 0
    for _ in range(runs):
        accept = rng.beta(4, 1.5, length).tolist()  # max p along a path: mostly peaked
        accepted, proposed = sample_run([keep(a) for a in accept], k, length, rng)
        positions, n = judged_positions({"accepted_per_step": accepted, "proposed_per_step": proposed, "output_token_ids": accept})
        chances += [accept[t] for t in positions]
        kept += n
    return kept, chances


def test_calibration_and_power_on_simulated_greedy_match_runs():
    rng = np.random.default_rng(1)
    seeds = 200
    false_alarms = sum(
        identity_acceptance_test(*_simulated_runs(rng, lambda a: a), rule=GREEDY_MATCH).verdict == CheckStatus.FAIL for _ in range(seeds)
    )
    # the correct rule: at most alpha = 5% (+ 3 standard errors of 200 runs)
    assert false_alarms / seeds <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / seeds)
    # a verifier keeping the greedy draft always (transformers #28508's class), or sampling at a
    # higher temperature (a_t shrunk toward a flatter p), is caught in nearly every run
    for broken in (lambda a: 1.0, lambda a: a**1.6):
        caught = sum(
            identity_acceptance_test(*_simulated_runs(rng, broken), rule=GREEDY_MATCH).verdict == CheckStatus.FAIL for _ in range(30)
        )
        assert caught >= 27
