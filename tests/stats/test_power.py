"""Power planner: formulas, monotonicity, and agreement with simulated power of our own tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from specaudit.errors import InputError
from specaudit.stats import equivalence as eq
from specaudit.stats import power as pw
from specaudit.stats.scoring import token_statistics


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_z_shift_formula():
    assert pw.z_shift(0.05, 0.8) == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    assert pw.z_shift(0.05, 0.99) == pytest.approx(1.959964 + 2.326348, abs=1e-5)
    assert pw.z_shift(0.05, 0.8, n_tests=4) == pytest.approx(stats.norm.ppf(1 - 0.05 / 8) + stats.norm.ppf(0.8))


@pytest.mark.parametrize("test", pw.POWER_TESTS)
def test_planner_is_monotone(test):
    kw = dict(test=test, categories=5)
    deltas = [0.02, 0.05, 0.1, 0.2]
    needed = [pw.samples_needed(d, **kw) for d in deltas]
    assert needed == sorted(needed, reverse=True) and needed[0] > needed[-1]
    assert pw.samples_needed(0.05, power=0.99, **kw) > pw.samples_needed(0.05, power=0.8, **kw)
    assert pw.samples_needed(0.05, alpha=0.01, **kw) > pw.samples_needed(0.05, alpha=0.05, **kw)
    assert pw.samples_needed(0.05, n_tests=4, **kw) > pw.samples_needed(0.05, **kw)
    mde = [pw.minimum_detectable_effect(n, **kw) for n in (100, 400, 1600)]
    assert mde[0] > mde[1] > mde[2]
    # the planner and the MDE are inverses: n samples detect δ, a quarter of them do not
    n = pw.samples_needed(0.05, **kw)
    assert pw.minimum_detectable_effect(n, **kw) <= 0.05 < pw.minimum_detectable_effect(max(1, n // 4), **kw)
    assert pw.detection_power(0.05, n, **kw) >= 0.8 - 1e-9


def test_martingale_scales_as_one_over_root_n_and_counts_samples():
    assert pw.minimum_detectable_effect(400) == pytest.approx(pw.z_shift() / 20)
    tokens = pw.samples_needed(0.1)
    assert tokens == int(np.ceil((pw.z_shift() / 0.1) ** 2))
    assert pw.samples_needed(0.1, tokens_per_sample=24) == int(np.ceil(tokens / 24))
    assert pw.samples_needed(0.05, test="first_token", equal_reference=True) >= 2 * pw.samples_needed(0.05, test="first_token") - 1


def test_bad_planner_input_is_named():
    with pytest.raises(InputError, match="power"):
        pw.samples_needed(0.1, power=1.0)
    with pytest.raises(InputError, match="positive"):
        pw.samples_needed(0.0)
    with pytest.raises(InputError, match="unknown test"):
        pw.samples_needed(0.1, test="mmd")
    with pytest.raises(InputError, match="categories"):
        pw.samples_needed(0.1, test="first_token", categories=1)


def test_budget_report_has_every_figure():
    report = pw.minimum_detectable_effects(720, 30, n_prompts=1, categories=10)
    assert set(report) == {"z_shift", "martingale_mu", "pit_tv", "first_token_tv", "first_token_tv_two_sample"}
    assert report["first_token_tv_two_sample"] > report["first_token_tv"]


# ------------------------------------------------------------------ agreement with simulation
def _fixed_distribution(seed, vocab=20):
    rng = np.random.default_rng(seed)
    p = np.exp(rng.normal(size=vocab) * 1.5)
    return p / p.sum()


def _sharpen(p, gamma):
    s = p**gamma
    return s / s.sum()


def _frames(p, s, n_tokens, reps, seed):
    rng = np.random.default_rng(seed)
    x = rng.choice(p.size, size=(reps, n_tokens), p=s)
    st = pd.DataFrame(token_statistics(np.tile(p, (reps * n_tokens, 1)), x.reshape(-1)))
    st["rep"] = np.repeat(np.arange(reps), n_tokens)
    return st


def test_martingale_planner_matches_simulated_power():
    p = _fixed_distribution(1)
    s = _sharpen(p, 1.15)
    logp = np.log(p)
    entropy = -(p * logp).sum()
    mu = (s * (-logp - entropy)).sum() / np.sqrt((p * (-logp - entropy) ** 2).sum())
    n = pw.samples_needed(abs(mu), test="martingale", power=0.8)
    frame = _frames(p, s, n, 300, seed=2)
    power = np.mean([eq.surprisal_martingale(sub).pvalue < 0.05 for _, sub in frame.groupby("rep")])
    assert 0.7 <= power <= 0.92, (n, power)  # the formula is the normal approximation itself


def test_pit_planner_is_conservative_for_a_monotone_distortion():
    p = _fixed_distribution(3)
    s = _sharpen(p, 1.3)
    delta = 0.5 * np.abs(s - p).sum()
    n = pw.samples_needed(delta, test="pit", power=0.8)
    rejected_full, rejected_quarter = [], []
    for n_tokens, out in ((n, rejected_full), (n // 4, rejected_quarter)):
        frame = _frames(p, s, n_tokens, 200, seed=4)
        for r, sub in frame.groupby("rep"):
            out.append(eq.pit_uniformity(sub, seed=int(r)).ks.pvalue < 0.05)
    assert np.mean(rejected_full) >= 0.78  # a lower bound on power (measured ~0.9)
    assert np.mean(rejected_quarter) < 0.8


def test_first_token_planner_is_conservative_for_the_two_sample_g_test():
    p = _fixed_distribution(5, vocab=6)
    s = _sharpen(p, 1.6)
    delta = 0.5 * np.abs(s - p).sum()
    n = pw.samples_needed(delta, test="first_token", categories=6, equal_reference=True)
    rng = np.random.default_rng(6)
    hits = []
    for _ in range(300):
        a = np.bincount(rng.choice(6, size=n, p=s), minlength=6)
        b = np.bincount(rng.choice(6, size=n, p=p), minlength=6)
        keep = (a + b) > 0
        table = np.vstack([a[keep], b[keep]])
        g = stats.chi2_contingency(table, correction=False, lambda_="log-likelihood")
        hits.append(g.pvalue < 0.05)
    assert np.mean(hits) >= 0.78, (n, np.mean(hits))
