"""Disparity analysis: per-prompt metrics, GroupFrame, cluster bootstrap, tests, flags, drill-down."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import special, stats

from specaudit.decoding.verify import acceptance_probabilities, reference_verify
from specaudit.errors import InputError
from specaudit.stats._bootstrap import bootstrap_weights, cluster_bootstrap
from specaudit.stats._results import holm
from specaudit.stats.disparity import (
    GroupFrame,
    disparity_section,
    drilldown,
    minimum_detectable_difference,
    pairwise_test,
    per_prompt_metrics,
    simulate_records,
)


def record(prompt_id, engine, *, accepted_per_step=(), k=0, tokens=10, wall_s=1.0, timing_only=False, proposed_per_step=None, **extra):
    """A record; without ``proposed_per_step`` it is an older record that drafted k every step."""
    per_step = list(accepted_per_step)
    steps = len(per_step) if engine != "vanilla" else tokens
    if proposed_per_step is not None:
        extra["proposed_per_step"] = list(proposed_per_step)
    proposed = sum(proposed_per_step) if proposed_per_step is not None else k * len(per_step)
    return {
        "key": f"{prompt_id}|{engine}|{extra.pop('sample', 0)}",
        "prompt_id": prompt_id,
        "engine": engine,
        "pair_id": extra.pop("pair_id", None),
        "attributes": extra.pop("attributes", {"dialect": "x"}),
        "k": k,
        "steps": steps,
        "proposed": proposed,
        "accepted": sum(per_step),
        "accepted_per_step": per_step,
        "beta": extra.pop("beta", []),
        "output_token_ids": list(range(100, 100 + tokens)),
        "wall_s": wall_s,
        "ttft_s": extra.pop("ttft_s", 0.1),
        "draft_s": extra.pop("draft_s", 0.0),
        "verify_s": extra.pop("verify_s", 0.0),
        "timing_only": timing_only,
        **extra,
    }


# ---- per-prompt metrics -----------------------------------------------------------------------


def test_per_prompt_metrics_by_hand():
    rows = [
        # k = 3, steps [2, 3, 0, 1]: 6 accepted of 12 proposed, 9 positions reached, 10 tokens.
        record(
            "p1",
            "speculative",
            accepted_per_step=[2, 3, 0, 1],
            k=3,
            tokens=10,
            wall_s=1.0,
            beta=[[0.5, 0.5, 0.5], [1.0, 1.0, 1.0], [0.2, 0.2, 0.2], [0.3, 0.3, 0.3]],
            draft_s=0.3,
            verify_s=0.5,
        ),
        record("p1", "vanilla", tokens=20, wall_s=4.0),
        # Timing-only repeats: used for latency only, never for acceptance.
        record("p1", "speculative", accepted_per_step=[0, 0], k=3, tokens=10, wall_s=2.0, timing_only=True, draft_s=0.6, verify_s=1.0),
        record("p1", "vanilla", tokens=10, wall_s=3.0, timing_only=True),
    ]
    table = per_prompt_metrics(pd.DataFrame(rows))
    row = table.loc["p1"]
    assert row["acceptance_rate"] == pytest.approx(6 / 12)
    assert row["per_position_acceptance"] == pytest.approx(6 / 9)
    assert row["mean_accepted_tokens"] == pytest.approx((6 + 4) / 4)
    assert row["mean_beta"] == pytest.approx(np.mean([0.5] * 3 + [1.0] * 3 + [0.2] * 3 + [0.3] * 3))
    # Latency from the timing-only records: 0.2 s/token speculative, 0.3 s/token vanilla.
    assert row["latency_per_token_s"] == pytest.approx(0.2)
    assert row["vanilla_latency_per_token_s"] == pytest.approx(0.3)
    assert row["speedup"] == pytest.approx(1.5)
    assert row["tokens_per_s"] == pytest.approx(5.0)
    # c = (0.6 s / 6 proposed) / (1.0 s / 2 steps) = 0.2
    assert row["cost_ratio"] == pytest.approx(0.2)
    assert row["dialect"] == "x"


def short_step_records():
    """Hand-checkable records whose draft length varies from step to step.

    p1 (k = 3, budget 8 tokens) drafts 3, 3, then 2 and 0 as the budget runs out; accepted
    [0, 3, 1, 0]: step 0 reaches position 0 (rejected), step 1 all 3 (accepted), step 2
    positions 0 (accepted) and 1 (rejected), step 3 nothing. 4 accepted of 8 proposed, 6
    reached; a constant k would count 7 reached. Output 100..107, corrections at 100 and 106.
    p2 (k = 2, a heuristic draft length of 1 then 3), accepted [1, 2]: reaches 1 + 3 positions,
    3 accepted, rejection at the third position of step 1. Output 200..204, correction at 204.
    p3 is an older record without proposed_per_step (constant k = 2), accepted [1, 2]: 4
    reached, 3 accepted. The others have counters that disagree and must be left out.
    """
    g = {"g": "x"}
    return [
        record("p1", "speculative", accepted_per_step=[0, 3, 1, 0], proposed_per_step=[3, 3, 2, 0], k=3, tokens=8, attributes=g),
        record("p2", "speculative", accepted_per_step=[1, 2], proposed_per_step=[1, 3], k=2, attributes=g)
        | {"output_token_ids": list(range(200, 205))},
        record("p3", "speculative", accepted_per_step=[1, 2], k=2, tokens=5, attributes=g) | {"output_token_ids": list(range(300, 305))},
        # Sums to 5 but proposed says 6.
        record("bad-sum", "speculative", accepted_per_step=[1, 2], proposed_per_step=[2, 3], k=3, tokens=5, attributes=g) | {"proposed": 6},
        # Two entries for three steps.
        record("bad-len", "speculative", accepted_per_step=[1, 2, 0], proposed_per_step=[3, 3], k=3, tokens=6, attributes=g)
        | {"proposed": 6},
        # Step 1 accepted 2 of 1 drafted.
        record("bad-step", "speculative", accepted_per_step=[1, 2], proposed_per_step=[3, 1], k=3, tokens=5, attributes=g),
    ]


def test_per_position_acceptance_uses_the_draft_length_of_each_step():
    table = per_prompt_metrics(pd.DataFrame(short_step_records()))
    assert table.loc["p1", "reached"] == 6 and table.loc["p1", "proposed"] == 8
    assert table.loc["p1", "per_position_acceptance"] == pytest.approx(4 / 6)
    assert table.loc["p1", "acceptance_rate"] == pytest.approx(4 / 8)
    assert table.loc["p2", "per_position_acceptance"] == pytest.approx(3 / 4)
    assert table.loc["p3", "per_position_acceptance"] == pytest.approx(3 / 4)  # older record: constant k
    for name in ("bad-sum", "bad-len", "bad-step"):
        assert math.isnan(table.loc[name, "per_position_acceptance"]), name
        assert math.isfinite(table.loc[name, "acceptance_rate"]), name
    # Record fields are never read as prompt attributes.
    assert table.attrs["attributes"] == ["g"]


def test_a_record_that_drafted_nothing_reaches_no_position():
    # max_new_tokens = 1: one step with k_s = 0 emits the verifier's token alone.
    rows = [
        record("p", "speculative", accepted_per_step=[0], proposed_per_step=[0], k=4, tokens=1),
        record("q", "speculative", accepted_per_step=[2, 0], proposed_per_step=[2, 0], k=4, tokens=4),
    ]
    table = per_prompt_metrics(pd.DataFrame(rows))
    assert table.loc["p", "reached"] == 0 and math.isnan(table.loc["p", "acceptance_rate"])
    assert table.loc["q", "reached"] == 2 and table.loc["q", "per_position_acceptance"] == 1.0


def test_simulated_records_carry_proposed_per_step_and_both_paths_agree():
    from specaudit.execution.invariants import check_invariants

    records = simulate_records({"a": 0.6, "b": 0.4}, n_prompts=5, k=3, seed=4)
    assert check_invariants(records.to_dict(orient="records")) == []
    spec = records[records["engine"] == "speculative"]
    assert all(row["proposed_per_step"] == [3] * row["steps"] for _, row in spec.iterrows())
    with_field = per_prompt_metrics(records)["per_position_acceptance"]
    without = per_prompt_metrics(records.drop(columns="proposed_per_step"))["per_position_acceptance"]
    assert with_field.notna().all()
    pd.testing.assert_series_equal(with_field, without)


def test_speedup_is_per_token_so_different_lengths_do_not_bias_it():
    rows = [
        record("p", "speculative", accepted_per_step=[1, 1], k=2, tokens=4, wall_s=1.0),
        record("p", "vanilla", tokens=40, wall_s=20.0),  # longer output, same 0.5 s/token
    ]
    assert per_prompt_metrics(pd.DataFrame(rows)).loc["p", "speedup"] == pytest.approx(0.5 / 0.25)


def test_attributes_as_columns_or_dict_agree():
    records = simulate_records({"a": 0.6, "b": 0.4}, n_prompts=5, seed=3)
    expanded = records.drop(columns="attributes").assign(group=[a["group"] for a in records["attributes"]])
    left = GroupFrame(records, "group", ["acceptance_rate"], n_boot=50).by_group
    right = GroupFrame(expanded, "group", ["acceptance_rate"], n_boot=50).by_group
    pd.testing.assert_frame_equal(left, right)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda df: df.drop(columns="accepted"), "accepted"),
        (lambda df: df.iloc[0:0], "empty"),
        (lambda df: df.assign(engine="vanilla"), "speculative"),
    ],
)
def test_bad_records_raise_input_error(change, words):
    records = simulate_records({"a": 0.6}, n_prompts=3)
    with pytest.raises(InputError, match=words):
        per_prompt_metrics(change(records))


def test_bad_arguments_raise_input_error():
    records = simulate_records({"a": 0.6, "b": 0.5}, n_prompts=4)
    with pytest.raises(InputError, match="dialect"):
        GroupFrame(records, "dialect", n_boot=20)
    with pytest.raises(InputError, match="unknown metric"):
        GroupFrame(records, "group", ["acceptance"], n_boot=20)
    frame = GroupFrame(records, "group", n_boot=20)
    with pytest.raises(InputError, match="reference group"):
        frame.flags(reference="zz")
    with pytest.raises(InputError, match="tolerance"):
        frame.flags(tolerance=(1.2, 0.8))


# ---- GroupFrame -------------------------------------------------------------------------------


def test_groupframe_tables_are_consistent():
    frame = GroupFrame(simulate_records({"a": 0.7, "b": 0.6, "c": 0.45}, n_prompts=25, seed=2), "group", n_boot=300)
    values = frame.by_group.xs("value", axis=1, level="stat")
    assert list(frame.by_group.index) == ["a", "b", "c"]
    assert (frame.by_group.xs("n_prompts", axis=1, level="stat") == 25).all().all()
    difference = frame.difference("between_groups")
    assert difference.loc["acceptance_rate", "value"] == pytest.approx(values["acceptance_rate"].max() - values["acceptance_rate"].min())
    ratio = frame.ratio("between_groups")
    assert ratio.loc["speedup", "value"] == pytest.approx(values["speedup"].min() / values["speedup"].max())
    to_overall = frame.ratio("to_overall").loc["acceptance_rate", "value"]
    overall = frame.overall.loc["acceptance_rate", "value"]
    assert to_overall == pytest.approx(min(min(v / overall, overall / v) for v in values["acceptance_rate"]))
    assert frame.group_min().loc["acceptance_rate", "group"] == "c"
    assert frame.group_max().loc["latency_per_token_p50_s", "group"] == "c"
    for table in (frame.overall, difference, ratio, frame.group_min()):
        ok = table["value"].notna()
        assert (table.loc[ok, "ci_low"] <= table.loc[ok, "value"] + 1e-12).all()
        assert (table.loc[ok, "value"] <= table.loc[ok, "ci_high"] + 1e-12).all()
    # Seeded: the same call gives the same intervals.
    again = GroupFrame(simulate_records({"a": 0.7, "b": 0.6, "c": 0.45}, n_prompts=25, seed=2), "group", n_boot=300)
    pd.testing.assert_frame_equal(frame.by_group, again.by_group)


def test_planted_disparity_is_flagged_and_others_are_not():
    records = simulate_records({"a": 0.7, "b": 0.7, "c": 0.45}, n_prompts=30, seed=11)
    frame = GroupFrame(records, "group", n_boot=500, seed=1)
    flags = frame.flags(["acceptance_rate", "speedup"], reference="a")
    low = flags.loc[("acceptance_rate", "c")]
    assert low["status"] == "FLAG"
    assert low["ratio_ci_high"] < 1.0 and low["pvalue_holm"] < 0.05
    assert low["effect_size"] < -0.5  # rank-biserial: most c prompts below most a prompts
    assert flags.loc[("speedup", "c"), "status"] == "FLAG"
    for metric in ("acceptance_rate", "speedup"):
        same = flags.loc[(metric, "b")]
        assert same["status"] != "FLAG" and same["ratio_ci_low"] < 1.0 < same["ratio_ci_high"]
    assert frame.kruskal("acceptance_rate").pvalue < 1e-4


def _noisy_draft_records(noise_by_group, n_prompts=20, n_steps=8, k=4, vocab=40, seed=0):
    """Records from the real rejection step: the draft is the target's logits plus Gaussian noise,
    more noise for the disadvantaged group."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for group, noise in noise_by_group.items():
        for j in range(n_prompts):
            per_step, tokens, betas = [], [], []
            for _ in range(n_steps):
                target_logits = 2.0 * torch.randn(k + 1, vocab, generator=generator)
                draft_logits = target_logits[:k] + noise * torch.randn(k, vocab, generator=generator)
                target, draft = torch.softmax(target_logits, -1), torch.softmax(draft_logits, -1)
                drafted = torch.multinomial(draft, 1, generator=generator).squeeze(1)
                emitted = reference_verify(drafted, draft, target, generator)
                per_step.append(len(emitted) - 1)
                tokens.extend(emitted.tolist())
                betas.append(acceptance_probabilities(draft, target[:k]).tolist())
            rows.append(
                record(
                    f"{group}-{j}",
                    "speculative",
                    accepted_per_step=per_step,
                    k=k,
                    tokens=len(tokens),
                    attributes={"group": group},
                    beta=betas,
                )
                | {"output_token_ids": tokens}
            )
    return pd.DataFrame(rows)


