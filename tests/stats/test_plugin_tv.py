"""stats.plugin_tv: the plug-in TV a correct engine's samples show, and the samples per prompt at
which tv_bound shows equivalence within δ (what the report's --samples advice asks for)."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import specaudit.stats.equivalence as eq
from specaudit.decoding.warping import SamplingSpec
from specaudit.stats.plugin_tv import SAMPLE_GRID, expected_plugin_tv, samples_to_show
from specaudit.stats.scoring import TokenScores, token_statistics


def long_tail(rng, vocab, concentration):
    return rng.dirichlet(np.full(vocab, concentration))


@pytest.mark.parametrize("vocab,concentration", [(5, 1.0), (200, 0.1), (5000, 0.02)])
def test_expected_plugin_tv_is_what_samples_show(vocab, concentration):
    rng = np.random.default_rng(vocab)
    p = long_tail(rng, vocab, concentration)
    n = np.array([1, 7, 60, 500])
    exact = expected_plugin_tv(p, n)
    draws = np.array([[0.5 * np.abs(rng.multinomial(k, p) / k - p).sum() for k in n] for _ in range(2000)])
    assert np.all(np.abs(exact - draws.mean(0)) < 4 * draws.std(0) / np.sqrt(len(draws)) + 1e-12)
    assert np.all(np.diff(exact) < 0)  # more samples, closer to p


def test_a_certain_token_shows_no_distance():
    assert np.all(expected_plugin_tv(np.eye(4)[2]) == 0)


def correct_engine_scores(p, n, rng, first):
    """TokenScores of n first tokens per prompt drawn from the target p[j] itself."""
    frames, mass = [], []
    for j in range(len(p)):
        x = rng.choice(p.shape[1], size=n, p=p[j])
        frame = pd.DataFrame(token_statistics(np.tile(p[j], (n, 1)), x))
        frame.insert(0, "key", [f"p{j}|speculative|{i}" for i in range(n)])
        frame.insert(1, "prompt_id", f"p{j}")
        frame.insert(2, "engine", "speculative")
        frame.insert(3, "position", 0)
        frame.insert(4, "token", x)
        frames.append(frame)
        for token, count in zip(*np.unique(x, return_counts=True)):
            mass.append((f"p{j}", "speculative", 0, int(token), int(count), n * p[j][token], n, n))
    columns = ["prompt_id", "engine", "position", "token", "count", "target_mass", "n_reached", "n_records"]
    return TokenScores(pd.concat(frames, ignore_index=True), pd.DataFrame(mass, columns=columns), SamplingSpec(1.0), None, first)


@pytest.mark.slow
def test_the_samples_it_asks_for_show_equivalence_with_its_power():
    """At the planned samples a correct engine's bound reaches δ in at least 80% of audits (the
    stated power); at a quarter of them it almost never does, so the plan is not padded."""
    rng = np.random.default_rng(0)
    p = np.stack([long_tail(rng, 300, 0.05) for _ in range(6)])
    first = {f"p{j}": expected_plugin_tv(p[j]) for j in range(len(p))}
    plan = samples_to_show(np.stack(list(first.values())), delta=0.1, alpha=0.05)
    assert plan.samples is not None and plan.expected_upper <= 0.1
    one = eq.tv_bound(correct_engine_scores(p, 10, rng, first), delta=0.1, alpha=0.05)
    assert one.to_show == plan and one.to_dict()["samples_to_show"]["samples"] == plan.samples

    def shown(n, reps=120):
        return sum(
            eq.tv_bound(correct_engine_scores(p, n, rng, first), delta=0.1, alpha=0.05).verdict == eq.EQUIVALENT for _ in range(reps)
        )

    at_plan, at_quarter = shown(plan.samples), shown(max(1, plan.samples // 4))
    assert stats.binomtest(at_plan, 120).proportion_ci(0.95).high >= 0.8 and at_plan / 120 >= 0.8
    assert at_quarter / 120 <= 0.05


def test_fewer_prompts_need_more_samples_each_but_fewer_in_all():
    rng = np.random.default_rng(3)
    curves = np.stack([expected_plugin_tv(long_tail(rng, 1000, 0.05)) for _ in range(16)])
    plan = samples_to_show(curves, delta=0.08, alpha=0.05)
    assert set(plan.fewer_prompts) == {8, 4, 2, 1}
    need = {16: plan.samples, **plan.fewer_prompts}
    assert all(need[a] <= need[b] for a, b in [(16, 8), (8, 4), (4, 2), (2, 1)])
    assert all(p * need[p] <= 16 * plan.samples for p in need)


def test_a_delta_below_reach_says_so():
    rng = np.random.default_rng(4)
    curves = np.stack([expected_plugin_tv(long_tail(rng, 5000, 0.5)) for _ in range(2)])
    assert curves[:, -1].mean() > 1e-3
    plan = samples_to_show(curves, delta=1e-3, alpha=0.05)
    assert plan.samples is None and plan.to_dict()["samples"] is None
    assert len(SAMPLE_GRID) == len(curves[0])
