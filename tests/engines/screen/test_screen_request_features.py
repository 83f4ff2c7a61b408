"""The screen under penalties: each batched row samples from, and the draft is teacher-forced
under, the distribution processed at that row's own prefix, as the vanilla engine decodes it."""

from __future__ import annotations

import pytest
import torch

from specaudit.decoding import SamplingSpec, vanilla_generate, warp
from specaudit.decoding.warping import Prefix
from specaudit.engines.batched_sampling import sample_batch, teacher_forced_acceptance, teacher_forced_probs
from specaudit.models import tiny_draft_of, tiny_model, tiny_tokenizer

TEXTS = ["Hello there, how are you?", "List three fruits.", "Hi", "Write a short poem about rain."]
SPECS = [
    SamplingSpec(1.0, repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.5),
    SamplingSpec(0.8, min_p=0.1, repeat_last_n=4, repetition_penalty=1.5),
]


@pytest.fixture(scope="module")
def models():
    target = tiny_model()
    return target, tiny_draft_of(target, noise=0.3), tiny_tokenizer()


@pytest.mark.parametrize("spec", SPECS, ids=["openai-penalties", "llama-cpp-window"])
def test_rows_sample_and_teacher_force_at_their_own_prefix(models, spec):
    target, draft, tokenizer = models
    prompts = [tokenizer(text)["input_ids"] for text in TEXTS]
    vocab = target.config.vocab_size
    batch = sample_batch(
        target, prompts, [21, 22, 23, 24], spec=spec, max_new_tokens=10, eos_ids=set(), vocab_size=vocab, pad_id=0, keep_probs=True
    )
    q = teacher_forced_probs(draft, batch, spec=spec, vocab_size=vocab)
    for row, prompt in enumerate(prompts):
        engine = vanilla_generate(
            target, prompt, spec=spec, max_new_tokens=10, generator=torch.Generator().manual_seed(21 + row), eos_ids=set(), vocab_size=vocab
        )
        assert batch.tokens[row] == engine.tokens
        path = batch.tokens[row]
        with torch.inference_mode():
            logits = draft(input_ids=torch.tensor([prompt + path[:-1]])).logits[0, len(prompt) - 1 :, :vocab]
        expected = warp(logits, spec, Prefix(prompt, path[:-1]))
        assert float((0.5 * (q[row, : len(path)] - expected).abs().sum(-1)).max()) < 1e-5
    chunked = teacher_forced_acceptance(draft, batch, spec=spec, vocab_size=vocab, chunk_elements=3 * vocab)
    whole = teacher_forced_acceptance(draft, batch, spec=spec, vocab_size=vocab, chunk_elements=None)
    for a, b in zip(chunked, whole):
        torch.testing.assert_close(a, b)
