"""Advice: the speed-up model, best draft length, break-even acceptance, fallback simulation."""

import numpy as np
import pandas as pd
import pytest

from specaudit.errors import InputError
from specaudit.stats.advice import (
    acceptance_rate_from_alpha,
    alpha_from_tokens_per_step,
    best_draft_length,
    break_even_alpha,
    expected_speedup,
    expected_tokens_per_step,
    recommendations,
    simulate_fallback,
)
from specaudit.stats.disparity import GroupFrame, simulate_records


def test_formula_edge_cases():
    # α = 0: every step emits one token and pays for k drafts.
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_speedup(0.0, 4, 0.25) == pytest.approx(1.0 / 2.0)
    # α = 1: k + 1 tokens per step (the limit, not 0/0).
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_speedup(1.0, 4, 0.25) == pytest.approx(5.0 / 2.0)
    # k = 1: (1 + α) / (c + 1).
    assert expected_speedup(0.6, 1, 0.1) == pytest.approx(1.6 / 1.1)
    # Continuity at α → 1 and vectorised use.
    assert expected_tokens_per_step(1 - 1e-9, 3) == pytest.approx(4.0, rel=1e-6)
    np.testing.assert_allclose(expected_speedup(np.array([0.0, 0.5, 1.0]), 2, 0.0), [1.0, 1.75, 3.0])


def test_formula_matches_simulation_of_iid_acceptances():
    rng = np.random.default_rng(0)
    alpha, k = 0.7, 4
    per_step = np.cumprod(rng.random((200_000, k)) < alpha, axis=1).sum(axis=1)
    assert (per_step + 1).mean() == pytest.approx(expected_tokens_per_step(alpha, k), rel=0.01)
    assert per_step.mean() / k == pytest.approx(acceptance_rate_from_alpha(alpha, k), rel=0.01)


def test_bad_formula_input():
    with pytest.raises(InputError):
        expected_speedup(1.2, 4, 0.1)
    with pytest.raises(InputError):
        expected_tokens_per_step(0.5, 2.5)


def test_best_draft_length_is_the_argmax_and_declines_when_nothing_pays():
    for alpha, c in [(0.9, 0.05), (0.7, 0.3), (0.5, 0.1)]:
        k, value = best_draft_length(alpha, c, k_max=8)
        brute = max(range(1, 9), key=lambda kk: expected_speedup(alpha, kk, c))
        assert k == brute and value == pytest.approx(expected_speedup(alpha, brute, c))
    assert best_draft_length(0.9, 0.05)[0] > best_draft_length(0.5, 0.1)[0]
    assert best_draft_length(0.2, 0.5) == (0, 1.0)  # speculation cannot pay: α < c


def test_break_even_alpha():
    even = break_even_alpha(4, 0.3)
    assert expected_speedup(even, 4, 0.3) == pytest.approx(1.0, abs=1e-9)
    assert expected_speedup(even - 0.01, 4, 0.3) < 1.0 < expected_speedup(even + 0.01, 4, 0.3)
    assert break_even_alpha(3, 0.0) == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(break_even_alpha(4, 1.2))
    # Break-even in accepted/proposed terms is c itself, for any k: τ = 1 + k·rate = k·c + 1.
    for k in (1, 3, 6):
        assert acceptance_rate_from_alpha(break_even_alpha(k, 0.2), k) == pytest.approx(0.2)


def test_alpha_from_tokens_per_step_inverts_the_model():
    for alpha in (0.0, 0.3, 0.77, 1.0):
        assert alpha_from_tokens_per_step(expected_tokens_per_step(alpha, 4), 4) == pytest.approx(alpha, abs=1e-6)
    assert np.isnan(alpha_from_tokens_per_step(2.0, 0))


