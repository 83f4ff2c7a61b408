"""Equivalence statistics: calibrated under H0 (≥ 200 seeds), powered against biased samplers.

Most checks simulate at the distribution level (random warped categorical distributions, the
real `warp` and `token_statistics`), which is exact for these tests and fast; a smaller set
runs tiny random Llama models end to end through `score_records`.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats
from transformers import LlamaConfig, LlamaForCausalLM

from specaudit.decoding.verify import (
    acceptance_probabilities,
    reference_verify,
    sample_from,
    step_pit,
    token_acceptance_probabilities,
)
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.errors import InputError
from specaudit.selftest.mutants import MUTANTS
from specaudit.stats import equivalence as eq
from specaudit.stats.scoring import TokenScores, score_records, token_statistics

ALPHA = 0.05
N_SEEDS = 200
# Binomial(200, 0.05) central 95% interval of the number of false alarms: 4..16.
LOW, HIGH = (x / N_SEEDS for x in stats.binom.interval(0.95, N_SEEDS, ALPHA))
SPECS = [SamplingSpec(0.7, 20, 0.9), SamplingSpec(1.0, 0, 1.0)]


@pytest.fixture(autouse=True)
def _one_thread():
    # The test machine's cores are shared: small tensor ops thrash with several threads.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ============================================================ distribution-level simulation
def sharpened(gamma):
    def sampler(p, q):
        s = p**gamma
        return s / s.sum(dim=-1, keepdim=True)

    return sampler


def pulled_to_draft(weight):
    def sampler(p, q):
        s = (1 - weight) * p + weight * q * (p > 0)
        return s / s.sum(dim=-1, keepdim=True)

    return sampler


def simulate_tokens(n_rep, n_tok, *, spec, seed, sampler=None, vocab=50, scale=2.0):
    """n_rep replicate runs of n_tok tokens; each token has its own random warped target p_t
    and a draft q_t (the target's logits plus noise, same warping); x_t ~ sampler(p_t, q_t)."""
    g = torch.Generator().manual_seed(seed)
    n = n_rep * n_tok
    logits = torch.randn(n, vocab, generator=g) * scale
    p = warp(logits, spec).double()
    q = warp(logits + torch.randn(n, vocab, generator=g), spec).double()
    s = p if sampler is None else sampler(p, q)
    x = torch.multinomial(s, 1, generator=g).squeeze(1)
    frame = pd.DataFrame(token_statistics(p, x, q))
    rep = np.repeat(np.arange(n_rep), n_tok)
    frame.insert(0, "key", [f"r{r}|speculative|0" for r in rep])
    frame.insert(1, "prompt_id", [f"r{r}" for r in rep])
    frame.insert(2, "engine", "speculative")
    frame.insert(3, "position", np.tile(np.arange(n_tok), n_rep))
    frame.insert(4, "token", x.numpy())
    frame["rep"] = rep
    return frame


def rejection_rates(frame, alpha=ALPHA):
    hits = {"pit": [], "pit_ks": [], "surprisal": [], "draft_affinity": []}
    for r, sub in frame.groupby("rep", sort=True):
        pit = eq.pit_uniformity(sub, seed=int(r))
        hits["pit"].append(pit.pvalue < alpha)
        hits["pit_ks"].append(pit.ks.pvalue < alpha)
        hits["surprisal"].append(eq.surprisal_martingale(sub).pvalue < alpha)
        hits["draft_affinity"].append(eq.draft_affinity(sub).pvalue < alpha)
    return {name: float(np.mean(v)) for name, v in hits.items()}


@pytest.mark.parametrize("spec", SPECS, ids=["T0.7-topk20-topp0.9", "T1"])
def test_white_box_tests_are_calibrated_over_200_seeds(spec):
    frame = simulate_tokens(N_SEEDS, 300, spec=spec, seed=11)
    rates = rejection_rates(frame)
    for name, rate in rates.items():
        assert LOW <= rate <= HIGH, f"{name}: false-alarm rate {rate} outside [{LOW}, {HIGH}]"


def test_pit_values_are_uniform_pooled_under_h0():
    frame = simulate_tokens(1, 20000, spec=SPECS[0], seed=3)
    u = eq.pit_values(frame, seed=5)
    assert stats.kstest(u, "uniform").pvalue > 0.01
    assert 0.0 <= u.min() and u.max() <= 1.0


@pytest.mark.parametrize(
    "sampler, expected",
    [
        (sharpened(1.3), {"pit": 0.95, "surprisal": 0.95}),  # residual from a sharpened p
        (sharpened(0.8), {"pit": 0.95, "surprisal": 0.95}),  # temperature not applied (flatter)
        (pulled_to_draft(0.25), {"draft_affinity": 0.95}),  # output pulled toward the draft
    ],
    ids=["sharpened", "flattened", "pulled-to-draft"],
)
def test_white_box_tests_catch_biased_samplers(sampler, expected):
    frame = simulate_tokens(50, 800, spec=SPECS[0], seed=21, sampler=sampler)
    rates = rejection_rates(frame)
    for name, minimum in expected.items():
        assert rates[name] >= minimum, f"{name}: power {rates[name]} < {minimum}"


def test_directions_of_the_z_statistics():
    sharp = simulate_tokens(1, 3000, spec=SPECS[1], seed=2, sampler=sharpened(1.3))
    pulled = simulate_tokens(1, 3000, spec=SPECS[1], seed=2, sampler=pulled_to_draft(0.3))
    assert eq.surprisal_martingale(sharp).statistic < -3  # more predictable than the target
    assert eq.draft_affinity(pulled).statistic > 3  # closer to the draft
    ci = eq.surprisal_martingale(sharp).confidence_interval()
    assert ci.high < 0 and ci.low < ci.high


def test_anderson_darling_uniform_matches_known_quantiles():
    # asymptotic A² critical values: 1.933 (10%), 2.492 (5%), 3.857 (1%)
    for a2, level in [(1.933, 0.10), (2.492, 0.05), (3.857, 0.01)]:
        assert 1 - eq._adinf_cdf(a2) == pytest.approx(level, abs=5e-4)


# ============================================================ impossible tokens
def test_impossible_token_is_a_hard_failure_naming_the_record():
    frame = simulate_tokens(1, 400, spec=SPECS[0], seed=4)
    row = frame.index[17]
    frame.loc[row, ["p", "surprisal"]] = [0.0, math.inf]
    found = eq.impossible_tokens(frame)
    assert found.verdict == "FAIL" and found.statistic == 1
    assert found.offenders == ((frame.loc[row, "key"], int(frame.loc[row, "position"]), int(frame.loc[row, "token"])),)
    battery = eq.goodness_of_fit(frame, by=())
    assert battery.verdict == "FAIL"
    assert battery.gate["reject"].sum() == 0  # the rest of the battery sees nothing wrong
    assert eq.impossible_tokens(simulate_tokens(1, 400, spec=SPECS[0], seed=4)).verdict == "PASS"


# ============================================================ acceptance calibration
def simulate_steps(n_rep, n_steps, *, seed, rule="correct", k=4, vocab=30):
    """Verification steps with random warped p_i, q_i per drafted position; the acceptance rule
    is applied exactly as a sampler would (draw x ~ q, accept with the rule's probability)."""
    rng = np.random.default_rng(seed)
    shape = (n_rep, n_steps, k, vocab)
    logits = rng.normal(size=shape) * 2
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    dl = logits + rng.normal(size=shape)
    q = np.exp(dl) / np.exp(dl).sum(-1, keepdims=True)
    cdf = np.cumsum(q, -1)
    x = np.minimum((cdf < rng.random(shape[:-1])[..., None]).sum(-1), vocab - 1)
    px = np.take_along_axis(p, x[..., None], -1)[..., 0]
    qx = np.take_along_axis(q, x[..., None], -1)[..., 0]
    if rule == "correct":
        prob = np.minimum(1, px / qx)
    elif rule == "power0.8":  # accept with (p/q)^0.8
        prob = np.minimum(1, (px / qx) ** 0.8)
    elif rule == "q-floor":  # acceptance ratio with q floored at 0.05
        prob = np.minimum(1, px / np.maximum(qx, 0.05))
    accept = rng.random(prob.shape) < prob
    leading = np.cumprod(accept, axis=-1).sum(-1)  # accepted drafted tokens per step
    beta = np.minimum(p, q).sum(-1)
    records = []
    for r in range(n_rep):
        steps = leading[r].tolist()
        records.append(
            {
                "key": f"s{r}|speculative|0",  # not the keys of simulate_tokens: unrelated data
                "prompt_id": f"s{r}",
                "engine": "speculative",
                "k": k,
                "accepted_per_step": steps,
                "beta": beta[r].tolist(),
                "output_token_ids": [0] * sum(a + 1 for a in steps),
                "attributes": {"half": "a" if r % 2 else "b"},
            }
        )
    return records


def test_acceptance_calibration_is_calibrated_over_200_seeds():
    records = simulate_steps(N_SEEDS, 60, seed=8)
    rejected = [eq.acceptance_calibration([r]).pvalue < ALPHA for r in records]
    assert LOW <= np.mean(rejected) <= HIGH


@pytest.mark.parametrize("rule, sign", [("power0.8", 1), ("q-floor", -1)])
def test_acceptance_calibration_catches_wrong_acceptance_rules(rule, sign):
    records = simulate_steps(40, 1000, seed=9, rule=rule)
    results = [eq.acceptance_calibration([r]) for r in records]
    assert np.mean([r.pvalue < ALPHA for r in results]) >= 0.95
    assert np.median([r.statistic for r in results]) * sign > 0


def test_acceptance_indicators_walk_the_steps():
    record = {
        "key": "a|speculative|0",
        "prompt_id": "a",
        "engine": "speculative",
        "k": 3,
        "accepted_per_step": [3, 0, 1],
        "beta": [[0.9, 0.8, 0.7], [0.6, 0.5, 0.4], [0.3, 0.2, 0.1]],
        "output_token_ids": list(range(4 + 1 + 2)),
    }
    table = eq.acceptance_indicators([record])
    # step 0: all 3 accepted (positions 0..2, bonus at 3, no rejection reached);
    # step 1: rejected at its first drafted position (output position 4);
    # step 2: accepted one, rejected at the second (positions 5, 6)
    assert table["position"].tolist() == [0, 1, 2, 4, 5, 6]
    assert table["accepted"].tolist() == [1, 1, 1, 0, 1, 0]
    assert table["beta"].tolist() == [0.9, 0.8, 0.7, 0.6, 0.3, 0.2]
    bad = dict(record, output_token_ids=list(range(20)))
    with pytest.raises(InputError, match="accepted_per_step"):
        eq.acceptance_indicators([bad])


def test_acceptance_uses_the_drafted_tokens_probability_and_fails_on_impossible_decisions():
    record = {
        "key": "a|speculative|0",
        "prompt_id": "a",
        "engine": "speculative",
        "k": 2,
        "accepted_per_step": [2, 0],
        "beta": [[0.9, 0.8], [0.6, 0.5]],
        "accept_prob": [[1.0, 0.3], [0.2, 0.7]],
        "output_token_ids": list(range(4)),
    }
    table = eq.acceptance_indicators([record])
    assert table["beta"].tolist() == [1.0, 0.3, 0.2] and set(table["beta_source"]) == {"drafted token"}
    assert eq.acceptance_calibration(table).pvalue > 0.05
    # rejecting a drafted token with p >= q (min(1, p/q) = 1) is impossible for a correct verifier
    impossible = dict(record, accept_prob=[[1.0, 0.3], [1.0, 0.7]])
    result = eq.acceptance_calibration([impossible])
    assert result.pvalue == 0.0 and result.statistic == -math.inf and "1 impossible" in result.method


def test_engine_acceptance_probabilities_make_a_sharper_test_than_beta():
    """Conditioning on the drafted token takes the draft's sampling noise out: on the same
    steps of a one-uniform-per-step sampler, the z of min(1, p/q) exceeds the z of β."""
    spec = SamplingSpec(1.0)
    g = torch.Generator().manual_seed(5)
    rows = []
    for _ in range(800):
        logits = torch.randn(5, 40, generator=g) * 2
        p, q = warp(logits, spec), warp(logits[:4] + 1.5 * torch.randn(4, 40, generator=g), spec)
        drafted = torch.tensor([sample_from(q[i], g) for i in range(4)])
        n_accepted = len(MUTANTS["shared_uniform"](drafted, q, p, g)) - 1
        ratio = token_acceptance_probabilities(drafted, q, p)
        beta = acceptance_probabilities(q, p)
        for i in range(min(n_accepted + 1, 4)):
            rows.append((int(i < n_accepted), float(ratio[i]), float(beta[i])))
    accepted, ratio, beta = np.asarray(rows).T
    z_ratio = eq.acceptance_calibration(pd.DataFrame({"accepted": accepted, "beta": ratio})).statistic
    z_beta = eq.acceptance_calibration(pd.DataFrame({"accepted": accepted, "beta": beta})).statistic
    assert z_ratio > z_beta > 3


def test_acceptance_indicators_follow_short_steps_near_the_length_budget():
    # k = 3, budget 8 tokens: the engine drafts 3, 3, then 2 and 0 as the budget runs out.
    base = {
        "key": "b|speculative|0",
        "prompt_id": "b",
        "engine": "speculative",
        "k": 3,
        "accepted_per_step": [0, 3, 1, 0],
        "proposed_per_step": [3, 3, 2, 0],
        "proposed": 8,
        "output_token_ids": list(range(8)),
    }
    # Our engine: one β per drafted token (none in the empty step).
    ours = dict(base, beta=[[0.9, 0.8, 0.7], [0.6, 0.5, 0.4], [0.3, 0.2], []])
    table = eq.acceptance_indicators([ours])
    # step 0 rejected at output position 0; step 1 accepted positions 1..3 (bonus at 4); step 2
    # accepted 5 and rejected 6; step 3 drafted nothing (7 is the verifier's token alone).
    assert table["step"].tolist() == [0, 1, 1, 1, 2, 2]
    assert table["draft_position"].tolist() == [0, 0, 1, 2, 0, 1]
    assert table["position"].tolist() == [0, 1, 2, 3, 5, 6]
    assert table["accepted"].tolist() == [0, 1, 1, 1, 1, 0]
    assert table["beta"].tolist() == [0.9, 0.6, 0.5, 0.4, 0.3, 0.2]

    # hf-assisted: no β of its own; β from the scores, and the step lengths from the record only.
    # With a constant k the empty last step would count output position 7 as a rejected draft.
    hf = dict(base, key="b|hf-assisted|0", engine="hf-assisted", beta=[])
    scores = pd.DataFrame({"key": hf["key"], "position": range(8), "p": 0.5, "beta": np.linspace(0.1, 0.8, 8)})
    table = eq.acceptance_indicators([hf], scores)
    assert table["position"].tolist() == [0, 1, 2, 3, 5, 6]
    assert table["accepted"].tolist() == [0, 1, 1, 1, 1, 0]
    assert table["beta"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.6, 0.7])
    assert set(table["beta_source"]) == {"scores"}
    z = eq.acceptance_calibration(table)
    beta = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7])
    expected = (np.array([0, 1, 1, 1, 1, 0]) - beta).sum() / math.sqrt((beta * (1 - beta)).sum())
    assert z.statistic == pytest.approx(expected) and z.n == 6

    for broken in ({"proposed_per_step": [3, 3, 2]}, {"proposed_per_step": [3, 2, 2, 1]}, {"proposed": 9}):
        with pytest.raises(InputError, match="proposed_per_step"):
            eq.acceptance_indicators([dict(ours, **broken)])