def test_draft_made_worse_on_one_group_is_flagged_through_the_real_verify_step():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: thread start-up would dominate
    try:
        records = _noisy_draft_records({"a": 0.5, "b": 0.5, "c": 2.0})
    finally:
        torch.set_num_threads(threads)
    frame = GroupFrame(records, "group", ["acceptance_rate", "mean_beta"], n_boot=400)
    flags = frame.flags(["acceptance_rate", "mean_beta"], reference="a")
    assert flags.loc[("acceptance_rate", "c"), "status"] == "FLAG"
    assert flags.loc[("acceptance_rate", "c"), "ratio_ci_high"] < 1.0
    assert flags.loc[("mean_beta", "c"), "status"] == "FLAG"
    assert flags.loc[("acceptance_rate", "b"), "status"] != "FLAG"


def _per_prompt_rates(rng, n_prompts, mean, k=4, steps=12, spread=0.8):
    alpha = special.expit(special.logit(mean) + spread * rng.standard_normal(n_prompts))
    accepted = np.cumprod(rng.random((n_prompts, steps, k)) < alpha[:, None, None], axis=2).sum(axis=(1, 2))
    return accepted / (steps * k)


def test_pairwise_test_calibration_and_power_over_seeds():
    """Three identical groups of 15 prompts: per-comparison false alarms near 5%, family-wise
    (Holm) at most about 5%; a planted drop of per-position acceptance from 0.6 to 0.3 (a strong
    one: prompts vary a lot within a group) is caught in most seeds."""
    rng = np.random.default_rng(2024)
    n_seeds, raw, family, caught = 200, 0, 0, 0
    for _ in range(n_seeds):
        a, b, c = (_per_prompt_rates(rng, 15, 0.6) for _ in range(3))
        pvalues = [pairwise_test(b, a).pvalue, pairwise_test(c, a).pvalue]
        raw += sum(p < 0.05 for p in pvalues)
        family += (holm(pvalues) < 0.05).any()
        worse = _per_prompt_rates(rng, 15, 0.3)
        caught += holm([pairwise_test(b, a).pvalue, pairwise_test(worse, a).pvalue])[1] < 0.05
    assert 0.02 <= raw / (2 * n_seeds) <= 0.08  # 0.050 over 1,500 seeds; this seed gives 0.025
    assert family / n_seeds <= 0.08
    assert caught / n_seeds >= 0.8


