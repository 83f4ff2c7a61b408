"""The reference server honours the request features through decoding/warping.py (the one
`warp`), and the request-feature server mutants (specaudit.testing.server_mutants) do what their
bug reports say, checked on single requests; the audits that catch them are in
test_server_mutants.py (slow)."""

from __future__ import annotations

import math

import pytest
import torch

from specaudit.decoding import SamplingSpec, warp
from specaudit.decoding.warping import Prefix
from specaudit.engines.decode import eos_token_ids
from specaudit.testing.server import ReferenceServer, _BadRequest
from specaudit.testing.server_mutants import (
    FEATURE_SAMPLING,
    LastTokenPenalties,
    LogprobsFirstOfStep,
    MinPBiasBonusOnly,
    PenaltiesOffSpeculating,
    PostStopTokens,
    SeedIgnored,
)

PROMPT = [5, 6, 7, 8, 9, 5, 6]
FEATURES = {"presence_penalty": 0.5, "frequency_penalty": 0.5, "min_p": 0.1, "logit_bias": {"10": -1.0}, "repetition_penalty": 1.2}


def _body(**extra):
    return {"prompt": PROMPT, "max_tokens": 16, "seed": 3, "temperature": 1.0, "logprobs": 5, **extra}


def _token_ids(answer):
    return [int(t.split(":")[1]) for t in answer["choices"][0]["logprobs"]["tokens"]]


def _processed(pair, tokens, spec):
    """The processed target at every output position, each at its own prefix (what the logprobs must be)."""
    with torch.inference_mode():
        logits = pair.target(input_ids=torch.tensor([PROMPT + tokens[:-1]])).logits[0, len(PROMPT) - 1 :, : pair.vocab_size]
    return warp(logits.double(), spec, Prefix(PROMPT, tokens[:-1]))


def test_the_server_samples_and_scores_the_processed_target(tiny_pair):
    spec = SamplingSpec(temperature=1.0, **{k: v for k, v in FEATURES.items() if k != "logit_bias"}, logit_bias=((10, -1.0),))
    with ReferenceServer(tiny_pair) as server:
        answer = server.complete(_body(**FEATURES))
    tokens = _token_ids(answer)
    probs = _processed(tiny_pair, tokens, spec)
    returned = answer["choices"][0]["logprobs"]["token_logprobs"]
    assert returned == pytest.approx([math.log(float(probs[t, token])) for t, token in enumerate(tokens)], abs=1e-9)
    # same seed, same tokens as specaudit's own vanilla decoding under the spec: the server decodes with it
    from specaudit.decoding.vanilla import vanilla_generate

    generator = torch.Generator().manual_seed(3)
    local = vanilla_generate(
        tiny_pair.target,
        PROMPT,
        spec=spec,
        max_new_tokens=16,
        generator=generator,
        eos_ids=eos_token_ids(tiny_pair),
        vocab_size=tiny_pair.vocab_size,
    )
    assert tokens == local.tokens


def test_a_stop_string_ends_text_tokens_and_logprobs(tiny_pair):
    with ReferenceServer(tiny_pair) as server:
        seed = next(s for s in range(20) if len(server.complete(_body(max_tokens=24, seed=s))["choices"][0]["text"]) >= 4)
        text = server.complete(_body(max_tokens=24, seed=seed))["choices"][0]["text"]
        stop = text[-3:-1]  # a stop the free output reaches, before its end
        answer = server.complete(_body(max_tokens=24, seed=seed, stop=[stop]))
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["text"] == text[: text.index(stop)]
    kept = tiny_pair.tokenizer.decode(_token_ids(answer), skip_special_tokens=True)
    assert stop in kept and kept.index(stop) + len(stop) == len(kept)  # the last token completes the stop
    assert len(choice["logprobs"]["token_logprobs"]) == answer["usage"]["completion_tokens"] == len(_token_ids(answer))


@pytest.mark.parametrize(
    "field, value", [("logit_bias", {"x": 1}), ("stop", [3]), ("min_p", 1.5), ("presence_penalty", "a"), ("repetition_penalty", 0)]
)
def test_bad_feature_values_are_one_sentence_400s(tiny_pair, field, value):
    server = ReferenceServer(tiny_pair)
    try:
        with pytest.raises(_BadRequest) as caught:
            server.complete(_body(**{field: value}))
    finally:
        server.httpd.server_close()
        server.batcher.close()
    assert caught.value.status == 400 and "\n" not in str(caught.value)


