"""Unit audit of rejection-sampling functions: exactness, hard failures, large vocabularies."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from specaudit.decoding.verify import reference_verify, sample_from
from specaudit.errors import InputError
from specaudit.stats import SamplerAuditResult, audit_sampler
from specaudit.stats.sampler_audit import FAMILIES, _large_vocab, _pooled_test


def test_reference_sampler_passes_default_audit():
    result = audit_sampler(reference_verify, seed=1)
    assert isinstance(result, SamplerAuditResult)
    assert result.verdict == "PASS" and result.passed
    assert result.pvalue > result.alpha == 0.05
    assert result.impossible == 0 and result.out_of_vocab == 0 and result.impossible_rejections == 0
    table = result.table
    assert {"family", "vocab", "position", "n", "statistic", "pvalue", "pvalue_holm"} <= set(table.columns)
    # every family is audited, including both large vocabularies and the bonus position
    families = set(table["family"])
    assert {"peaked", "disjoint", "q-zero", "top-k", "top-p", "large-vocab", "all"} <= families
    assert {8193, 151936} <= set(table["vocab"])
    assert (table["kind"] == "bonus").sum() >= 8
    # Holm-adjusted p-values never fall below the raw ones; overall p = smallest adjusted one
    assert (table["pvalue_holm"] >= table["pvalue"] - 1e-15).all()
    assert result.pvalue == pytest.approx(table["pvalue_holm"].min())
    assert result.statistic == pytest.approx(table["pvalue"].min())
    assert result.worst["pvalue"] == pytest.approx(result.statistic)
    assert result.samples > 10_000 and result.trials == 11 * 400 + 2 * 100


def test_same_seed_same_audit():
    first = audit_sampler(reference_verify, seed=5, trials=50, families=["dirichlet", "top-p"])
    second = audit_sampler(reference_verify, seed=5, trials=50, families=["dirichlet", "top-p"])
    pd.testing.assert_frame_equal(first.table, second.table)
    assert first.pvalue == second.pvalue


def test_disjoint_support_only_tests_first_position():
    # q and p never overlap, so every draft is rejected: only position 1 is ever reached
    result = audit_sampler(reference_verify, seed=0, trials=200, families=["disjoint"])
    case_rows = result.table[result.table["family"] == "disjoint"]
    assert set(case_rows["position"]) == {1}
    assert (case_rows["beta"] == 0).all() and (case_rows["n"] == 200).all()


def _uniform_on_rejection(draft_tokens, draft_probs, target_probs, generator):
    """Correct acceptance, but the correction token is drawn uniformly over the vocabulary."""
    k, vocab = draft_probs.shape
    positions = torch.arange(k)
    p = target_probs[positions, draft_tokens].double()
    q = draft_probs[positions, draft_tokens].double()
    accepted = torch.rand(k, generator=generator, dtype=torch.float64) * q < p
    n = int(accepted.long().cumprod(0).sum())
    last = sample_from(torch.ones(vocab), generator) if n < k else sample_from(target_probs[k], generator)
    return torch.cat([draft_tokens[:n], torch.tensor([last])])


def test_impossible_tokens_are_a_hard_failure():
    # top-k/top-p masks make most tokens impossible; one emitted masked token fails the audit
    result = audit_sampler(_uniform_on_rejection, seed=0, trials=100, families=["top-k", "top-p"])
    assert result.verdict == "FAIL"
    assert result.impossible > 0 and result.out_of_vocab == 0
    assert result.pvalue == 0.0
    assert math.isinf(result.worst["statistic"]) and result.worst["impossible"] > 0


def test_rejecting_a_draft_with_p_at_least_q_is_a_hard_failure():
    from specaudit.selftest.mutants import MUTANTS

    # bf16 q in the ratio, fp32 q sampled: with identical p and q a correct verifier never
    # rejects, this one rejects ~1.5% of drafts, long before the emitted distribution shows it
    result = audit_sampler(MUTANTS["bf16_draft_logits"], seed=0, families=["identical"])
    assert result.verdict == "FAIL" and result.pvalue == 0.0 and result.impossible == 0
    assert result.impossible_rejections > 0
    rows = result.table[result.table["test"] == "forced-accept"]
    assert rows["statistic"].sum() == result.impossible_rejections and (rows["pvalue"] == 0).all()
    assert audit_sampler(reference_verify, seed=0, families=["identical", "near-identical"]).impossible_rejections == 0


def _emits_vocab_size(draft_tokens, draft_probs, target_probs, generator):
    """Bonus token id == vocab size (the padded-slot bug), everything else correct."""
    out = reference_verify(draft_tokens, draft_probs, target_probs, generator)
    if out.shape[0] == draft_tokens.shape[0] + 1:
        out[-1] = target_probs.shape[-1]
    return out


@pytest.mark.parametrize("vocab", [8193, 151936])
def test_out_of_vocab_id_detected_at_large_vocab(vocab):
    result = audit_sampler(_emits_vocab_size, seed=0, trials=40, families="large-vocab", large_vocab_sizes=(vocab,), large_vocab_trials=40)
    assert result.verdict == "FAIL"
    assert result.out_of_vocab > 0 and result.impossible >= result.out_of_vocab
    assert result.worst["vocab"] == vocab and result.worst["kind"] == "bonus"


def test_large_vocab_151936_correct_sampler_passes():
    result = audit_sampler(reference_verify, seed=2, families="large-vocab", large_vocab_sizes=(151936,), large_vocab_trials=150)
    assert result.verdict == "PASS"
    rows = result.table[result.table["vocab"] == 151936]
    assert len(rows) >= 5 and rows["n"].iloc[0] == 150
    # the cases put mass on the last id, where padding bugs live, and a real top-p zero tail
    p, q = _large_vocab(4, 151936, np.random.default_rng(0))
    assert (p[:, -1] > 0).any() and (q[:, -1] > 0).any()
    assert ((p > 0).sum(axis=1) <= 256).all()


def test_user_vocab_above_256_uses_scattered_support():
    result = audit_sampler(reference_verify, seed=3, vocab_size=32000, trials=60, families=["dirichlet", "q-zero"])
    assert set(result.table["vocab"]) == {32000, 0}
    assert result.verdict == "PASS"


def test_draft_leaning_sampler_caught_by_pooled_ratio_pit():
    def lean_to_draft(draft_tokens, draft_probs, target_probs, generator):
        # accept with min(1, 1.1 p/q): a 10% over-acceptance, nothing impossible
        k = draft_tokens.shape[0]
        positions = torch.arange(k)
        p = target_probs[positions, draft_tokens].double()
        q = draft_probs[positions, draft_tokens].double()
        accepted = torch.rand(k, generator=generator, dtype=torch.float64) * q < 1.1 * p
        n = int(accepted.long().cumprod(0).sum())
        last_probs = target_probs[k] if n == k else (target_probs[n] - draft_probs[n]).clamp_min(0)
        return torch.cat([draft_tokens[:n], torch.tensor([sample_from(last_probs, generator)])])

    result = audit_sampler(lean_to_draft, seed=0)
    pooled = result.table[result.table["test"] == "ratio-pit"].iloc[0]
    assert pooled["statistic"] > 3.5  # toward the draft: positive z
    assert result.verdict == "FAIL" and result.impossible == 0


def test_pooled_test_is_calibrated_in_the_far_tail():
    # The audit decides at ~alpha/100: check the tail of the pooled statistic where Pearson's X²
    # fails (a peaked target: one bin of 90% beside small ones), by simulating the null.
    rng = np.random.default_rng(0)
    p = np.concatenate([[0.9], rng.dirichlet(np.full(63, 0.5)) * 0.1])
    n = 600
    order = np.argsort(-p, kind="stable")
    draws = rng.multinomial(n, p, size=200_000)
    _, bins, pvalues = _pooled_test(draws.astype(float), n * p, order, 10.0)
    assert bins >= 5
    for level in (1e-2, 1e-3, 3e-4):
        assert 0.7 * level < (pvalues <= level).mean() < 1.4 * level


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="unknown sampler-audit families"):
        audit_sampler(reference_verify, families=["dirichlet", "gaussian"])
    with pytest.raises(InputError, match="trials"):
        audit_sampler(reference_verify, trials=0)
    with pytest.raises(InputError, match="vocab_size"):
        audit_sampler(reference_verify, vocab_size=1)
    with pytest.raises(InputError, match="alpha"):
        audit_sampler(reference_verify, alpha=1.5)
    with pytest.raises(InputError, match="verify must be a function"):
        audit_sampler("reference")
    with pytest.raises(InputError, match="1..k\\+1 token ids"):
        audit_sampler(lambda d, q, p, g: torch.zeros(0, dtype=torch.long), trials=2, families="identical")
    with pytest.raises(InputError, match="integer token ids"):
        audit_sampler(lambda d, q, p, g: torch.zeros(1), trials=2, families="identical")


def test_families_listed():
    assert len(FAMILIES) == len(set(FAMILIES)) == 10