def test_no_disparity_rarely_flagged_end_to_end():
    flagged = 0
    n_seeds = 40
    for seed in range(n_seeds):
        records = simulate_records({"a": 0.6, "b": 0.6, "c": 0.6}, n_prompts=12, steps=(8, 16), vanilla=False, seed=seed)
        flags = GroupFrame(records, "group", ["acceptance_rate"], n_boot=100, seed=seed).flags(["acceptance_rate"])
        flagged += (flags["status"] == "FLAG").any()
    assert flagged <= 3  # nominal family-wise rate 5%: expect about 2 of 40 at most


def test_wilcoxon_is_used_on_parallel_prompts():
    records = simulate_records({"a": 0.65, "b": 0.5}, n_prompts=25, shared=0.9, vanilla=False, seed=5)
    frame = GroupFrame(records, "group", ["acceptance_rate"], n_boot=100)
    paired = frame.pairwise("acceptance_rate", reference="a")
    unpaired = frame.pairwise("acceptance_rate", reference="a", paired=False)
    assert paired.loc["b", "test"] == "wilcoxon" and paired.loc["b", "n_pairs"] == 25
    assert paired.loc["b", "effect_size_name"] == "matched_pairs_rank_biserial"
    assert unpaired.loc["b", "test"] == "mannwhitneyu" and unpaired.loc["b", "n_pairs"] == 0
    assert paired.loc["b", "effect_size"] < 0