# ============================================================ step PIT
def test_step_pit_uses_the_law_of_each_role():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.2, 0.6, 0.2, 0.0], [0.4, 0.4, 0.15, 0.05]])
    # accepted token 1 at position 0: law min(p, q)/β = (0.2, 0.3, 0.2, 0)/0.7, token 1 ranks first;
    # correction 2 at position 1: residual max(0, p − q) = (0, 0, 0.15, 0.35)/0.5, after token 3
    np.testing.assert_allclose(step_pit(q, p, torch.tensor([1, 2])), [[0.0, 3 / 7], [0.7, 0.3]])
    # all accepted: token 0 at position 1 follows (0.1, 0.2, 0.15, 0.05)/0.5, after tokens 1 and 2;
    # the bonus follows p_2 (uniform: ties by id, token 2 after tokens 0 and 1)
    np.testing.assert_allclose(step_pit(q, p, torch.tensor([1, 0, 2])), [[0.0, 3 / 7], [0.7, 0.2], [0.5, 0.25]])
    # a correction the residual cannot produce (token 0: q ≥ p there) sits at u = 1
    np.testing.assert_allclose(step_pit(q, p, torch.tensor([1, 0]))[1], [1.0, 0.0])


def step_pit_replicate(verify, seed, n_tokens=300, k=4, vocab=40, spec=SPECS[0]):
    """u of n_tokens emitted by `verify` on random warped (p, q) steps, as the engine records them."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    while len(parts) < n_tokens:
        logits = torch.randn(k + 1, vocab, generator=g) * 2
        p = warp(logits, spec)
        q = warp(logits[:k] + torch.randn(k, vocab, generator=g), spec)
        drafted = torch.tensor([sample_from(q[i], g) for i in range(k)])
        parts += step_pit(q, p, verify(drafted, q, p, g))
    parts = np.asarray(parts[:n_tokens])
    return np.clip(parts[:, 0] + np.random.default_rng(seed).random(n_tokens) * parts[:, 1], 0, 1)


@pytest.mark.slow
def test_step_pit_is_calibrated_over_400_seeds_and_catches_a_wrong_residual():
    # 200 seeds under each warping: the false-alarm rate over all 400 lies in the binomial 95%
    # interval of alpha, and the pooled u (60,000 tokens) are uniform
    rejected, pooled = [], []
    for spec in SPECS:
        for seed in range(N_SEEDS):
            u = step_pit_replicate(reference_verify, seed, spec=spec, n_tokens=150)
            rejected.append(eq.anderson_darling_uniform(u)[1] < ALPHA)
            pooled.append(u)
    low, high = (x / len(rejected) for x in stats.binom.interval(0.95, len(rejected), ALPHA))
    assert low <= np.mean(rejected) <= high
    assert stats.kstest(np.concatenate(pooled), "uniform").pvalue > 1e-3
    # resampling from p instead of the residual: the plain PIT sees a mixture that is close to p,
    # the step PIT sees corrections the residual gives zero mass
    caught = [eq.anderson_darling_uniform(step_pit_replicate(MUTANTS["resample_from_p"], s))[1] < ALPHA for s in range(20)]
    assert np.mean(caught) == 1.0


def _zero_mass_tokens(verify_q, *, steps, scale, noise, seed=0, k=4, vocab=40, spec=SamplingSpec(0.7, 0, 0.9)):
    """Tokens emitted with f = 0 under their step role over `steps` verification steps (target
    logits `scale` x N(0, 1), the draft's `noise` x N(0, 1) away), verified with the q
    `verify_q(draft_logits, q)` returns; and the number emitted."""
    g = torch.Generator().manual_seed(seed)
    zero = emitted = 0
    for _ in range(steps):
        logits = torch.randn(k + 1, vocab, generator=g) * scale
        p = warp(logits, spec)
        draft_logits = logits[:k] + noise * torch.randn(k, vocab, generator=g)
        q = warp(draft_logits, spec)
        drafted = torch.tensor([sample_from(q[i], g) for i in range(k)])
        parts = np.asarray(step_pit(q, p, reference_verify(drafted, verify_q(draft_logits, q), p, g)))
        zero += int((parts[:, 1] <= 0).sum())
        emitted += len(parts)
    return zero, emitted


def test_a_correction_outside_the_residual_support_is_proof_and_the_correct_verifier_never_emits_one():
    # the correct verifier on float32 p and q a few percent apart (an int8 copy's): not one token
    # its role cannot emit, since the residual's support is the verifier's own p > q (step_laws)
    zero, emitted = _zero_mass_tokens(lambda logits, q: q, steps=200, scale=3, noise=0.05)
    assert zero == 0 and emitted > 800
    zero, emitted = _zero_mass_tokens(lambda logits, q: q, steps=100, scale=1, noise=0.3)
    assert zero == 0 and emitted > 300
    # transformers #47932: q from the logits before top-p (Z·q on the kept tokens) puts residual
    # mass on tokens with Z·q < p < q, which the correct residual gives none
    raw = lambda logits, q: warp(logits, SamplingSpec(0.7))  # noqa: E731
    zero, _ = _zero_mass_tokens(raw, steps=150, scale=1, noise=0.3)
    assert zero > 0
    u = np.array([0.2, 0.5, 0.9, 1.0])
    assert eq.step_pit_test(u, np.array([0.1, 0.3, 0.2, 0.0]), ALPHA, 20).pvalue == 0.0
    assert eq.step_pit_test(u, np.array([0.1, 0.3, 0.2, 0.1]), ALPHA, 20).pvalue > 0.0


# ============================================================ the battery and its family-wise rule
@pytest.mark.slow
def test_battery_family_wise_false_alarms_and_groups():
    frame = simulate_tokens(N_SEEDS, 300, spec=SPECS[0], seed=31)
    records = simulate_steps(N_SEEDS, 60, seed=32)
    fails = []
    for r, sub in frame.groupby("rep", sort=True):
        battery = eq.goodness_of_fit(sub, [records[r]], by=(), seed=int(r))
        assert set(battery.gate["test"]) == {"pit", "surprisal", "draft_affinity", "acceptance"}
        fails.append(battery.verdict == "FAIL")
    # Holm over correlated tests keeps the family-wise rate at or below α
    assert np.mean(fails) <= HIGH

    # one biased group among four: the overall gate fails and BH flags that group
    parts = [simulate_tokens(1, 1500, spec=SPECS[0], seed=40 + g, sampler=sharpened(1.4) if g == 2 else None) for g in range(4)]
    for g, part in enumerate(parts):
        part["prompt_id"] = f"p{g}"
        part["key"] = f"p{g}|speculative|0"
        part["attr.domain"] = "code" if g == 2 else "chat"
    battery = eq.goodness_of_fit(pd.concat(parts, ignore_index=True))
    assert battery.verdict == "FAIL"
    flagged = battery.flagged
    assert set(flagged["group"]) <= {"p2", "code"} and "p2" in set(flagged["group"])
    assert {"prompt_id", "domain"} == set(battery.by_group["dimension"])
    summary = json.loads(json.dumps(battery.to_dict()))  # snapshot-ready: plain JSON types
    assert summary["verdict"] == "FAIL" and summary["flagged_groups"]


def test_battery_refuses_greedy_and_mixed_engines():
    frame = simulate_tokens(1, 50, spec=SPECS[0], seed=1)
    greedy = TokenScores(frame, pd.DataFrame(), SamplingSpec(temperature=0.0))
    with pytest.raises(InputError, match="greedy"):
        eq.goodness_of_fit(greedy)
    two = pd.concat([frame, frame.assign(engine="vanilla")])
    with pytest.raises(InputError, match="engine="):
        eq.goodness_of_fit(two)
    assert eq.goodness_of_fit(two, engine="vanilla", by=()).engine == "vanilla"


# ============================================================ tiny models end to end
def tiny_llama(seed, logit_scale=25.0):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # random init is near uniform; make it peaked
    return model


def ancestral_records(model, spec, *, n_prompts, n_samples, n_tokens, seed, sampler=None):
    """Plain ancestral sampling from the warped model, all samples of all prompts in one batch."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, 64, (n_prompts, 4), generator=g)
    ids = prompts.repeat_interleave(n_samples, dim=0)
    with torch.no_grad():
        for _ in range(n_tokens):
            p = warp(model(ids).logits[:, -1], spec).double()
            s = p if sampler is None else sampler(p, p)
            ids = torch.cat([ids, torch.multinomial(s, 1, generator=g)], dim=1)
    records = []
    for row in range(ids.shape[0]):
        j, sample = divmod(row, n_samples)
        records.append(
            {
                "key": f"p{j}|vanilla|{sample}",
                "prompt_id": f"p{j}",
                "engine": "vanilla",
                "sample": sample,
                "attributes": {"parity": j % 2},
                "prompt_token_ids": prompts[j].tolist(),
                "output_token_ids": ids[row, 4:].tolist(),
                "sampling": spec.to_dict(),
            }
        )
    return records


@pytest.mark.slow
def test_model_based_h0_calibration_and_power():
    spec = SamplingSpec(0.7, 20, 0.9)
    model = tiny_llama(0)
    records = ancestral_records(model, spec, n_prompts=8, n_samples=N_SEEDS, n_tokens=12, seed=2)
    scores = score_records(model, records, batch_size=400)
    tokens = scores.tokens
    assert (tokens["p"] > 0).all()  # the model's own samples are never impossible
    pit_fail, sur_fail = [], []
    for sample, sub in tokens.groupby("sample", sort=True):  # one replicate = 8 records ≈ 96 tokens
        pit_fail.append(eq.pit_uniformity(sub, seed=int(sample)).pvalue < ALPHA)
        sur_fail.append(eq.surprisal_martingale(sub).pvalue < ALPHA)
    assert LOW <= np.mean(pit_fail) <= HIGH
    assert LOW <= np.mean(sur_fail) <= HIGH
    assert eq.goodness_of_fit(scores, by=["parity"]).verdict == "PASS"

    biased = ancestral_records(model, spec, n_prompts=8, n_samples=40, n_tokens=12, seed=2, sampler=sharpened(2.0))
    battery = eq.goodness_of_fit(score_records(model, biased, batch_size=400), by=())
    assert battery.verdict == "FAIL" and battery.tests["surprisal"].statistic < 0


def speculative_records(target, draft, spec, verify, *, n_samples, n_tokens, k, seed):
    """A minimal speculative loop (no KV cache) around a verify function, recording counters."""
    g = torch.Generator().manual_seed(seed)
    prompt = [3, 14, 15, 9]
    records = []
    with torch.no_grad():
        for sample in range(n_samples):
            out, steps, betas = [], [], []
            while len(out) < n_tokens:
                prefix = prompt + out
                drafted, q_rows = [], []
                for _ in range(k):
                    q = warp(draft(torch.tensor([prefix + drafted])).logits[0, -1], spec)
                    q_rows.append(q)
                    drafted.append(sample_from(q, g))
                p_rows = warp(target(torch.tensor([prefix + drafted])).logits[0, len(prefix) - 1 :], spec)
                q_all = torch.stack(q_rows)
                emitted = verify(torch.tensor(drafted), q_all, p_rows, g).tolist()
                steps.append(len(emitted) - 1)
                betas.append(acceptance_probabilities(q_all, p_rows).tolist())
                out.extend(emitted)
            cut = out[:n_tokens]
            records.append(
                {
                    "key": f"p|speculative|{sample}",
                    "prompt_id": "p",
                    "engine": "speculative",
                    "sample": sample,
                    "k": k,
                    "attributes": {},
                    "prompt_token_ids": prompt,
                    "output_token_ids": cut,
                    "accepted_per_step": steps,
                    "beta": betas,
                    "sampling": spec.to_dict(),
                }
            )
    return records


def near_copy(model, noise, seed):
    """A draft that agrees with the target most of the time (β ≈ 0.7 at noise 0.5)."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = draft.lm_head.weight
        weight.add_(torch.randn(weight.shape, generator=g) * weight.std() * noise)
    return draft


def always_accept(draft_tokens, draft_probs, target_probs, generator):
    k = draft_tokens.shape[0]
    return torch.cat([draft_tokens, torch.tensor([sample_from(target_probs[k], generator)])])


def test_speculative_loop_passes_and_an_always_accept_mutant_fails():
    spec = SamplingSpec(1.0, 0, 1.0)
    target = tiny_llama(0, logit_scale=15.0)
    draft = near_copy(target, 0.5, seed=1)
    good = speculative_records(target, draft, spec, reference_verify, n_samples=16, n_tokens=16, k=3, seed=3)
    scores = score_records(target, good, draft_model=draft, batch_size=32)
    battery = eq.goodness_of_fit(scores, good, by=())
    assert battery.verdict == "PASS", battery.gate
    # the scored β (independent of the engine) agrees with the engine's own β
    table = eq.acceptance_indicators(good)
    table_scored = eq.acceptance_indicators(good, scores)
    assert (table_scored["beta_source"] == "scores").mean() > 0.9
    np.testing.assert_allclose(table["beta"], table_scored["beta"], atol=1e-5)

    bad = speculative_records(target, draft, spec, always_accept, n_samples=16, n_tokens=16, k=3, seed=3)
    battery = eq.goodness_of_fit(score_records(target, bad, draft_model=draft, batch_size=32), bad, by=())
    assert battery.verdict == "FAIL"
    assert battery.tests["acceptance"].statistic > 3 and battery.tests["draft_affinity"].statistic > 0


# ============================================================ two-sample
def chain(vocab, rng):
    """A random first-token distribution and transition matrix; token 0 is EOS."""
    first = rng.dirichlet(np.full(vocab, 0.5))
    first[0] = 0.0
    first /= first.sum()
    transition = rng.dirichlet(np.full(vocab, 0.5), size=vocab)
    return first, transition


def sample_chain(first, transition, n, rng, gamma=1.0, max_len=10):
    def tilt(p):
        s = p**gamma
        return s / s.sum(-1, keepdims=True)

    f, t = tilt(first), tilt(transition)
    seqs, logliks = [], []
    for _ in range(n):
        x = int(rng.choice(len(f), p=f))
        seq, ll = [x], math.log(first[x])
        while x != 0 and len(seq) < max_len:
            y = int(rng.choice(len(f), p=t[x]))
            ll += math.log(transition[x, y])
            seq.append(y)
            x = y
        seqs.append(seq)
        logliks.append(ll)
    return seqs, logliks


def two_sample_data(seed, *, n_prompts=4, n=10, gamma=1.0, vocab=8):
    rng = np.random.default_rng(seed)
    records, rows = [], []
    for j in range(n_prompts):
        first, transition = chain(vocab, rng)
        for engine, g in (("speculative", gamma), ("vanilla", 1.0)):
            seqs, lls = sample_chain(first, transition, n, rng, gamma=g)
            for s, (seq, ll) in enumerate(zip(seqs, lls)):
                key = f"p{j}|{engine}|{s}"
                records.append(
                    {
                        "key": key,
                        "prompt_id": f"p{j}",
                        "engine": engine,
                        "sample": s,
                        "attributes": {"half": j % 2},
                        "output_token_ids": seq,
                    }
                )
                # a scores frame only needs key and surprisal (and p) for the log-likelihood test
                rows.append({"key": key, "p": 1.0, "surprisal": -ll})
    return records, pd.DataFrame(rows)


def test_two_sample_statistics_match_scipy():
    rng = np.random.default_rng(0)
    labels = np.zeros((1, 30), dtype=bool)
    labels[0, :12] = True
    ours, theirs = [], []
    for _ in range(5):
        values = rng.integers(0, 6, size=30).astype(float)  # heavy ties
        ours.append(eq._ad_statistic(values, labels)[0])
        theirs.append(
            stats.anderson_ksamp([values[:12], values[12:]], variant="midrank", method=stats.PermutationMethod(n_resamples=9)).statistic
        )
    # scipy reports (A² − (k − 1)) / σ_N with σ_N fixed by the sample sizes: affine in ours
    assert np.corrcoef(ours, theirs)[0, 1] == pytest.approx(1.0, abs=1e-9)
    cats = rng.integers(0, 4, size=30)
    table = np.array([[np.sum(cats[:12] == c) for c in range(4)], [np.sum(cats[12:] == c) for c in range(4)]])
    g = stats.chi2_contingency(table, correction=False, lambda_="log-likelihood").statistic
    assert eq._g_statistic(cats, labels)[0] == pytest.approx(g)


@pytest.mark.slow
def test_two_sample_tests_are_calibrated_over_200_seeds():
    rejections = {name: [] for name in eq.TWO_SAMPLE_TESTS}
    for seed in range(N_SEEDS):
        records, frame = two_sample_data(seed)
        result = eq.two_sample(records, frame, n_resamples=199, seed=seed)
        for name in eq.TWO_SAMPLE_TESTS:
            rejections[name].append(result.tests[name].pvalue < ALPHA)
    for name, hits in rejections.items():
        assert LOW <= np.mean(hits) <= HIGH, f"{name}: {np.mean(hits)}"


def test_two_sample_tests_catch_a_sharpened_sampler():
    power = {name: [] for name in eq.TWO_SAMPLE_TESTS}
    verdicts = []
    for seed in range(30):
        records, frame = two_sample_data(1000 + seed, n=30, gamma=2.0)
        result = eq.two_sample(records, frame, n_resamples=199, seed=seed, by=["half"])
        verdicts.append(result.verdict == "FAIL")
        for name in eq.TWO_SAMPLE_TESTS:
            power[name].append(result.tests[name].pvalue < ALPHA)
    # measured: verdict 1.0, loglik 1.0, ngram 1.0, first_token 0.6, length 0.5 (30 samples/arm)
    assert np.mean(verdicts) >= 0.9
    assert np.mean(power["loglik"]) >= 0.9 and np.mean(power["ngram"]) >= 0.9
    assert np.mean(power["first_token"]) >= 0.4
    assert {"prompt_id", "test", "pvalue", "qvalue", "flagged"} <= set(result.by_prompt.columns)
    assert set(result.by_group["group"]) == {0, 1}
    assert json.loads(json.dumps(result.to_dict()))["verdict"] in ("PASS", "FAIL")


def test_two_sample_needs_both_engines():
    records, _ = two_sample_data(0)
    only = [r for r in records if r["engine"] == "vanilla"]
    with pytest.raises(InputError, match="both"):
        eq.two_sample(only)


def test_two_sample_with_one_sample_per_prompt_is_not_run_never_a_pass():
    """One sample per prompt and engine: a within-prompt permutation only swaps the two labels,
    which changes no statistic, so p = 1 whatever the engines do. Even a grossly different engine
    must then read "not run", with the reason, and never "pass"."""
    records, frame = two_sample_data(0, n_prompts=40, n=1, gamma=4.0)
    result = eq.two_sample(records, frame, n_resamples=99)
    assert result.verdict == eq.NOT_RUN and result.verdict != "PASS"
    assert "one sample per prompt and engine" in result.not_run_reason
    assert result.tests == {} and len(result.gate) == 0 and len(result.by_prompt) == 0
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["verdict"] == "not run" and "by construction" in payload["not_run_reason"]
    # Two samples a side on one prompt: 3 distinct arrangements, the smallest p is 1/3 > alpha.
    few, few_frame = two_sample_data(1, n_prompts=1, n=2)
    small = eq.two_sample(few, few_frame, n_resamples=99)
    assert small.verdict == eq.NOT_RUN and "3 distinct label arrangements" in small.not_run_reason
    # Enough samples: the test runs (and is calibrated, above).
    assert eq.two_sample(*two_sample_data(2), n_resamples=99).not_run_reason is None


def test_engine_status_never_reads_a_test_that_cannot_reject_as_a_pass():
    from specaudit.contracts import EquivalenceStatus

    bound_wide = {"upper": 0.6, "delta": 0.05, "position": 0}
    bound_tight = {"upper": 0.03, "delta": 0.05, "position": 0}
    not_run = {"verdict": "not run", "not_run_reason": "one sample per prompt and engine"}
    status, reason = eq.engine_status({"goodness_of_fit": "pass", "two_sample": not_run}, bound_wide)
    assert status is EquivalenceStatus.NO_VIOLATION_FOUND and "not shown" in reason
    status, reason = eq.engine_status({"goodness_of_fit": "pass"}, bound_tight)
    assert status is EquivalenceStatus.EQUIVALENT and "0.03" in reason
    status, reason = eq.engine_status({"goodness_of_fit": "fail", "two_sample": "pass"}, bound_tight)
    assert status is EquivalenceStatus.VIOLATION and "goodness_of_fit" in reason
    status, reason = eq.engine_status({"goodness_of_fit": "skipped", "two_sample": not_run}, bound_wide)
    assert status is EquivalenceStatus.NOT_RUN and "one sample per prompt" in reason


# ============================================================ greedy exactness
def greedy_decode(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            probs = warp(model(torch.tensor([ids])).logits[0, -1], SamplingSpec(temperature=0.0))
            ids.append(int(probs.argmax()))
    return ids[len(prompt) :]


def test_greedy_exactness_classifies_divergences():
    model = tiny_llama(7, logit_scale=5.0)
    prompt = [1, 2, 3]
    vanilla = greedy_decode(model, prompt, 8)
    d = 3
    a = vanilla[d]
    twin = next(t for t in range(a + 1, 64) if t not in vanilla)
    with torch.no_grad():  # token `twin` now has exactly token a's logit everywhere: a true tie
        model.lm_head.weight[twin] = model.lm_head.weight[a]
    assert greedy_decode(model, prompt, 8) == vanilla  # ties go to the lower id, as torch.argmax
    with torch.no_grad():
        logits = model(torch.tensor([prompt + vanilla[:d]])).logits[0, -1]
    far = int(logits.argmin())

    def rec(engine, sample, out):
        return {
            "key": f"p|{engine}|{sample}",
            "prompt_id": "p",
            "engine": engine,
            "sample": sample,
            "prompt_token_ids": prompt,
            "output_token_ids": out,
        }

    records = [
        rec("vanilla", 0, vanilla),
        rec("speculative", 0, list(vanilla)),
        rec("speculative", 1, vanilla[:d] + [twin] + vanilla[d + 1 :]),
        rec("speculative", 2, vanilla[:d] + [far] + vanilla[d + 1 :]),
        rec("speculative", 3, vanilla[:5]),
    ]
    result = eq.greedy_exactness(records, model)
    assert result.n_pairs == 4 and result.n_matches == 1 and result.statistic == 0.25
    by_key = result.divergences.set_index("key")
    assert by_key.loc["p|speculative|1", "classification"] == "near-tie"
    assert by_key.loc["p|speculative|1", "logit_gap"] == pytest.approx(0.0, abs=1e-6)
    assert by_key.loc["p|speculative|2", "classification"] == "clear"
    assert by_key.loc["p|speculative|2", "position"] == d
    assert by_key.loc["p|speculative|3", "classification"] == "length"
    assert result.verdict == "FAIL"
    ci = result.confidence_interval()
    assert ci.low < 0.25 < ci.high

    benign = eq.greedy_exactness(records[:3], model)
    assert benign.verdict == "PASS" and benign.match_rate == 0.5
    blind = eq.greedy_exactness(records[:3])  # no model: divergences cannot be explained
    assert blind.divergences["classification"].tolist() == ["unexplained"] and blind.verdict == "FAIL"
    assert json.loads(json.dumps(result.to_dict()))["n_pairs"] == 4
    sampled = [dict(r, sampling={"temperature": 0.7, "top_k": 0, "top_p": 1.0}) for r in records[:2]]
    with pytest.raises(InputError, match="temperature"):
        eq.greedy_exactness(sampled, model)


# ============================================================ equivalence bounds
def first_token_scores(p, s, n, rng, engine="speculative"):
    """TokenScores for first tokens only: prompt j has target p[j] and the sampler draws s[j]."""
    frames, mass = [], []
    for j in range(len(p)):
        x = rng.choice(p.shape[1], size=n, p=s[j])
        frame = pd.DataFrame(token_statistics(np.tile(p[j], (n, 1)), x))
        frame.insert(0, "key", [f"p{j}|{engine}|{i}" for i in range(n)])
        frame.insert(1, "prompt_id", f"p{j}")
        frame.insert(2, "engine", engine)
        frame.insert(3, "position", 0)
        frame.insert(4, "token", x)
        frames.append(frame)
        for token, count in zip(*np.unique(x, return_counts=True)):
            mass.append((f"p{j}", engine, 0, int(token), int(count), n * p[j][token], n, n))
    columns = ["prompt_id", "engine", "position", "token", "count", "target_mass", "n_reached", "n_records"]
    return TokenScores(pd.concat(frames, ignore_index=True), pd.DataFrame(mass, columns=columns), SamplingSpec(0.7, 10))


def warped_rows(rng, n_rows, vocab=30, spec=SamplingSpec(0.7, 10)):
    return warp(torch.as_tensor(rng.normal(size=(n_rows, vocab)) * 2), spec).double().numpy()


def tv(a, b):
    return 0.5 * np.abs(a - b).sum(-1)


def kl(a, b):
    mask = a > 0
    return float((a[mask] * np.log(a[mask] / b[mask])).sum())


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [1.0, 1.5])
def test_first_token_tv_and_kl_bounds_cover_the_truth(gamma):
    rng = np.random.default_rng(12)
    p = warped_rows(rng, 3)
    s = p**gamma / (p**gamma).sum(-1, keepdims=True)
    true_tv = float(tv(s, p).mean())
    true_kl = float(np.mean([kl(s[j], p[j]) for j in range(3)]))
    covered_tv, covered_kl = [], []
    for sim in range(N_SEEDS):
        bound = eq.tv_bound(first_token_scores(p, s, 40, rng), alpha=ALPHA, seed=sim)
        covered_tv.append(true_tv <= bound.upper)
        covered_kl.append(true_kl <= bound.kl_upper)
    assert np.mean(covered_tv) >= 0.95 and np.mean(covered_kl) >= 0.95


def test_tv_bound_verdicts():
    rng = np.random.default_rng(5)
    p = warped_rows(rng, 4)
    same = eq.tv_bound(first_token_scores(p, p, 2000, rng), delta=0.1)
    assert same.verdict == eq.EQUIVALENT and same.upper < 0.1 and same.confidence_interval().high == same.upper
    assert json.loads(json.dumps(same.to_dict()))["verdict"] == eq.EQUIVALENT
    s = p**3 / (p**3).sum(-1, keepdims=True)
    assert tv(s, p).mean() > 0.2
    far = eq.tv_bound(first_token_scores(p, s, 200, rng), delta=0.05)
    assert far.verdict == eq.DIFFERENT and far.pvalue < 1e-4
    small = eq.tv_bound(first_token_scores(p, p, 10, rng), delta=0.05)
    assert small.verdict == eq.NOT_SHOWN


def test_pooled_position_bound_covers_the_pooled_tv():
    """Position 1 depends on the first token: the bound is on TV between the pooled
    (marginal over prefixes) distributions, with prefixes drawn by the sampler itself."""
    rng = np.random.default_rng(3)
    vocab, n = 12, 60
    spec = SamplingSpec(1.0, 6)
    p0 = warped_rows(rng, 1, vocab, spec)[0]
    p1 = warped_rows(rng, vocab, vocab, spec)  # p1[x0] = target at position 1 after x0
    s1 = p1**1.6 / (p1**1.6).sum(-1, keepdims=True)
    pooled_s = p0 @ s1
    pooled_p = p0 @ p1
    true_tv = tv(pooled_s, pooled_p)
    covered = []
    for sim in range(N_SEEDS):
        x0 = rng.choice(vocab, size=n, p=p0)
        x1 = np.array([rng.choice(vocab, p=s1[a]) for a in x0])
        frame = pd.DataFrame(token_statistics(np.concatenate([np.tile(p0, (n, 1)), p1[x0]]), np.concatenate([x0, x1])))
        frame.insert(0, "key", [f"p|speculative|{i}" for i in range(n)] * 2)
        frame.insert(1, "prompt_id", "p")
        frame.insert(2, "engine", "speculative")
        frame.insert(3, "position", [0] * n + [1] * n)
        frame.insert(4, "token", np.concatenate([x0, x1]))
        mass = []
        for t, xs, rows in ((0, x0, np.tile(p0, (n, 1))), (1, x1, p1[x0])):
            for token, count in zip(*np.unique(xs, return_counts=True)):
                mass.append(("p", "speculative", t, int(token), int(count), rows[:, token].sum(), n, n))
        columns = ["prompt_id", "engine", "position", "token", "count", "target_mass", "n_reached", "n_records"]
        scores = TokenScores(frame, pd.DataFrame(mass, columns=columns), spec)
        covered.append(true_tv <= eq.tv_bound(scores, position=1, seed=sim).upper)
    assert np.mean(covered) >= 0.95
    profile = eq.tv_bound_profile(scores)
    assert profile["position"].tolist() == [0, 1] and (profile["upper"] >= profile["estimate"]).all()


def test_two_sample_tv_bound_covers_and_decides():
    rng = np.random.default_rng(9)
    p = warped_rows(rng, 2)
    s = p**1.5 / (p**1.5).sum(-1, keepdims=True)
    true_tv = float(tv(s, p).mean())

    def records_for(dist, engine, n):
        out = []
        for j in range(len(dist)):
            for i in range(n):
                out.append(
                    {
                        "key": f"p{j}|{engine}|{i}",
                        "prompt_id": f"p{j}",
                        "engine": engine,
                        "output_token_ids": [int(rng.choice(dist.shape[1], p=dist[j]))],
                    }
                )
        return out

    covered = []
    for sim in range(N_SEEDS):
        records = records_for(s, "speculative", 30) + records_for(p, "vanilla", 30)
        covered.append(true_tv <= eq.tv_bound_two_sample(records, n_resamples=99, seed=sim).upper)
    assert np.mean(covered) >= 0.95
    big = records_for(p, "speculative", 3000) + records_for(p, "vanilla", 3000)
    assert eq.tv_bound_two_sample(big, delta=0.1, n_resamples=99).verdict == eq.EQUIVALENT
    far = records_for(p**4 / (p**4).sum(-1, keepdims=True), "speculative", 300) + records_for(p, "vanilla", 300)
    assert eq.tv_bound_two_sample(far, delta=0.01, n_resamples=199).verdict == eq.DIFFERENT


def test_pit_values_do_not_depend_on_the_order_records_were_written():
    """Ray and concurrent endpoint runs write records as they arrive: the randomised PIT must not change."""
    import numpy as np
    import pandas as pd

    from specaudit.stats.equivalence import pit_values

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {"key": np.repeat([f"p{i}|speculative|0" for i in range(5)], 4), "position": np.tile(range(4), 5), "p": rng.uniform(0.05, 0.5, 20)}
    )
    frame["cdf_below"] = rng.uniform(0, 1 - frame["p"])
    shuffled = frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    original = pd.Series(pit_values(frame, seed=3), index=pd.MultiIndex.from_frame(frame[["key", "position"]]))
    reordered = pd.Series(pit_values(shuffled, seed=3), index=pd.MultiIndex.from_frame(shuffled[["key", "position"]]))
    assert np.allclose(original.sort_index().to_numpy(), reordered.sort_index().to_numpy())
    assert not np.allclose(pit_values(frame, seed=3), pit_values(frame, seed=4))
