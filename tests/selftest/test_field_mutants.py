"""Field mutants inside the real speculative engine (tiny models): exactly the correct sampler
at settings where their bug cannot show, a different output where it can."""

import pytest
import torch

from specaudit.decoding import SamplingSpec, reference_verify, speculative_generate
from specaudit.decoding.settings import BUG_CLASSES
from specaudit.prompts import prompt_token_ids
from specaudit.selftest.end_to_end import _verdict, blind_class, e2e_samplers
from specaudit.selftest.field_mutants import FIELD_MUTANTS
from specaudit.selftest.mutants import MUTANTS


def _tokens(pair, verify, spec, seed, text="Explain why the sky is blue."):
    generator = torch.Generator(device=pair.device).manual_seed(seed)
    ids = prompt_token_ids(pair.tokenizer, text)
    out = speculative_generate(
        pair.target,
        pair.draft,
        ids,
        spec=spec,
        k=4,
        max_new_tokens=24,
        generator=generator,
        eos_ids=set(),
        vocab_size=pair.vocab_size,
        verify=verify,
    )
    assert not out.verify_violations
    return out.tokens


@pytest.mark.parametrize("name", list(FIELD_MUTANTS))
def test_field_mutant_is_the_correct_sampler_where_its_class_is_blind(tiny_pair, name):
    # Same seed, same uniforms: at T = 1 without truncation the mutant's q or p is the engine's
    # own, so it emits token for token what the correct sampler emits.
    spec = SamplingSpec()
    assert blind_class(name, spec) is not None
    for seed in range(3):
        assert _tokens(tiny_pair, FIELD_MUTANTS[name], spec, seed) == _tokens(tiny_pair, reference_verify, spec, seed)


@pytest.mark.parametrize("name", list(FIELD_MUTANTS))
def test_field_mutant_changes_the_output_where_its_class_shows(tiny_pair, name):
    spec = SamplingSpec(0.7, 0, 0.9)
    assert blind_class(name, spec) is None
    differ = sum(
        _tokens(tiny_pair, FIELD_MUTANTS[name], spec, seed) != _tokens(tiny_pair, reference_verify, spec, seed) for seed in range(3)
    )
    assert differ >= 1


def test_greedy_verification_is_correct_only_at_greedy(tiny_pair):
    greedy, sampled = SamplingSpec(0.0), SamplingSpec(0.7, 0, 0.9)
    mutant = MUTANTS["greedy_verification"]
    assert _tokens(tiny_pair, mutant, greedy, 0) == _tokens(tiny_pair, reference_verify, greedy, 0)
    # at T > 0 its output is the argmax path whatever the seed
    assert (
        _tokens(tiny_pair, mutant, sampled, 0) == _tokens(tiny_pair, mutant, sampled, 1) == _tokens(tiny_pair, reference_verify, greedy, 0)
    )


def test_every_bug_class_has_a_mutant_the_self_test_runs():
    runnable = e2e_samplers()
    for bug in BUG_CLASSES:
        assert all(m.strip() in runnable for m in bug.mutant.split(",")), bug


def test_selftest_targets_say_what_each_row_is_held_to():
    t1, warped = SamplingSpec(), SamplingSpec(0.7, 0, 0.9)
    # a mutant that is blind at the setting is held to the correct sampler's calibration
    assert _verdict("draft_q_before_truncation", 0.0, 0.7, 0.05, spec=t1) == {
        "target": "alpha in CI",
        "ok": True,
        "expected": "blind at t=1: no top-k and no top-p (q is then the same before and after), or greedy",
    }
    assert not _verdict("draft_q_before_truncation", 0.3, 1.0, 0.05, spec=t1)["ok"]  # caught where it cannot be: a bug of ours
    assert not _verdict("draft_q_before_truncation", 0.0, 0.7, 0.05, spec=warped)["ok"]
    assert _verdict("draft_q_before_truncation", 0.3, 1.0, 0.05, spec=warped)["ok"]
    # out of the quick budget's reach: reported, not failed; the full self-test still requires it
    quick = _verdict("bf16_draft_logits", 0.0, 0.7, 0.05, spec=t1, quick=True)
    assert quick["ok"] and quick["expected"].startswith("out of the quick budget's reach")
    assert not _verdict("bf16_draft_logits", 0.0, 0.7, 0.05, spec=t1)["ok"]
    assert not _verdict("always_accept", 0.0, 0.7, 0.05, spec=t1, quick=True)["ok"]