def test_wilcoxon_on_parallel_prompts_is_calibrated_and_more_powerful():
    """Parallel prompts (translations of one item) share most of their difficulty; pairing them
    removes it, so the signed-rank test keeps its level and gains power over Mann–Whitney."""
    rng = np.random.default_rng(99)
    n, k, steps, spread, shared = 20, 4, 12, 1.0, 0.8

    def rates(means):
        item = rng.standard_normal(n)
        out = []
        for mean in means:
            z = math.sqrt(shared) * item + math.sqrt(1 - shared) * rng.standard_normal(n)
            alpha = special.expit(special.logit(mean) + spread * z)
            out.append(np.cumprod(rng.random((n, steps, k)) < alpha[:, None, None], axis=2).sum(axis=(1, 2)) / (steps * k))
        return out

    pairs = np.arange(n)
    null = paired_power = unpaired_power = 0
    n_seeds = 200
    for _ in range(n_seeds):
        a, b = rates([0.6, 0.6])
        null += pairwise_test(b, a, group_pairs=pairs, reference_pairs=pairs).pvalue < 0.05
        a, b = rates([0.6, 0.5])
        paired_power += pairwise_test(b, a, group_pairs=pairs, reference_pairs=pairs).pvalue < 0.05
        unpaired_power += pairwise_test(b, a).pvalue < 0.05
    assert null / n_seeds <= 0.08
    assert paired_power / n_seeds >= unpaired_power / n_seeds + 0.2


