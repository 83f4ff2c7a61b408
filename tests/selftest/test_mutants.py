"""Mutant samplers and the unit-level calibration/power harness."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from specaudit.decoding.verify import reference_verify
from specaudit.errors import InputError
from specaudit.selftest.harness import calibrate_unit, power_unit, unit_selftest
from specaudit.selftest.mutants import MUTANTS, _float32_path_q

BUGGY = [name for name in MUTANTS if name != "correct"]
# The DeepSpec #31 class moves the output by well under 1% TV: out of reach of a seconds-long
# unit audit (it needs ~1e5-1e6 samples), so its power is measured and reported, not required.
BELOW_UNIT_BUDGET = {"bf16_draft_logits"}


def _inputs(vocab=16, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(k + 1, vocab, generator=g) ** 3
    q = torch.rand(k, vocab, generator=g) ** 3
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    drafts = torch.multinomial(q, 1, generator=g).squeeze(1)
    return drafts, q, p, g


def test_registry_has_correct_sampler_and_each_bug_class():
    assert MUTANTS["correct"] is reference_verify
    required = {
        "always_accept",
        "softmax_residual",
        "resample_from_p",
        "greedy_draft",
        "target_not_warped",
        "raw_draft_q",
        "bonus_wrong_position",
        "bf16_draft_logits",
        "deterministic_accept",
        "vocab_padding_off_by_one",
        "shared_uniform",
        "q_floor",
        "power_ratio",
    }
    assert required <= set(MUTANTS)


@pytest.mark.parametrize("name", BUGGY)
def test_mutant_docstring_names_its_real_bug(name):
    doc = MUTANTS[name].__doc__ or ""
    # an ANCHORS.md row (issue/PR number or advisory) or docs/selftest.md's bug-class table
    assert re.search(r"#\d+|GHSA-|docs/selftest\.md", doc), doc


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_follows_the_verify_contract(name):
    for seed in range(20):
        drafts, q, p, g = _inputs(seed=seed)
        out = MUTANTS[name](drafts, q, p, g)
        assert out.dtype == torch.long and out.dim() == 1 and 1 <= out.shape[0] <= 5
        assert ((out >= 0) & (out <= 16)).all()  # id 16 == vocab size only from the padding bug


def test_padding_mutant_can_emit_vocab_size():
    emitted = set()
    for seed in range(300):
        drafts, q, p, g = _inputs(vocab=8, seed=seed)
        emitted.update(MUTANTS["vocab_padding_off_by_one"](drafts, q, p, g).tolist())
    assert 8 in emitted


def test_bf16_mutant_is_a_real_but_small_bug():
    # exact emitted distribution at one position: q·a + (1 - Σ q·a)·residual, a = min(1, p/q')
    rng = np.random.default_rng(0)
    p = torch.tensor(rng.dirichlet(np.ones(64)), dtype=torch.float64)
    q = torch.tensor(rng.dirichlet(np.ones(64)), dtype=torch.float32)
    q_used = _float32_path_q(q[None])[0].double()
    q = q.double()
    # logits near 24 round to within 1/16 nat in bf16; renormalising adds at most as much again
    assert 0 < (q_used / q).log().abs().max() <= 0.125 + 1e-9
    accept = torch.clamp(p / q_used, max=1.0)
    residual = (p - q_used).clamp_min(0)
    emitted = q * accept + (1 - (q * accept).sum()) * residual / residual.sum()
    tv = 0.5 * (emitted - p).abs().sum().item()
    assert 1e-4 < tv < 0.01


@pytest.mark.slow
def test_calibration_of_correct_sampler_over_200_seeds():
    # small but honest budget (40 trials per case) so 200 audits fit in about a minute
    rate = calibrate_unit("correct", seeds=range(200), trials=40, large_vocab_trials=10)
    assert rate.seeds == 200
    assert rate.calibrated, rate
    assert rate.ci_low <= 0.05 <= rate.ci_high
    assert rate.samples_per_audit > 1000


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in BUGGY if n not in BELOW_UNIT_BUDGET])
def test_mutant_detected_at_default_budget(name):
    rate = power_unit(name, seeds=range(1000, 1003))
    assert rate.rejections == rate.seeds, rate


def test_unit_selftest_table():
    table = unit_selftest(seeds=range(2), samplers=["correct", "always_accept"], trials=30, large_vocab_trials=5)
    assert list(table["sampler"]) == ["correct", "always_accept"]
    assert {"rejection_rate", "ci_low", "ci_high", "samples_per_audit", "seconds_per_audit", "ok"} <= set(table.columns)
    assert table.loc[1, "rejection_rate"] == 1.0 and bool(table.loc[1, "ok"])
    with pytest.raises(InputError, match="unknown sampler"):
        power_unit("no_such_bug", seeds=range(1))
