"""The surprisal statistic's Monte Carlo null: calibrated where tokens of p ≈ 1e-6 make the
normal approximation of the martingale CLT fail, on synthetic heavy tails and on a tiny model."""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.models._tiny import tiny_model
from specaudit.stats.equivalence import surprisal_martingale
from specaudit.stats.scoring import (
    score_records,
    surprisal_null_draws,
    token_statistics,
)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _binomial_high(n, alpha):
    return stats.binom.interval(0.95, n, alpha)[1] / n


def test_null_draws_have_the_moments_of_the_statistic():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(2.0 * torch.randn(30, 40, generator=g), -1).double()
    tokens = torch.multinomial(p, 1, generator=g).squeeze(1)
    draws = surprisal_null_draws(p, tokens, 20_000, seed=1)
    columns = token_statistics(p, tokens)
    assert abs(draws.mean()) < 4 * np.sqrt(columns["surprisal_var"].sum() / 20_000)
    assert draws.var() == pytest.approx(columns["surprisal_var"].sum(), rel=0.05)
    # Seeded: the same draws again, other draws with another seed.
    assert np.array_equal(draws, surprisal_null_draws(p, tokens, 20_000, seed=1))
    assert not np.array_equal(draws, surprisal_null_draws(p, tokens, 20_000, seed=2))


def _heavy_tailed_run(rng, n_tokens, rare=1e-6, n_rare=1000):
    """Every position: one token of probability 1 − n_rare·rare and n_rare tokens of ``rare``."""
    p = torch.full((n_tokens, n_rare + 1), rare, dtype=torch.float64)
    p[:, 0] = 1 - n_rare * rare
    tokens = torch.as_tensor(rng.choice(n_rare + 1, size=n_tokens, p=p[0].numpy()))
    frame = pd.DataFrame(token_statistics(p, tokens))
    frame.insert(0, "key", "run|vanilla|0")
    return frame, {"run|vanilla|0": surprisal_null_draws(p, tokens, 2000, seed=int(rng.integers(1 << 31)))}


def test_monte_carlo_null_holds_where_the_normal_approximation_fails():
    """100 positions with a 1e-3 chance of a p = 1e-6 token each: one such token gives z ≈ 2.8,
    normal p ≈ 0.005, yet it happens in ~10% of runs. The Monte Carlo p-value knows that."""
    rng = np.random.default_rng(3)
    n_runs, alpha = 600, 0.01
    normal = mc = 0
    for _ in range(n_runs):
        frame, null = _heavy_tailed_run(rng, 100)
        normal += surprisal_martingale(frame).pvalue < alpha
        mc += surprisal_martingale(frame, null=null).pvalue < alpha
    assert normal / n_runs > 0.05  # about 0.095: ten times the nominal rate
    assert mc / n_runs <= _binomial_high(n_runs, alpha)


def test_monte_carlo_null_is_calibrated_on_a_tiny_model():
    """A tiny Llama whose output layer is scaled up so that most positions are near-certain and
    rare tokens carry large surprisal; 200 audits of 6 sampled prompts each, scored as the
    analysis scores them. The Monte Carlo p-values reject at the nominal rates."""
    model = tiny_model(seed=0, vocab_size=1024)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    g = torch.Generator().manual_seed(1)
    n_audits, per_audit, n_new = 200, 6, 16
    prompts = torch.randint(3, 1024, (n_audits * per_audit, 4), generator=g)
    ids = prompts
    with torch.no_grad():
        for _ in range(n_new):
            p = warp(model(ids).logits[:, -1], SamplingSpec(1.0)).double()
            ids = torch.cat([ids, torch.multinomial(p, 1, generator=g)], 1)
    records = [
        {
            "key": f"r{i}|vanilla|0",
            "prompt_id": f"r{i}",
            "engine": "vanilla",
            "sample": 0,
            "sampling": {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
            "attributes": {},
            "prompt_token_ids": prompts[i].tolist(),
            "output_token_ids": ids[i, 4:].tolist(),
        }
        for i in range(len(prompts))
    ]
    scores = score_records(model, records, null_draws=1000, batch_size=64)
    assert set(scores.surprisal_null) == {r["key"] for r in records}
    pvalues = []
    for audit in range(n_audits):
        members = [f"r{i}" for i in range(audit * per_audit, (audit + 1) * per_audit)]
        result = surprisal_martingale(scores.select(prompt_ids=members))
        assert result.method.startswith("Monte Carlo null")
        pvalues.append(result.pvalue)
    pvalues = np.array(pvalues)
    for alpha in (0.05, 0.01):
        assert np.mean(pvalues < alpha) <= _binomial_high(n_audits, alpha)
    assert np.mean(pvalues < 0.5) >= 0.35  # not conservative to the point of never rejecting