def test_minimum_detectable_difference_has_about_the_stated_power():
    rng = np.random.default_rng(7)
    shift = minimum_detectable_difference(1.0, 30, 30, alpha=0.05, power=0.8)
    hits = sum(stats.mannwhitneyu(rng.standard_normal(30) + shift, rng.standard_normal(30)).pvalue < 0.05 for _ in range(300))
    # The efficiency bound (0.864) is conservative for normal data (0.955): power at least 0.8.
    assert 0.8 <= hits / 300 <= 0.95
    paired = minimum_detectable_difference(1.0, 30, alpha=0.05, power=0.8)
    assert paired == pytest.approx(shift / math.sqrt(2))


# ---- the cluster bootstrap ----------------------------------------------------------------------


def test_stratified_weights_keep_stratum_sizes():
    strata = np.array([0, 0, 0, 1, 1, 2])
    weights = bootstrap_weights(6, 50, np.random.default_rng(0), strata)
    assert (weights[:, :3].sum(axis=1) == 3).all() and (weights[:, 3:5].sum(axis=1) == 2).all()
    assert (weights[:, 5] == 1).all()


def test_cluster_bootstrap_covers_at_nominal_rate_with_correlated_tokens():
    """Prompt acceptance ~ Beta (tokens of a prompt share it). 95% intervals of the group
    acceptance rate cover the true value about 95% of the time when prompts are resampled;
    resampling steps instead, as if they were independent, covers far less."""
    rng = np.random.default_rng(12)
    k, n_prompts, n_steps, a, b = 4, 30, 20, 4.8, 3.2
    truth = sum(np.prod([(a + j) / (a + b + j) for j in range(i)]) for i in range(1, k + 1)) / k
    covered = naive_covered = 0
    reps, naive_reps = 300, 100
    for rep in range(reps):
        alpha = rng.beta(a, b, n_prompts)
        per_step = np.cumprod(rng.random((n_prompts, n_steps, k)) < alpha[:, None, None], axis=2).sum(axis=2)
        accepted = per_step.sum(axis=1).astype(float)
        proposed = np.full(n_prompts, float(n_steps * k))
        result = cluster_bootstrap(lambda w: (w @ accepted) / (w @ proposed), n_prompts, n_boot=400, seed=rng)
        covered += result.ci_low <= truth <= result.ci_high
        if rep < naive_reps:
            flat = per_step.ravel().astype(float)
            naive = cluster_bootstrap(lambda w: (w @ flat) / (w.sum(axis=1) * k), flat.size, n_boot=200, seed=rep)
            naive_covered += naive.ci_low <= truth <= naive.ci_high
    # Percentile intervals run slightly narrow at small n (about 0.93 at 20-40 prompts over
    # 1,000 repetitions); the design asks for at least 0.90.
    assert 0.90 <= covered / reps <= 0.98
    assert naive_covered / naive_reps < 0.75


