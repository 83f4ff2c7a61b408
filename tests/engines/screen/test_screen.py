"""The screen on tiny real models: batched sampling equals batch-1 sampling, the dynamic programme
equals brute force, and the screen's expected acceptance equals the speculative engine's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from specaudit.decoding import SamplingSpec, speculative_generate, vanilla_generate
from specaudit.engines.batched_sampling import sample_batch, teacher_forced_probs
from specaudit.engines.screen import check_call_invariance, screen_paths
from specaudit.errors import InputError
from specaudit.models import (
    DisparityPlant,
    NgramDraft,
    PlantedDraft,
    tiny_draft_of,
    tiny_model,
    tiny_tokenizer,
)
from specaudit.stats.acceptance import expected_counts, expected_run_rate

TEXTS = ["Hello there, how are you?", "List three fruits.", "Hi", "Write a short poem about rain, please now."]


@pytest.fixture(scope="module")
def models():
    target = tiny_model()
    return target, tiny_draft_of(target, noise=0.3), tiny_tokenizer()


def _prompts(tokenizer):
    return [tokenizer(text)["input_ids"] for text in TEXTS]


@pytest.mark.parametrize("spec", [SamplingSpec(1.0), SamplingSpec(0.7, top_k=20, top_p=0.9), SamplingSpec(0.0)])
def test_batched_rows_match_batch_one_and_the_vanilla_engine(models, spec):
    target, _, tokenizer = models
    prompts, vocab = _prompts(tokenizer), target.config.vocab_size
    batch = sample_batch(
        target, prompts, [11, 12, 13, 14], spec=spec, max_new_tokens=12, eos_ids=set(), vocab_size=vocab, pad_id=0, keep_probs=True
    )
    for row, prompt in enumerate(prompts):
        alone = sample_batch(
            target, [prompt], [11 + row], spec=spec, max_new_tokens=12, eos_ids=set(), vocab_size=vocab, pad_id=0, keep_probs=True
        )
        tv = 0.5 * (batch.probs[row] - alone.probs[0]).abs().sum(-1)
        assert float(tv.max()) < 1e-5  # left padding, mask and positions give each row its own logits
        engine = vanilla_generate(
            target, prompt, spec=spec, max_new_tokens=12, generator=torch.Generator().manual_seed(11 + row), eos_ids=set(), vocab_size=vocab
        )
        assert batch.tokens[row] == alone.tokens[0] == engine.tokens


def test_a_shared_prefix_is_computed_once_and_changes_nothing(models):
    target, draft, tokenizer = models
    system = tokenizer("You are a careful assistant. Answer the user's request:")["input_ids"]
    prompts = [system + p for p in _prompts(tokenizer)]
    vocab, spec = target.config.vocab_size, SamplingSpec(1.0)
    kwargs = dict(spec=spec, max_new_tokens=10, eos_ids=set(), vocab_size=vocab, pad_id=0, keep_probs=True)
    batch = sample_batch(target, prompts, [5, 6, 7, 8], **kwargs)
    assert batch.prefix == len(system) >= 8  # the prefix pass ran
    q = teacher_forced_probs(draft, batch, spec=spec, vocab_size=vocab)
    for row, prompt in enumerate(prompts):
        alone = sample_batch(target, [prompt], [5 + row], **kwargs)
        assert alone.prefix == 0
        assert batch.tokens[row] == alone.tokens[0]
        assert float((0.5 * (batch.probs[row] - alone.probs[0]).abs().sum(-1)).max()) < 1e-5
        q_alone = teacher_forced_probs(draft, alone, spec=spec, vocab_size=vocab)[0]
        assert float((0.5 * (q[row, : len(batch.tokens[row])] - q_alone).abs().sum(-1)).max()) < 1e-5


def test_rows_stop_at_their_own_end_of_sequence(models):
    target, _, tokenizer = models
    prompts = _prompts(tokenizer)
    batch = sample_batch(
        target, prompts, [1, 2, 3, 4], spec=SamplingSpec(1.0), max_new_tokens=12, eos_ids={2}, vocab_size=target.config.vocab_size, pad_id=0
    )
    for tokens, reason in zip(batch.tokens, batch.finish_reasons):
        assert (reason == "eos") == (2 in tokens)
        assert 2 not in tokens[:-1] and (reason == "eos" or len(tokens) == 12)
    assert len({len(t) for t in batch.tokens}) > 1  # the seeds above end rows at different lengths


def _brute_force(accept, k, max_new_tokens):
    """Expected (steps, proposed, accepted) and E[accepted / proposed] by enumerating every
    accept/reject pattern of the path."""
    totals, rate = np.zeros(3), 0.0
    for pattern in itertools.product([0, 1], repeat=len(accept)):
        weight = np.prod([a if bit else 1 - a for a, bit in zip(accept, pattern)])
        start, steps, proposed, accepted = 0, 0, 0, 0
        while start < len(accept):
            drafted = max(0, min(k, max_new_tokens - start - 1))
            n = 0
            while n < drafted and start + n < len(accept) and pattern[start + n]:
                n += 1
            steps, proposed, accepted, start = steps + 1, proposed + drafted, accepted + n, start + n + 1
        totals += weight * np.array([steps, proposed, accepted])
        rate += weight * accepted / proposed
    return totals, rate


@pytest.mark.parametrize("k,max_new_tokens", [(1, 9), (3, 9), (4, 12)])
def test_dynamic_programmes_equal_brute_force(k, max_new_tokens):
    rng = np.random.default_rng(k)
    accept = rng.uniform(size=9).tolist()
    steps, proposed, accepted, reached = expected_counts(accept, k, max_new_tokens)
    totals, rate = _brute_force(accept, k, max_new_tokens)
    np.testing.assert_allclose([steps, proposed, accepted], totals, rtol=1e-12)
    assert accepted <= reached <= proposed
    # One run's rate is not the ratio of expectations (Jensen); the forward programme gets it exactly.
    assert expected_run_rate(accept, k, max_new_tokens) == pytest.approx(rate, rel=1e-12)
    assert abs(rate - accepted / proposed) > 1e-3


def test_dynamic_programme_extremes():
    assert expected_counts([1.0] * 10, 4, 10)[:3] == (2.0, 8.0, 8.0)  # 4 accepted + bonus, 4 + bonus, then budget
    assert expected_counts([0.0] * 10, 4, 10)[:3] == (10.0, 4 * 6 + 3 + 2 + 1 + 0, 0.0)  # starts 0..5 draft 4, then the budget
    assert (expected_run_rate([1.0] * 10, 4, 10), expected_run_rate([0.0] * 10, 4, 10)) == (1.0, 0.0)
    assert np.isnan(expected_run_rate([0.5], 4, 1))  # a one-token budget drafts nothing


def _engine_runs(target, draft, prompt, *, k, budget, n):
    """n speculative runs of one prompt with independent seeds (10,000 + s)."""
    return [
        speculative_generate(
            target,
            draft,
            prompt,
            spec=SamplingSpec(1.0),
            k=k,
            max_new_tokens=budget,
            generator=torch.Generator().manual_seed(10_000 + s),
            eos_ids=set(),
            vocab_size=target.config.vocab_size,
        )
        for s in range(n)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("draft_name", ["model", "ngram"])
def test_screen_agrees_with_the_speculative_engine(models, draft_name):
    """Per-prompt mean accepted tokens, screen (expected given path) vs engine (realised), over
    independent seeds: |difference| < 4 standard errors (a correct screen fails 1 in ~16000)."""
    target, model_draft, tokenizer = models
    draft = model_draft if draft_name == "model" else NgramDraft()
    prompt, vocab, k, budget, n = _prompts(tokenizer)[0], target.config.vocab_size, 3, 16, 200
    rows = screen_paths(
        target,
        draft,
        [prompt] * n,
        list(range(n)),
        spec=SamplingSpec(1.0),
        k=k,
        max_new_tokens=budget,
        eos_ids=set(),
        vocab_size=vocab,
        pad_id=0,
        batch_size=100,
    )
    engine = _engine_runs(target, draft, prompt, k=k, budget=budget, n=n)
    for field in ("accepted", "steps"):
        screen = np.array([getattr(r.acceptance, field) for r in rows])
        real = np.array([getattr(g, field) for g in engine], dtype=float)
        z = (screen.mean() - real.mean()) / np.sqrt(screen.var(ddof=1) / n + real.var(ddof=1) / n)
        assert abs(z) < 4, (field, screen.mean(), real.mean())
    if draft_name == "model":  # Rao-Blackwellised: given the path, less spread than one engine run
        assert np.var([r.acceptance.accepted for r in rows]) < np.var([g.accepted for g in engine])


def test_planted_draft_is_call_invariant_and_mixes_only_its_rows(models):
    target, model_draft, tokenizer = models
    vocab, plant = target.config.vocab_size, DisparityPlant("group", "b", 0.4)
    prompt, path = tokenizer("Explain why the sky is blue.")["input_ids"], tokenizer(" Because of scattering light.")["input_ids"]
    planted = PlantedDraft(model_draft, plant, vocab)
    assert check_call_invariance(target, planted, prompt, path, torch.device("cpu"))["max_tv"] < 1e-5  # teacher-forced vs step by step

    batch = sample_batch(
        target, _prompts(tokenizer)[:2], [5, 6], spec=SamplingSpec(1.0), max_new_tokens=10, eos_ids=set(), vocab_size=vocab, pad_id=0
    )
    clean = teacher_forced_probs(model_draft, batch, spec=SamplingSpec(1.0), vocab_size=vocab)
    everywhere = teacher_forced_probs(planted, batch, spec=SamplingSpec(1.0), vocab_size=vocab)
    second_only = PlantedDraft(model_draft, plant, vocab, rows=torch.tensor([False, True]))
    mixed = teacher_forced_probs(second_only, batch, spec=SamplingSpec(1.0), vocab_size=vocab)
    torch.testing.assert_close(everywhere, 0.4 * clean + 0.6 / vocab)  # the mixture, on the probabilities
    torch.testing.assert_close(mixed[0], clean[0])
    torch.testing.assert_close(mixed[1], everywhere[1])


@pytest.mark.parametrize("text", ["group=b", "group:0.5", "=b:0.5", "group=b:-1", "group=b:0", "group=b:1", "group=b:1.5", "group=b:x"])
def test_malformed_plant_is_one_sentence(text):
    with pytest.raises(InputError, match=r"dimension=group:factor with 0 < factor < 1"):
        DisparityPlant.parse(text)


@pytest.mark.slow
def test_screen_acceptance_of_a_planted_group_matches_the_engine(models):
    """The same prompt screened as an unplanted and a planted row (in one batch) and decoded by the
    engine with the clean and the planted draft: each arm agrees within 4 standard errors, and
    planting lowers acceptance."""
    target, model_draft, tokenizer = models
    prompt, vocab, k, budget, n = _prompts(tokenizer)[0], target.config.vocab_size, 3, 16, 150
    plant = DisparityPlant("group", "b", 0.5)
    rows = screen_paths(
        target,
        model_draft,
        [prompt] * (2 * n),
        list(range(2 * n)),
        spec=SamplingSpec(1.0),
        k=k,
        max_new_tokens=budget,
        eos_ids=set(),
        vocab_size=vocab,
        pad_id=0,
        batch_size=100,
        plant=plant,
        planted=[i % 2 == 1 for i in range(2 * n)],
    )
    means = {}
    for arm, draft in ((0, model_draft), (1, PlantedDraft(model_draft, plant, vocab))):
        engine = [g.accepted for g in _engine_runs(target, draft, prompt, k=k, budget=budget, n=n)]
        screen = np.array([r.acceptance.accepted for r in rows[arm::2]])
        real = np.array(engine, dtype=float)
        z = (screen.mean() - real.mean()) / np.sqrt(screen.var(ddof=1) / n + real.var(ddof=1) / n)
        assert abs(z) < 4, (arm, screen.mean(), real.mean())
        means[arm] = screen.mean()
    assert means[1] < 0.8 * means[0]


def test_plant_needs_a_model_draft(models):
    target, _, tokenizer = models
    with pytest.raises(InputError, match="ngram draft has none"):
        screen_paths(
            target,
            NgramDraft(),
            _prompts(tokenizer),
            [1, 2, 3, 4],
            spec=SamplingSpec(1.0),
            k=3,
            max_new_tokens=12,
            eos_ids=set(),
            vocab_size=target.config.vocab_size,
            pad_id=0,
            plant=DisparityPlant("group", "b", 0.5),
            planted=[True, False, True, False],
        )


def test_screen_refuses_a_call_dependent_draft_naming_the_tv(models, call_dependent):
    target, model_draft, tokenizer = models
    with pytest.raises(InputError, match=r"not call-invariant .*TV up to \d\.\d\d"):
        screen_paths(
            target,
            call_dependent(model_draft),
            _prompts(tokenizer),
            [1, 2, 3, 4],
            spec=SamplingSpec(1.0),
            k=3,
            max_new_tokens=12,
            eos_ids=set(),
            vocab_size=target.config.vocab_size,
            pad_id=0,
        )
