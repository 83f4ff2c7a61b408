"""Engines on tiny real models: greedy agreement, seeded determinism, counters, exact sampling."""

import numpy as np
import pytest
import torch
from scipy import stats

from specaudit.decoding import SamplingSpec, hf_assisted_generate, speculative_generate, vanilla_generate, warp
from specaudit.models import NgramDraft, early_exit_draft
from specaudit.prompts import prompt_token_ids

EOS = {2}


def _ids(pair, text):
    return prompt_token_ids(pair.tokenizer, text)


def _run(engine, pair, ids, spec, seed=0, k=4, max_new_tokens=40, draft=None):
    draft = draft if draft is not None else pair.draft
    if engine == "hf-assisted":
        return hf_assisted_generate(pair.target, draft, ids, spec=spec, k=k, max_new_tokens=max_new_tokens, seed=seed, eos_ids=EOS)
    generator = torch.Generator(device=pair.device).manual_seed(seed)
    common = dict(spec=spec, max_new_tokens=max_new_tokens, generator=generator, eos_ids=EOS, vocab_size=pair.vocab_size)
    if engine == "vanilla":
        return vanilla_generate(pair.target, ids, **common)
    return speculative_generate(pair.target, draft, ids, k=k, **common)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_engines_emit_vanilla_tokens(tiny_pair, tiny_texts, k):
    greedy = SamplingSpec(0.0)
    for text in tiny_texts.values():
        ids = _ids(tiny_pair, text)
        reference = _run("vanilla", tiny_pair, ids, greedy).tokens
        assert _run("speculative", tiny_pair, ids, greedy, k=k).tokens == reference
        assert _run("hf-assisted", tiny_pair, ids, greedy, k=k).tokens == reference


def test_greedy_with_derived_drafts(tiny_pair, tiny_texts):
    greedy = SamplingSpec(0.0)
    ids = _ids(tiny_pair, tiny_texts["p2"])
    reference = _run("vanilla", tiny_pair, ids, greedy).tokens
    for draft in (early_exit_draft(tiny_pair.target, 1), NgramDraft()):
        out = _run("speculative", tiny_pair, ids, greedy, draft=draft)
        assert out.tokens == reference
        assert out.accepted <= out.proposed


def test_hf_assisted_counters_agree_with_reference_engine_in_greedy(tiny_pair, tiny_texts):
    """Greedy decisions are deterministic, so both engines must count the same steps and accepts."""
    greedy = SamplingSpec(0.0)
    for text in tiny_texts.values():
        ids = _ids(tiny_pair, text)
        ours, theirs = _run("speculative", tiny_pair, ids, greedy), _run("hf-assisted", tiny_pair, ids, greedy)
        assert (ours.steps, ours.proposed, ours.accepted, ours.accepted_per_step, ours.proposed_per_step) == (
            theirs.steps,
            theirs.proposed,
            theirs.accepted,
            theirs.accepted_per_step,
            theirs.proposed_per_step,
        )


@pytest.mark.parametrize("engine", ["vanilla", "speculative", "hf-assisted"])
def test_same_seed_same_tokens(tiny_pair, tiny_texts, engine):
    spec = SamplingSpec(1.0, top_p=0.95)
    ids = _ids(tiny_pair, tiny_texts["p3"])
    first = _run(engine, tiny_pair, ids, spec, seed=7).tokens
    assert _run(engine, tiny_pair, ids, spec, seed=7).tokens == first
    assert any(_run(engine, tiny_pair, ids, spec, seed=s).tokens != first for s in (8, 9, 10))


def test_record_level_invariants(tiny_pair, tiny_texts):
    spec = SamplingSpec(1.0)
    for seed in range(6):
        out = _run("speculative", tiny_pair, _ids(tiny_pair, tiny_texts["p1"]), spec, seed=seed, max_new_tokens=30)
        assert out.accepted <= out.proposed
        assert len(out.tokens) <= out.accepted + out.steps
        if out.finish_reason == "length":
            assert len(out.tokens) == out.accepted + out.steps == 30
        assert all(0.0 <= b <= 1.0 + 1e-6 for step in out.beta for b in step)
        assert sum(out.accepted_per_step) == out.accepted
        assert [len(step) for step in out.accept_prob] == out.proposed_per_step
        assert all(0.0 <= r <= 1.0 for step in out.accept_prob for r in step)
        assert out.draft_s > 0 and out.verify_s > 0 and out.ttft_s <= out.wall_s


@pytest.mark.slow
def test_speculative_first_token_follows_target_distribution(tiny_pair, tiny_texts):
    """End to end through the engine: 600 draws of the first token against the exact warped p."""
    spec = SamplingSpec(0.8, top_k=20)
    ids = _ids(tiny_pair, tiny_texts["p4"])
    with torch.no_grad():
        p = warp(tiny_pair.target(torch.tensor([ids], device=tiny_pair.device)).logits[0, -1], spec).double().cpu().numpy()
    counts = np.zeros_like(p)
    for seed in range(600):
        counts[_run("speculative", tiny_pair, ids, spec, seed=seed, k=3, max_new_tokens=4).tokens[0]] += 1
    assert counts[p == 0].sum() == 0
    support = p > 0
    expected = p[support] / p[support].sum() * counts.sum()
    pooled = expected >= 5  # pool small cells into one so the chi-square approximation holds
    observed = np.append(counts[support][pooled], counts[support][~pooled].sum())
    expected = np.append(expected[pooled], expected[~pooled].sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.slow
def test_engine_records_the_step_pit_of_every_kept_token(tiny_pair, tiny_texts):
    """[F(x−), f(x)] per emitted token, cut with the tokens; and what it is for: over 200 seeded
    runs of the engine with the correct sampler, the step PIT's Anderson–Darling test rejects at
    a rate inside the binomial 95% interval of alpha = 0.05, and the pooled u are uniform."""
    from specaudit.stats.equivalence import anderson_darling_uniform

    spec = SamplingSpec(1.0, top_p=0.95)
    ids = _ids(tiny_pair, tiny_texts["p1"])
    pooled, rejected = [], []
    rng = np.random.default_rng(0)
    for seed in range(200):
        out = _run("speculative", tiny_pair, ids, spec, seed=seed, k=3, max_new_tokens=25)
        parts = np.asarray(out.step_pit)
        assert parts.shape == (len(out.tokens), 2)
        assert (parts >= 0).all() and (parts.sum(axis=1) <= 1 + 1e-9).all() and (parts[:, 1] > 0).all()
        u = parts[:, 0] + rng.random(len(parts)) * parts[:, 1]
        rejected.append(anderson_darling_uniform(u)[1] < 0.05)
        pooled.extend(u)
    low, high = (x / 200 for x in stats.binom.interval(0.95, 200, 0.05))
    assert low <= np.mean(rejected) <= high
    assert stats.kstest(pooled, "uniform").pvalue > 1e-3
    assert _run("vanilla", tiny_pair, ids, spec).step_pit == []