def _decode(pair, cls, spec, seed=0, max_tokens=24):
    decoding = cls(
        pair.target,
        pair.draft,
        PROMPT,
        spec=spec,
        k=4,
        max_new_tokens=max_tokens,
        generator=torch.Generator().manual_seed(seed),
        eos_ids=set(),
        vocab_size=pair.vocab_size,
    )
    while not decoding.step():
        pass
    return decoding


def test_the_penalty_mutants_verify_at_another_state_than_the_correct_engine(tiny_pair):
    from specaudit.decoding import SpeculativeDecoding

    correct = _decode(tiny_pair, SpeculativeDecoding, FEATURE_SAMPLING)
    logits = torch.randn(3, tiny_pair.vocab_size, generator=torch.Generator().manual_seed(0))
    drafted = correct.tokens[:2]
    right = correct.target_distributions(logits, drafted)
    # the correct rows: each at its own prefix
    assert torch.allclose(right[1], warp(logits[1], FEATURE_SAMPLING, Prefix(PROMPT, correct.tokens + drafted[:1])))
    last_token = _decode(tiny_pair, LastTokenPenalties, FEATURE_SAMPLING)
    counted = last_token._stale_prefix().output
    ends = torch.tensor(last_token.result.accepted_per_step).add(1).cumsum(0).tolist()
    assert list(counted) == [last_token.tokens[e - 1] for e in ends if e <= len(last_token.tokens)]
    rows = last_token.target_distributions(logits, drafted)
    stale = torch.stack([warp(row, FEATURE_SAMPLING, Prefix(PROMPT, counted)) for row in logits])
    assert torch.allclose(rows, stale)  # every row at the step's start, drafts not counted
    off = _decode(tiny_pair, PenaltiesOffSpeculating, FEATURE_SAMPLING)
    plain = SamplingSpec(temperature=1.0, min_p=0.1, logit_bias=((10, -1.0),), stop=("k.",))
    assert torch.allclose(off.target_distributions(logits, drafted), warp(logits, plain))


def test_min_p_and_bias_reach_only_the_bonus_row(tiny_pair):
    decoding = _decode(tiny_pair, MinPBiasBonusOnly, FEATURE_SAMPLING)
    logits = torch.randn(3, tiny_pair.vocab_size, generator=torch.Generator().manual_seed(1))
    rows = decoding.target_distributions(logits, [11, 12])
    kept = (rows > 0).sum(-1)
    assert kept[0] == kept[1] == tiny_pair.vocab_size  # no min-p on the verified rows
    assert kept[2] < tiny_pair.vocab_size  # the bonus row truncated


def test_the_policy_mutants(tiny_pair):
    assert PostStopTokens().returned_tokens([1, 2, 3, 4], 2) == [1, 2, 3, 4]
    assert SeedIgnored().request_seed(12345) == SeedIgnored().request_seed(None) == 0

    class Row:  # a decoding whose steps emitted 2, 1 and 3 tokens
        class decoding:  # noqa: N801
            class result:  # noqa: N801
                accepted_per_step = [1, 0, 2]

    probs = torch.arange(6.0)[:, None].expand(6, 4)
    assert LogprobsFirstOfStep().logprob_distributions(probs, Row)[:, 0].tolist() == [0, 0, 2, 3, 3, 3]


def test_the_grammar_mutant_masks_only_the_bonus_row(tiny_pair):
    pytest.importorskip("llguidance")
    from specaudit.testing.server_mutants import GRAMMAR_SAMPLING, DraftSkipsGrammar

    decoding = DraftSkipsGrammar(  # before its first step: the output is empty, the grammar at its start
        tiny_pair.target,
        tiny_pair.draft,
        PROMPT,
        spec=GRAMMAR_SAMPLING,
        k=4,
        max_new_tokens=4,
        generator=torch.Generator().manual_seed(0),
        eos_ids=set(),
        vocab_size=tiny_pair.vocab_size,
    )
    logits = torch.randn(3, tiny_pair.vocab_size, generator=torch.Generator().manual_seed(2))
    rows = decoding.target_distributions(logits[:1], [])
    assert (rows[0] > 0).sum() < tiny_pair.vocab_size  # a lone row is the bonus row: masked
    rows = decoding.target_distributions(logits, [20, 21])  # two drafts ('r', 's') and the bonus row
    assert (rows[0] > 0).sum() == (rows[1] > 0).sum() == tiny_pair.vocab_size and (rows[2] > 0).sum() < tiny_pair.vocab_size
    assert (decoding.draft_distribution(logits[0], []) > 0).sum() == tiny_pair.vocab_size