def test_fallback_arithmetic_by_hand():
    # Per-token times in ms; acceptance decides routing at x = 0.5 (p2 and p3 go to vanilla).
    table = pd.DataFrame(
        {
            "acceptance_rate": [0.8, 0.3, 0.2, 0.6],
            "vanilla_latency_per_token_s": [10.0, 10.0, 10.0, 10.0],
            "latency_per_token_s": [5.0, 20.0, 25.0, 8.0],
        },
        index=["p1", "p2", "p3", "p4"],
    )
    result = simulate_fallback(table, ["A", "A", "B", "B"], 0.5, reference="A")
    assert result.loc["A", "speedup_before"] == pytest.approx(20 / 25)
    assert result.loc["A", "speedup_after"] == pytest.approx(20 / 15)
    assert result.loc["B", "speedup_before"] == pytest.approx(20 / 33)
    assert result.loc["B", "speedup_after"] == pytest.approx(20 / 18)
    assert result.loc["overall", "speedup_after"] == pytest.approx(40 / 33)
    assert result.loc["A", "latency_per_token_after_s"] == pytest.approx(7.5)
    assert result.loc["B", "n_routed"] == 1 and result.loc["overall", "share_routed"] == pytest.approx(0.5)
    assert result.loc["B", "ratio_to_reference_before"] == pytest.approx((20 / 33) / (20 / 25))
    assert result.loc["B", "ratio_to_reference_after"] == pytest.approx((20 / 18) / (20 / 15))
    assert result.attrs["min_max_ratio_before"] == pytest.approx((20 / 33) / (20 / 25))
    assert result.attrs["min_max_ratio_after"] == pytest.approx((20 / 18) / (20 / 15))
    # Threshold 0 routes nothing: the rule changes nothing.
    unchanged = simulate_fallback(table, ["A", "A", "B", "B"], 0.0)
    np.testing.assert_allclose(unchanged["speedup_after"], unchanged["speedup_before"])


def test_fallback_with_intersection_labels_and_bad_input():
    table = pd.DataFrame({"acceptance_rate": [0.2, 0.9], "vanilla_latency_per_token_s": [1.0, 1.0], "latency_per_token_s": [2.0, 0.5]})
    result = simulate_fallback(table, [("math", "a"), ("chat", "b")], 0.5)
    assert set(result.index) == {"math×a", "chat×b", "overall"}
    assert result.loc["math×a", "speedup_after"] == pytest.approx(1.0)
    with pytest.raises(InputError, match="labels"):
        simulate_fallback(table, ["x"], 0.5)
    with pytest.raises(InputError, match="lacks"):
        simulate_fallback(table.drop(columns="latency_per_token_s"), ["x", "y"], 0.5)


def test_black_box_engine_gets_alpha_from_tokens_per_step():
    records = simulate_records({"a": 0.7, "b": 0.4}, n_prompts=12, seed=2).drop(columns=["accepted_per_step", "beta"])
    advice = recommendations(GroupFrame(records, "group", n_boot=100))
    entry = advice["by_group"]["a"]
    assert entry["alpha_source"].startswith("mean_accepted_tokens")
    assert 0.5 < entry["alpha"] < 0.9 and entry["expected_speedup"] is not None


def test_recommendations_on_a_group_that_speculation_slows_down():
    # Timings follow the model exactly (plus 5% noise), so measured ≈ τ / (k·c + 1).
    records = simulate_records({"fast": 0.85, "slow": 0.35}, n_prompts=25, cost_ratio=0.3, seed=8)
    frame = GroupFrame(records, "group", n_boot=300)
    advice = recommendations(frame, reference="fast", threshold=0.5)
    fast, slow = advice["by_group"]["fast"], advice["by_group"]["slow"]
    assert slow["slowed_down"] and slow["slowed_down_significantly"] and not fast["slowed_down"]
    assert slow["measured_speedup"]["value"] == pytest.approx(slow["expected_speedup_from_measured_tau"], rel=0.1)
    assert fast["measured_speedup"]["value"] == pytest.approx(fast["expected_speedup_from_measured_tau"], rel=0.1)
    assert fast["cost_ratio"] == pytest.approx(0.3)
    assert slow["best_k"] < fast["best_k"]
    assert fast["best_k"] == best_draft_length(fast["alpha"], fast["cost_ratio"])[0]
    assert any("slows group=slow down" in m for m in advice["messages"])
    assert any("exceeds 0.30 (c + (v − 1)/k with c = 0.30, v = 1.00" in m for m in advice["messages"])
    fallback = advice["fallback"]
    assert fallback["by_group"]["slow"]["speedup_after"] > fallback["by_group"]["slow"]["speedup_before"]
    assert fallback["min_max_speedup_ratio_after"] > fallback["min_max_speedup_ratio_before"]
    assert [row["threshold"] for row in fallback["sweep"]] == [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]


