"""The screen at a real vocabulary: the draft's logits made a few positions at a time give the same
acceptance as the whole batch at once, and keep the draft's [B, T, V] from ever existing beside
the target's (a memory assertion on a random Llama with a 150k vocabulary)."""

from __future__ import annotations

import textwrap

import pytest
import torch
from peak_rss import run_probe

from specaudit.decoding import SamplingSpec
from specaudit.engines.batched_sampling import sample_batch, teacher_forced_acceptance
from specaudit.engines.screen import screen_paths
from specaudit.models import DisparityPlant, tiny_draft_of, tiny_model, tiny_tokenizer
from specaudit.models._chunked import plain_head

TEXTS = ["Hello there, how are you?", "List three fruits.", "Hi", "Write a short poem about rain, please now."]


@pytest.fixture(scope="module")
def models():
    target = tiny_model()
    return target, tiny_draft_of(target, noise=0.3), tiny_tokenizer()


@pytest.mark.parametrize("spec", [SamplingSpec(1.0), SamplingSpec(0.7, top_k=20, top_p=0.9)])
def test_chunked_screen_equals_the_whole_batch_screen(models, spec):
    target, draft, tokenizer = models
    prompts = [tokenizer(text)["input_ids"] for text in TEXTS]
    common = dict(spec=spec, k=3, max_new_tokens=12, eos_ids={2}, vocab_size=target.config.vocab_size, pad_id=0)
    whole = screen_paths(target, draft, prompts, [3, 4, 5, 6], chunk_elements=None, **common)
    # ~one position of 4 rows per chunk: many chunks, a ragged last one
    chunked = screen_paths(target, draft, prompts, [3, 4, 5, 6], chunk_elements=4 * target.config.vocab_size, **common)
    assert plain_head(draft)
    for a, b in zip(whole, chunked, strict=True):
        assert a.tokens == b.tokens
        assert a.acceptance.beta == b.acceptance.beta  # bit for bit
        assert a.acceptance.accept_cond == b.acceptance.accept_cond
        assert (a.acceptance.steps, a.acceptance.accepted) == (b.acceptance.steps, b.acceptance.accepted)


def test_chunked_acceptance_equals_the_whole_batch_with_a_planted_group(models):
    target, draft, tokenizer = models
    prompts = [tokenizer(text)["input_ids"] for text in TEXTS]
    spec, vocab = SamplingSpec(1.0), target.config.vocab_size
    batch = sample_batch(
        target, prompts, [1, 2, 3, 4], spec=spec, max_new_tokens=10, eos_ids=set(), vocab_size=vocab, pad_id=0, keep_probs=True
    )
    plant, rows = DisparityPlant("group", "b", 0.5), torch.tensor([False, True, False, True])
    common = dict(spec=spec, vocab_size=vocab, plant=plant, planted_rows=rows)
    whole = teacher_forced_acceptance(draft, batch, chunk_elements=None, **common)
    chunked = teacher_forced_acceptance(draft, batch, chunk_elements=3 * vocab, **common)
    clean = teacher_forced_acceptance(draft, batch, spec=spec, vocab_size=vocab)
    for w, c in zip(whole, chunked):
        # the mixture's log-softmax rounds a float32 ulp differently on a chunk's shape (measured: 9e-9 once in 40)
        torch.testing.assert_close(w, c, rtol=0, atol=1e-7)
    assert not torch.equal(whole[0][1], clean[0][1]) and torch.equal(whole[0][0], clean[0][0])  # planted rows only


def test_a_model_whose_logits_are_not_its_head_is_never_chunked(models, call_dependent):
    _, draft, _ = models
    assert not plain_head(call_dependent(draft))  # no get_output_embeddings: the whole-batch path


# A random Llama with a real-sized vocabulary (hidden size 32, so the models are small and only the
# logits are big): 8 rows x 128 positions x 150,000 float32 entries = 614 MB per model.
MEMORY_PROBE = textwrap.dedent(
    """
    import json, sys
    import torch
    torch.set_num_threads(1)
    from specaudit.decoding import SamplingSpec
    from specaudit.engines.screen import screen_paths
    from specaudit.models import tiny_draft_of, tiny_model

    vocab, rows, positions = 150_000, 8, 128
    target = tiny_model(vocab_size=vocab)
    draft = tiny_draft_of(target, noise=0.3)
    prompts = [[1, 5 + r, 9, 13 + r, 17] for r in range(rows)]
    chunk = None if sys.argv[1] == "whole" else 1 << 24
    common = dict(spec=SamplingSpec(1.0), k=4, eos_ids=set(), vocab_size=vocab, pad_id=0, batch_size=rows, chunk_elements=chunk)
    growth, paths = peak_growth(
        lambda: screen_paths(target, draft, prompts, list(range(rows)), max_new_tokens=4, **common),
        lambda: screen_paths(target, draft, prompts, list(range(rows)), max_new_tokens=positions, **common),
    )
    assert all(len(p.tokens) == positions for p in paths)
    print(json.dumps({"peak_growth": growth, "one_model_logits": rows * positions * vocab * 4}))
    """
)


@pytest.mark.slow
def test_the_screen_at_a_150k_vocabulary_never_holds_both_models_logits():
    chunked, whole = run_probe(MEMORY_PROBE, "chunked"), run_probe(MEMORY_PROBE, "whole")
    one_model = chunked["one_model_logits"]
    # Peak growth over the warm-up, read from the probe's own VmHWM: chunked, the target's kept
    # distributions and its logits beside them while they are made, plus chunks of ~64 MB (measured
    # 1.86x one model's [B, T, V]); whole batch, the draft's logits and distributions on top (3.97x).
    # 3x sits between them: the chunked screen never holds the draft's batch logits as well.
    assert chunked["peak_growth"] < 3.0 * one_model < whole["peak_growth"], (chunked, whole)
