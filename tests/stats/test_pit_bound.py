"""The PIT distortion bound: it covers the true distortion at its stated level, for a correct
sampler (truth 0) and for mutants (truth from a large sample of the same law), and a mutant
gives a larger bound than a correct sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specaudit.stats.equivalence.pit_bound import dkw_margin, kolmogorov_distance, pit_distortion_bound

LEVEL = 0.95
N_SEEDS = 200
# Binomial(200, 0.05): at most this many misses when the bound holds at 95% (one-sided 97.5%).
MAX_MISSES = int(stats.binom.ppf(0.975, N_SEEDS, 1 - LEVEL))


def pit_sample(n_tokens, rng, *, law="correct", vocab=30, scale=2.0):
    """Randomised PIT values of n_tokens tokens, each with its own random target p_t; the token
    is drawn from p_t (correct), the draft q_t (a sampler that always accepts), p_t**0.5
    normalised (the temperature not applied: flattened) or p_t**2 (sharpened)."""
    logits = rng.normal(size=(n_tokens, vocab)) * scale
    p = np.exp(logits)
    p /= p.sum(1, keepdims=True)
    if law == "correct":
        s = p
    elif law == "always-accept":
        q = np.exp(logits + rng.normal(size=logits.shape))
        s = q / q.sum(1, keepdims=True)
    else:
        s = p ** (0.5 if law == "flattened" else 2.0)
        s /= s.sum(1, keepdims=True)
    x = (s.cumsum(1) < rng.random(n_tokens)[:, None]).sum(1).clip(max=vocab - 1)
    below = np.take_along_axis(p.cumsum(1), x[:, None], 1)[:, 0] - p[np.arange(n_tokens), x]
    return np.clip(below + rng.random(n_tokens) * p[np.arange(n_tokens), x], 0.0, 1.0)


def test_kolmogorov_distance_matches_scipy_and_margin_is_dkw():
    u = np.random.default_rng(0).random(500) ** 1.2
    assert kolmogorov_distance(u) == pytest.approx(stats.kstest(u, "uniform").statistic, abs=1e-12)
    assert dkw_margin(1000, 0.95) == pytest.approx(math.sqrt(math.log(40) / 2000))
    empty = pit_distortion_bound(np.array([np.nan]))
    assert empty.n == 0 and not empty.shown and empty.upper == 1.0


@pytest.mark.parametrize("law", ["correct", "always-accept", "flattened", "sharpened"])
def test_bound_covers_the_true_distortion_at_its_level(law):
    rng = np.random.default_rng(7)
    truth = 0.0 if law == "correct" else kolmogorov_distance(pit_sample(100_000, rng, law=law))
    bounds = [pit_distortion_bound(pit_sample(300, rng, law=law), LEVEL) for _ in range(N_SEEDS)]
    misses = sum(b.upper < truth for b in bounds)
    assert misses <= MAX_MISSES, f"{law}: the bound missed the truth {truth:.3f} in {misses} of {N_SEEDS}"
    if law in ("flattened", "sharpened"):
        assert truth > 0.04  # the mutant distorts the PIT enough for the coverage to be tested


def test_a_mutant_sampler_gives_a_larger_bound():
    rng = np.random.default_rng(3)
    correct = np.array([pit_distortion_bound(pit_sample(2000, rng)).upper for _ in range(50)])
    mutant = np.array([pit_distortion_bound(pit_sample(2000, rng, law="flattened")).upper for _ in range(50)])
    assert mutant.mean() > correct.mean() + 0.02
    assert np.mean(mutant > np.median(correct)) >= 0.9
    # the correct sampler's bound is its margin plus a D_n of order 1/sqrt(n)
    assert correct.mean() < dkw_margin(2000, LEVEL) + 2 / math.sqrt(2000)