def test_verification_cost_enters_the_step_cost():
    # k = 4, c = 0.1, v = 2: a step costs 4·0.1 + 2 = 2.4 target steps
    assert expected_speedup(0.5, 4, 0.1, 2.0) == pytest.approx(expected_tokens_per_step(0.5, 4) / 2.4)
    assert expected_speedup(0.5, 4, 0.1) == pytest.approx(expected_tokens_per_step(0.5, 4) / 1.4)


def test_a_deployment_projection_maps_the_portable_alpha_interval_per_group():
    records = simulate_records({"good": 0.85, "poor": 0.4}, n_prompts=20, cost_ratio=0.6, seed=3)
    frame = GroupFrame(records, "group", n_boot=200)
    plain = recommendations(frame)
    assert "projection" not in plain and "projected_speedup" not in plain["by_group"]["good"]
    advice = recommendations(frame, deployment_cost_ratio=0.05, deployment_verify_cost=1.2, acceptance_rule="rule X")
    assert advice["acceptance_rule"] == "rule X"
    assert advice["projection"]["cost_ratio"] == 0.05 and "k·c + v" in advice["projection"]["formula"]
    for name in ("good", "poor"):
        row = advice["by_group"][name]
        alpha, projected = row["alpha_portable"], row["projected_speedup"]
        assert row["projected_from"] == "mean_beta"
        assert alpha["value"] == pytest.approx(frame.value("mean_beta", name, "value"))
        for key in ("value", "ci_low", "ci_high"):
            assert projected[key] == pytest.approx(expected_speedup(alpha[key], row["k"], 0.05, 1.2))
        assert projected["ci_low"] <= projected["value"] <= projected["ci_high"]
        assert row["engine_rule_rate"]["value"] == pytest.approx(frame.value("per_position_acceptance", name, "value"))
    # measured here at c = 0.6 the poor group loses; the cheap deployment's projection says it would gain
    assert advice["by_group"]["poor"]["measured_speedup"]["value"] < 1 < advice["by_group"]["poor"]["projected_speedup"]["value"]
    assert advice["by_group"]["good"]["projected_speedup"]["value"] > advice["by_group"]["poor"]["projected_speedup"]["value"]


def test_a_verification_step_dearer_than_a_plain_step_raises_the_bar():
    """With v plain steps per verification (a CPU verifying k + 1 tokens), break-even needs a higher
    α, no k pays where k·c + v ≥ k + 1 at any α, and the advice uses the machine's c and v."""
    from specaudit.stats.advice import break_even_alpha, expected_speedup

    for k, c, v in ((4, 0.1, 1.0), (4, 0.1, 2.0), (2, 0.2, 1.5)):
        even = break_even_alpha(k, c, v)
        assert expected_speedup(even, k, c, v) == pytest.approx(1.0, abs=1e-9)
    assert break_even_alpha(4, 0.1, 2.0) > break_even_alpha(4, 0.1, 1.0)
    assert np.isnan(break_even_alpha(4, 1.17, 4.18))  # the real pair under llama.cpp on one core: nothing pays
    records = simulate_records({"fast": 0.85, "slow": 0.35}, n_prompts=25, cost_ratio=0.3, seed=8)
    advice = recommendations(GroupFrame(records, "group", n_boot=100), cost_ratio=0.1, verify_cost=4.18)
    fast = advice["by_group"]["fast"]
    assert (fast["cost_ratio"], fast["verify_cost"], fast["best_k"]) == (0.1, 4.18, 0)
    assert fast["expected_speedup"] == pytest.approx(expected_speedup(fast["alpha"], fast["k"], 0.1, 4.18))
