"""Context length as an audit axis (specaudit.stats.context): bands, acceptance by output position
(calibrated and powered), the prompt-length trend and the length fallback."""

from __future__ import annotations

import numpy as np
import pandas as pd

from specaudit.stats.context import (
    acceptance_by_output_position,
    acceptance_by_prompt_length,
    context_band,
    context_section,
    length_fallback,
    with_context_band,
)


def test_prompt_bands_have_the_documented_edges():
    assert [context_band(n) for n in (0, 255, 256, 1023, 1024, 4095, 4096, 9000)] == [
        "<256",
        "<256",
        "256-1k",
        "256-1k",
        "1k-4k",
        "1k-4k",
        "4k+",
        "4k+",
    ]


def test_the_band_is_added_to_copies_and_a_prompt_attribute_of_that_name_wins():
    records = [{"prompt_id": "a", "prompt_token_ids": [0] * 300, "attributes": {"group": "x"}}]
    banded = with_context_band(records)
    assert banded[0]["attributes"] == {"group": "x", "context": "256-1k"} and records[0]["attributes"] == {"group": "x"}
    own = [{"prompt_id": "a", "prompt_token_ids": [0] * 300, "attributes": {"context": "rag"}}]
    assert with_context_band(own) is own


def _engine_record(pid: str, accepted: list[int], proposed: list[int], prompt_tokens: int = 10) -> dict:
    return {
        "prompt_id": pid,
        "engine": "speculative",
        "prompt_token_ids": [0] * prompt_tokens,
        "accepted_per_step": accepted,
        "proposed_per_step": proposed,
        "accepted": sum(accepted),
        "proposed": sum(proposed),
    }


def test_engine_steps_are_placed_at_the_output_positions_they_drafted():
    # Step 1 (start 0) keeps 2 of 3: positions 0, 1 kept, 2 rejected; it emits 3 tokens. Step 2 (start 3)
    # rejects its first draft (position 3). Step 3 (start 4) keeps all 3 (positions 4-6) and emits 4 tokens.
    # Step 4 (start 8) keeps 12: positions 8-15 in the first band, 16-19 in the second; step 5 (start 21): 21-32.
    record = _engine_record("p", [2, 0, 3, 12, 12], [3, 3, 3, 12, 12])
    result = acceptance_by_output_position([record], "speculative", n_boot=20)
    first, second = result["bands"]
    assert (first["band"], first["n_positions"], first["value"]) == ("0-15", 3 + 1 + 3 + 8, (2 + 0 + 3 + 8) / 15)
    assert (second["band"], second["n_positions"], second["value"]) == ("16-63", 4 + 12, 1.0)


def test_screen_records_use_the_acceptance_probability_at_each_output_position():
    record = {"prompt_id": "p", "engine": "screen", "prompt_token_ids": [0] * 5, "position_accept": [1.0, 0.5] + [0.25] * 18}
    bands = acceptance_by_output_position([record], "screen", n_boot=20)["bands"]
    assert [b["band"] for b in bands] == ["0-15", "16-63"]
    assert np.isclose(bands[0]["value"], (1.5 + 14 * 0.25) / 16) and bands[1]["value"] == 0.25


def _simulated_prompt(pid: str, rng, alpha_at, *, k: int = 4, tokens: int = 128) -> dict:
    """One speculative run whose drafted position t is kept with probability alpha_at(t)."""
    accepted, proposed, position = [], [], 0
    while position < tokens:
        kept = 0
        while kept < k and rng.random() < alpha_at(position + kept):
            kept += 1
        accepted.append(kept)
        proposed.append(k)
        position += kept + 1
    return _engine_record(pid, accepted, proposed)


def test_the_output_position_trend_is_calibrated_and_finds_a_fall():
    rng = np.random.default_rng(7)
    covered = found = 0
    for trial in range(60):
        flat = [_simulated_prompt(f"p{i}", rng, lambda t: 0.7) for i in range(30)]
        trend = acceptance_by_output_position(flat, "speculative", n_boot=300, seed=trial)["trend"]
        covered += trend["ci_low"] <= 1.0 <= trend["ci_high"]
        falling = [_simulated_prompt(f"p{i}", rng, lambda t: 0.8 if t < 64 else 0.6) for i in range(30)]
        trend = acceptance_by_output_position(falling, "speculative", n_boot=300, seed=trial)["trend"]
        found += trend["falls"]
    assert covered >= 52  # 95% nominal: 57 of 60 expected; 52 is 3 standard errors below
    assert found >= 54  # 0.8 -> 0.6 over 30 prompts of 128 tokens is found nearly always


