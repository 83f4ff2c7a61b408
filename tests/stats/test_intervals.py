"""Ratio-to-reference intervals: calibration at the band edge, power, and agreement between the
stated minimum detectable ratio and the rate at which the same interval FLAGs."""

import math

import numpy as np
import pytest

from specaudit.contracts import MIN_CHECKED_PROMPTS, DisparityStatus
from specaudit.stats._bootstrap import cluster_bootstrap
from specaudit.stats.disparity import GroupFrame, simulate_records
from specaudit.stats.disparity.intervals import (
    PAIRED_FIELLER,
    WELCH_FIELLER,
    fieller_interval,
    minimum_detectable_ratio,
    ratio_interval,
    ratio_status,
)

ALPHA = 0.05
BAND = (0.8, 1.25)


def _paired(rng, n, ratio, difficulty=0.5, noise=0.15):
    """Per-prompt values of parallel prompts: a shared prompt difficulty (log-normal) times the
    group's own noise; the ratio of the group's mean to the reference's mean is ``ratio``."""
    base = rng.lognormal(0.0, difficulty, n)
    reference = base * (1 + noise * rng.standard_normal(n))
    group = ratio * base * (1 + noise * rng.standard_normal(n))
    pairs = np.arange(n).astype(object)
    return group, reference, pairs


def _flag_rate(make, n_sims, **kw):
    flags = 0
    for _ in range(n_sims):
        x, y, pairs = make()
        result = ratio_interval(x, y, x_pairs=pairs, y_pairs=pairs, band=BAND, confidence=1 - ALPHA, **kw)
        flags += result.status is DisparityStatus.FLAG
    return flags / n_sims


def test_fieller_interval_reduces_to_the_known_case():
    # Without variance in the denominator it is x̄/ȳ ± t·sd(x̄)/ȳ.
    low, high = fieller_interval(2.0, 4.0, 0.01, 0.0, 0.0, 1.96)
    assert low == pytest.approx((2.0 - 1.96 * 0.1) / 4.0) and high == pytest.approx((2.0 + 1.96 * 0.1) / 4.0)
    # A reference mean within t standard errors of 0: the set is unbounded, no interval.
    assert all(math.isnan(v) for v in fieller_interval(1.0, 0.1, 0.01, 0.01, 0.0, 1.96))


def test_status_from_the_interval():
    assert ratio_status(0.3, 0.6, BAND) is DisparityStatus.FLAG
    assert ratio_status(1.3, 2.0, BAND) is DisparityStatus.FLAG
    assert ratio_status(0.85, 1.2, BAND) is DisparityStatus.WITHIN
    assert ratio_status(0.7, 1.1, BAND) is DisparityStatus.INCONCLUSIVE
    assert ratio_status(0.5, 1.5, BAND) is DisparityStatus.INSUFFICIENT  # covers the whole band
    assert ratio_status(math.nan, math.nan, BAND) is DisparityStatus.INSUFFICIENT


def test_paired_flag_rate_at_the_band_edge_is_at_most_half_alpha():
    """The worst case for a false FLAG is a true ratio on the band edge: at most α/2 there, and
    about 0 with no difference at all."""
    rng = np.random.default_rng(7)
    at_edge = _flag_rate(lambda: _paired(rng, 30, BAND[0]), 2000)
    assert at_edge <= ALPHA / 2 + 0.01  # 2,000 simulations: binomial sd 0.0035 at 0.025
    null = _flag_rate(lambda: _paired(rng, 30, 1.0), 500)
    assert null == 0.0
    few = _flag_rate(lambda: _paired(rng, 3, BAND[0]), 2000)  # 3 pairs: t with 2 df keeps the level
    assert few <= ALPHA / 2 + 0.01


def test_unpaired_small_groups_keep_the_level():
    rng = np.random.default_rng(8)

    def unpaired(n=4, ratio=BAND[0]):
        return ratio * rng.normal(1.0, 0.2, n), rng.normal(1.0, 0.2, n), None

    rate = 0
    for _ in range(2000):
        x, y, _ = unpaired()
        result = ratio_interval(x, y, band=BAND, confidence=1 - ALPHA)
        assert result.method == WELCH_FIELLER
        rate += result.status is DisparityStatus.FLAG
    assert rate / 2000 <= ALPHA / 2 + 0.01


def test_planted_half_ratio_at_30_paired_prompts_is_flagged():
    rng = np.random.default_rng(9)
    assert _flag_rate(lambda: _paired(rng, 30, 0.5), 200) == 1.0


