"""The screen on the real default pair: batched rows match batch 1, and the int8 draft passes the guard
(in float32, and in bfloat16 against that dtype's own float noise)."""

from __future__ import annotations

import pytest

from specaudit.decoding import SamplingSpec
from specaudit.engines.batched_sampling import sample_batch
from specaudit.engines.decode import eos_token_ids
from specaudit.engines.screen import check_call_invariance
from specaudit.errors import InputError
from specaudit.prompts import prompt_token_ids

pytestmark = pytest.mark.integration

TEXTS = ["What is 17 times 23?", "Écris une phrase sur la pluie.", "Give me three tips for learning Python, briefly."]


def test_batched_rows_match_batch_one_on_the_default_pair(default_pair):
    prompts = [prompt_token_ids(default_pair.tokenizer, text) for text in TEXTS]
    eos, vocab = eos_token_ids(default_pair), default_pair.vocab_size
    common = {"spec": SamplingSpec(1.0), "max_new_tokens": 6, "eos_ids": eos, "vocab_size": vocab, "pad_id": min(eos), "keep_probs": True}
    batch = sample_batch(default_pair.target, prompts, [5, 6, 7], **common)
    for row, prompt in enumerate(prompts):
        alone = sample_batch(default_pair.target, [prompt], [5 + row], **common)
        n = len(alone.tokens[0])
        assert batch.tokens[row] == alone.tokens[0]
        assert float((0.5 * (batch.probs[row, :n] - alone.probs[0, :n]).abs().sum(-1)).max()) < 1e-4
    path = default_pair.tokenizer(" Practice every day, read code, and build small projects.")["input_ids"]
    assert check_call_invariance(default_pair.target, default_pair.draft, prompts[2], path, default_pair.device)["max_tv"] < 1e-3


def test_bfloat16_rounding_is_tolerated_and_call_dependence_still_refused(call_dependent):
    """In bfloat16 the real target's own distributions differ between call shapes by rounding alone
    (TV ~4e-2, far above float32's 1e-3 limit, which would refuse every bfloat16 draft); the guard
    measures that floor on the same path, passes the int8 draft, and still refuses a draft whose q
    depends on the call."""
    from specaudit.models import load_pair

    pair = load_pair("default", "int8", device="cpu", dtype="bfloat16")
    prompt = prompt_token_ids(pair.tokenizer, TEXTS[2])
    path = pair.tokenizer(" Practice every day, read code, and build small projects.")["input_ids"]
    measured = check_call_invariance(pair.target, pair.draft, prompt, path, pair.device)
    assert measured["target_max_tv"] > 1e-3
    assert measured["batch_invariant"] and measured["max_tv"] < measured["tolerance"]

    with pytest.raises(InputError, match=r"TV up to .* float noise"):
        check_call_invariance(pair.target, call_dependent(pair.draft), prompt, path, pair.device)