def test_the_prompt_length_trend_is_calibrated_and_finds_a_fall():
    rng = np.random.default_rng(3)
    rejected = found = 0
    for _ in range(200):
        lengths = rng.integers(50, 3000, size=30)
        flat = [_engine_record(f"p{i}", [int(a)], [20], int(n)) for i, (n, a) in enumerate(zip(lengths, rng.binomial(20, 0.6, 30)))]
        trend = acceptance_by_prompt_length(flat, "speculative")
        rejected += trend["falls"] or trend["rises"]
        alphas = 0.8 - 0.3 * lengths / 3000
        falling = [_engine_record(f"p{i}", [int(rng.binomial(20, a))], [20], int(n)) for i, (n, a) in enumerate(zip(lengths, alphas))]
        found += acceptance_by_prompt_length(falling, "speculative")["falls"]
    assert rejected <= 20  # two-sided 5%: 10 of 200 expected
    assert found >= 180


def test_every_prompt_keeping_the_same_share_has_no_length_trend_and_no_warning():
    # greedy runs where every draft is kept (an identity draft) or none: a constant rate has no rank correlation
    import warnings

    same = [_engine_record(f"p{i}", [4], [4], n) for i, n in enumerate((40, 90, 300, 700))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert acceptance_by_prompt_length(same, "speculative") is None


def test_kruskal_on_identical_values_is_no_evidence_without_a_warning():
    import warnings

    from specaudit.stats.disparity.rank_tests import kruskal_test

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = kruskal_test([np.ones(3), np.ones(4), np.ones(2)])
    assert (result.statistic, result.pvalue) == (0.0, 1.0)
    assert kruskal_test([np.array([1.0, 2.0, 3.0]), np.array([7.0, 8.0, 9.0])]).pvalue < 0.1


def _per_prompt(lengths: dict[str, int], vanilla: dict[str, float], speculative: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame(
        {"vanilla_latency_per_token_s": vanilla, "latency_per_token_s": speculative},
        index=pd.Index(list(lengths), name="prompt_id"),
    )


def test_the_length_fallback_names_the_threshold_that_pays():
    lengths = {"s1": 100, "s2": 120, "m1": 600, "l1": 2000, "l2": 2500}
    vanilla = dict.fromkeys(lengths, 0.02)
    speculative = {"s1": 0.01, "s2": 0.01, "m1": 0.012, "l1": 0.04, "l2": 0.04}  # long prompts are slowed down 2x
    fallback = length_fallback(_per_prompt(lengths, vanilla, speculative), lengths)
    assert [o["min_prompt_tokens"] for o in fallback["options"]] == [256, 1024]
    best = fallback["advised"]
    assert best["min_prompt_tokens"] == 1024 and best["n_routed"] == 2
    assert np.isclose(best["speedup_before"], 0.1 / 0.112) and np.isclose(best["speedup_after"], 0.1 / 0.072)
    even = {pid: 0.01 for pid in lengths}  # every prompt gains alike: no threshold is advised
    assert length_fallback(_per_prompt(lengths, vanilla, even), lengths)["advised"] is None


def test_the_section_states_its_findings_in_sentences():
    rng = np.random.default_rng(0)
    records = [_simulated_prompt(f"p{i}", rng, lambda t: 0.8 if t < 64 else 0.4) for i in range(20)]
    for i, record in enumerate(records):
        record["prompt_token_ids"] = [0] * (100 + 150 * i)
    part = context_section(records, "speculative", n_boot=200)
    assert part["prompt_bands"] == {"<256": 2, "256-1k": 5, "1k-4k": 13}
    assert part["by_output_position"]["trend"]["falls"]
    assert any(
        f.startswith("Per-position acceptance falls along the output: output positions 64-255 against 0-15") for f in part["findings"]
    )
    assert part["length_fallback"] is None  # no vanilla timings given