def test_bca_and_percentile_agree_on_a_smooth_statistic():
    rng = np.random.default_rng(1)
    values = rng.normal(10.0, 2.0, 200)
    mean = lambda w: (w @ values) / w.sum(axis=1)
    percentile = cluster_bootstrap(mean, 200, n_boot=2000, method="percentile")
    bca = cluster_bootstrap(mean, 200, n_boot=2000, method="bca")
    half_width = 1.96 * 2.0 / math.sqrt(200)
    assert percentile.ci_high - percentile.ci_low == pytest.approx(2 * half_width, rel=0.15)
    assert abs(bca.ci_low - percentile.ci_low) < 0.1 * half_width
    assert bca.confidence_interval().high == bca.ci_high


# ---- intersections, small groups, drill-down, snapshot ------------------------------------------


def _two_dimensional_records():
    records = simulate_records({"a": 0.75, "b": 0.75, "c": 0.3}, n_prompts=24, dimension="dialect", seed=4)
    records["attributes"] = [
        {**attrs, "domain": "math" if int(pid.split("-")[1]) % 2 else "chat"}
        for attrs, pid in zip(records["attributes"], records["prompt_id"])
    ]
    return records


def test_intersections():
    frame = GroupFrame(_two_dimensional_records(), ["domain", "dialect"], n_boot=200)
    assert frame.by_group.index.names == ["domain", "dialect"]
    assert len(frame.groups) == 6
    flags = frame.flags(["acceptance_rate"], reference=("chat", "a"))
    assert flags.index.names == ["metric", "domain", "dialect"]
    assert flags.loc[("acceptance_rate", "chat", "c"), "status"] == "FLAG"
    assert flags.loc[("acceptance_rate", "math", "c"), "status"] == "FLAG"
    assert frame.value("acceptance_rate", "chat×c") == frame.value("acceptance_rate", ("chat", "c"))


def test_small_group_warns():
    records = simulate_records({"big": 0.6, "small": 0.6}, n_prompts={"big": 30, "small": 5}, seed=1)
    frame = GroupFrame(records, "group", n_boot=100)
    warnings = frame.warnings(min_prompts=20)
    assert len(warnings) == 1 and "small has 5 prompts" in warnings[0]
    flags = frame.flags(["acceptance_rate"], min_prompts=20)
    assert bool(flags.loc[("acceptance_rate", "small"), "small_group"])
    assert flags.attrs["reference"] == "big"  # "largest" picks the biggest group
    # With 5 prompts only a large drop is detectable.
    assert flags.loc[("acceptance_rate", "small"), "min_detectable_ratio_low"] < 0.8