def test_minimum_detectable_ratio_matches_the_flag_rate_of_the_same_interval():
    """At the stated MDR the same interval FLAGs in about 80% of simulated audits."""
    rng = np.random.default_rng(10)
    n, noise = 12, 0.25
    # se of the log ratio of paired means for this design (delta method: both sides' noise).
    se_log = math.sqrt(2) * noise / math.sqrt(n)
    mdr_low, mdr_high = minimum_detectable_ratio(se_log, n - 1, band=BAND, confidence=1 - ALPHA, power=0.8)
    assert mdr_low < BAND[0] < BAND[1] < mdr_high
    rate = _flag_rate(lambda: _paired(rng, n, mdr_low, difficulty=0.0, noise=noise), 2000)
    assert 0.72 <= rate <= 0.88, rate


def test_the_audit_that_saw_a_threefold_gap_can_now_say_so():
    """3 vs 3 prompts with a 3× acceptance gap (the case the rank test could never flag: its
    smallest p was 0.10) gets a t-based interval that excludes the band."""
    group, reference = np.array([0.18, 0.22, 0.20]), np.array([0.62, 0.58, 0.60])
    result = ratio_interval(group, reference, band=BAND)
    assert result.method == WELCH_FIELLER and result.status is DisparityStatus.FLAG
    assert result.ci_high < BAND[0] and result.min_detectable_ratio_low < BAND[0]


def test_method_follows_the_design():
    rng = np.random.default_rng(11)
    x, y = rng.normal(1, 0.1, 25), rng.normal(1, 0.1, 25)
    assert ratio_interval(x, y).method == WELCH_FIELLER
    pairs = np.arange(25).astype(object)
    paired = ratio_interval(x, y, x_pairs=pairs, y_pairs=pairs)
    assert paired.method == PAIRED_FIELLER and paired.n_pairs == 25
    few_shared = ratio_interval(x, y, x_pairs=pairs, y_pairs=np.r_[pairs[:2], pairs[2:] + 100])
    assert few_shared.method == WELCH_FIELLER  # 2 shared pairs: not a paired design
    lonely = ratio_interval(x[:1], y)
    assert lonely.status is DisparityStatus.INSUFFICIENT and "at least 2" in lonely.reason


def _tails(rng, n, n_sims, interval):
    """How often the interval of a ratio of two equal group means lies wholly below / above 1,
    on per-prompt values as skewed as acceptance rates (log-normal, σ = 0.4)."""
    below = above = 0
    for _ in range(n_sims):
        low, high = interval(rng.lognormal(0.0, 0.4, n), rng.lognormal(0.0, 0.4, n))
        below += high < 1.0
        above += low > 1.0
    return below / n_sims, above / n_sims


def _bootstrap(x, y, rng):
    values, group = np.r_[x, y], np.r_[np.ones(x.size), np.zeros(y.size)]

    def ratio(w):
        return ((w * group) @ values / (w @ group)) / ((w * (1 - group)) @ values / (w @ (1 - group)))

    result = cluster_bootstrap(ratio, values.size, strata=group.astype(int), n_boot=400, seed=int(rng.integers(1 << 31)))
    return result.ci_low, result.ci_high


def test_welch_fieller_keeps_each_tail_where_the_percentile_bootstrap_does_not():
    """Why the status never rests on the bootstrap: at 20 prompts a side its 95% interval for a
    ratio of means misses on each side about twice the nominal 2.5%; Welch–Fieller does not."""
    rng = np.random.default_rng(12)
    fieller = _tails(rng, 20, 400, lambda x, y: ratio_interval(x, y).confidence_interval())
    boot = _tails(rng, 20, 400, lambda x, y: _bootstrap(x, y, rng))
    assert max(fieller) <= 0.045 and sum(fieller) <= 0.075
    assert sum(boot) > sum(fieller)


def test_welch_fieller_keeps_each_tail_from_the_smallest_checked_group():
    """MIN_CHECKED_PROMPTS, the group size below which analysis and gate warn, is where the
    interval's level is checked; 10 is the default audit's group size."""
    rng = np.random.default_rng(13)
    for n in (MIN_CHECKED_PROMPTS, 10):
        below, above = _tails(rng, n, 2000, lambda x, y: ratio_interval(x, y).confidence_interval())
        assert max(below, above) <= 0.035, (n, below, above)  # nominal 0.025; binomial sd 0.0035


def test_group_frame_uses_pairs_and_flags_a_planted_half_ratio():
    flagged, null_flags = 0, 0
    for seed in range(6):
        records = simulate_records({"a": 0.75, "b": 0.75, "c": 0.3}, n_prompts=30, shared=0.7, spread=0.5, seed=seed)
        flags = GroupFrame(records, "group", ["acceptance_rate"], n_boot=200, seed=seed).flags(["acceptance_rate"], reference="a")
        c, b = flags.loc[("acceptance_rate", "c")], flags.loc[("acceptance_rate", "b")]
        assert c["interval_method"] == PAIRED_FIELLER and c["n_pairs"] == 30
        assert c["ratio"] < 0.6
        flagged += c["status"] == "FLAG"
        null_flags += b["status"] == "FLAG"
    assert flagged == 6 and null_flags == 0