def test_drilldown_reconstructs_steps_by_hand():
    rows = [
        # k = 3, steps [2, 3, 0, 1] over tokens 100..109: corrections at 102, 107, 109.
        record("p1", "speculative", accepted_per_step=[2, 3, 0, 1], k=3, tokens=10, attributes={"g": "x"}),
        # k = 2, steps [1, 2] but the output stops after 3 tokens (EOS inside the last step).
        record("p2", "speculative", accepted_per_step=[1, 2], k=2, tokens=3, attributes={"g": "x"}) | {"output_token_ids": [5, 6, 7]},
        # Draft length varied (heuristic schedule): cannot be reconstructed, skipped.
        record("p3", "speculative", accepted_per_step=[1, 2], k=2, tokens=5, attributes={"g": "x"}) | {"proposed": 5},
    ]
    dd = drilldown(pd.DataFrame(rows), "g", n_boot=50, rarity_edges=(10, 1000), decode=lambda ids: "".join(f"<{i}>" for i in ids))
    assert dd.skipped_records == 1
    position = dd.by_position[dd.by_position["group"] == "x"].set_index("position")
    assert position["n_positions"].tolist() == [6, 5, 2]
    assert position["n_accepted"].tolist() == [5, 3, 1]
    assert sorted(dd.corrections["token_id"]) == [6, 102, 107, 109]
    example = dd.corrections.set_index("token_id").loc[102]
    assert example["example_prompt_id"] == "p1" and example["example_position"] == 2
    assert example["example_context"] == "<100><101>⟦<102>⟧"
    rarity = dd.by_rarity[dd.by_rarity["group"] == "x"].set_index("rank_bucket")
    # Token ids as the rank proxy: 5, 6, 7 are frequent ([0, 10)), 100..109 are in [10, 1000).
    assert rarity.loc["[0, 10)", "n_positions"] == 3 and rarity.loc["[0, 10)", "n_accepted"] == 2
    assert rarity.loc["[10, 1000)", "n_positions"] == 9 and rarity.loc["[10, 1000)", "n_accepted"] == 6
    below = dd.below_threshold.set_index("group").loc["x"]
    assert below["n_below"] == 0  # p1 sits exactly at 0.5; "below" is strict


def test_drilldown_follows_short_and_empty_steps():
    dd = drilldown(pd.DataFrame(short_step_records()), "g", n_boot=50, rarity_edges=(250,))
    assert dd.skipped_records == 3
    position = dd.by_position[dd.by_position["group"] == "x"].set_index("position")
    # Position 3 exists because p2 drafted 3 tokens in a step although its k is 2.
    # Reached / accepted at positions 1, 2, 3: p1 [3, 2, 1] / [2, 1, 1]; p2 [2, 1, 1] / [2, 1, 0];
    # p3 [2, 2] / [2, 1].
    assert position.index.tolist() == [1, 2, 3]
    assert position["n_positions"].tolist() == [3 + 2 + 2, 2 + 1 + 2, 1 + 1]
    assert position["n_accepted"].tolist() == [2 + 2 + 2, 1 + 1 + 1, 1 + 0]
    assert position["value"].tolist() == pytest.approx([6 / 7, 3 / 5, 1 / 2])
    # Corrections: p1 100 and 106 (no correction in its empty last step), p2 204, p3 301.
    assert sorted(dd.corrections["token_id"]) == [100, 106, 204, 301]
    example = dd.corrections.set_index("token_id").loc[106]
    assert example["example_prompt_id"] == "p1" and example["example_position"] == 6
    rarity = dd.by_rarity[dd.by_rarity["group"] == "x"].set_index("rank_bucket")
    # Every reached position lies inside its output: p1's 6 + p2's 4 are below 250, p3's 4 above.
    assert rarity.loc["[0, 250)", "n_positions"] == 10 and rarity.loc["[0, 250)", "n_accepted"] == 7
    assert rarity.loc["[250, inf)", "n_positions"] == 4 and rarity.loc["[250, inf)", "n_accepted"] == 3


def test_drilldown_with_a_rank_table_and_low_acceptance_prompts():
    records = simulate_records({"a": 0.8, "b": 0.3}, n_prompts=10, vocab_size=1000, seed=3)
    rank = np.arange(1000)[::-1]  # reversed: token 999 is the most frequent
    dd = drilldown(records, "group", token_rank=rank, rarity_edges=(500,), n_boot=50)
    assert "rank array" in dd.rank_source
    total = dd.by_rarity[dd.by_rarity["group"] == "overall"]["n_positions"].sum()
    assert total == dd.by_position[dd.by_position["group"] == "overall"]["n_positions"].sum()
    below = dd.below_threshold.set_index("group")
    assert below.loc["b", "n_below"] > below.loc["a", "n_below"]
    assert all(rate < 0.5 for _, rate in below.loc["b", "lowest_prompts"])


def test_disparity_section_is_json_ready():
    records = _two_dimensional_records()
    section = disparity_section(
        records,
        dimensions=["dialect", ["domain", "dialect"]],
        reference={"domain×dialect": ("math", "b")},
        n_boot=100,
        decode=lambda ids: " ".join(map(str, ids)),
    )
    text = json.dumps(section, allow_nan=False, ensure_ascii=False)
    assert set(section) == {"groups", "disparities", "recommendations", "prompts"}
    assert len(section["prompts"]) == records["prompt_id"].nunique()
    assert all(set(row["attributes"]) == {"dialect", "domain"} for row in section["prompts"])
    groups = section["groups"]["domain×dialect"]["by_group"]
    assert set(groups) == {f"{d}×{g}" for d in ("chat", "math") for g in "abc"}
    metric = groups["chat×c"]["metrics"]["acceptance_rate"]
    assert set(metric) == {"value", "ci_low", "ci_high", "n_prompts", "n_tokens"} and metric["n_prompts"] == 12
    dialect = section["disparities"]["dialect"]
    assert dialect["reference"] == "a"  # not in the mapping: the largest group (ties: the first)
    assert section["disparities"]["domain×dialect"]["reference"] == "math×b"
    assert [f["group"] for f in dialect["flags"] if f["metric"] == "acceptance_rate" and f["status"] == "FLAG"] == ["c"]
    assert dialect["metrics"]["acceptance_rate"]["pairwise"]["c"]["status"] == "FLAG"
    assert dialect["metrics"]["acceptance_rate"]["kruskal"]["pvalue"] < 0.01
    assert {"by_rarity", "by_position", "corrections", "below_threshold"} <= set(dialect["drilldown"])
    assert section["recommendations"]["dialect"]["by_group"]["c"]["slowed_down"] is True
    assert "NaN" not in text


def test_overall_of_a_dimension_counts_only_its_own_prompts():
    """A prompt set whose prompts belong to different dimensions (like core): the 'overall' of
    one dimension must not mix in prompts that have no group in it."""
    import pandas as pd

    from specaudit.stats.disparity import GroupFrame, simulate_records

    ours = simulate_records({"a": 0.8, "b": 0.8}, n_prompts=10, dimension="dialect", seed=1)
    others = simulate_records({"x": 0.2}, n_prompts=10, dimension="domain", seed=2)
    others["prompt_id"] = "other-" + others["prompt_id"].astype(str)
    frame = GroupFrame(pd.concat([ours, others], ignore_index=True), "dialect", n_boot=50)
    alone = GroupFrame(ours, "dialect", n_boot=50)
    assert frame.overall.loc["acceptance_rate", "n_prompts"] == 20
    assert frame.overall.loc["acceptance_rate", "value"] == alone.overall.loc["acceptance_rate", "value"]


def test_a_group_of_one_prompt_has_no_interval_and_neither_has_an_overall_of_such_groups():
    # prompts are resampled within their group: one prompt gives every replicate the same value
    singles = simulate_records({g: 0.5 for g in "abcdef"}, n_prompts=1, seed=2)
    frame = GroupFrame(singles, "group", ["acceptance_rate"], n_boot=50)
    table = frame.by_group["acceptance_rate"]
    assert table["value"].notna().all() and table["ci_low"].isna().all() and table["ci_high"].isna().all()
    overall = frame.overall.loc["acceptance_rate"]
    assert np.isfinite(overall["value"]) and np.isnan(overall["ci_low"]) and np.isnan(overall["ci_high"])
    # one group of several prompts beside them gives the overall figure an interval again
    mixed = simulate_records({"a": 0.5, "b": 0.5}, n_prompts={"a": 4, "b": 1}, seed=2)
    frame = GroupFrame(mixed, "group", ["acceptance_rate"], n_boot=50)
    assert np.isfinite(frame.overall.loc["acceptance_rate", "ci_low"])
    assert np.isfinite(frame.by_group["acceptance_rate"].loc["a", "ci_low"]) and np.isnan(
        frame.by_group["acceptance_rate"].loc["b", "ci_low"]
    )
