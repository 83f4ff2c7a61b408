"""The Monte Carlo nulls of the surprisal and draft-affinity statistics: calibrated where rare
tokens make the normal approximation of the martingale CLT fail, on synthetic heavy tails and on
tiny models, and still powered against a sampler that pulls its output toward the draft."""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from specaudit.decoding.speculative import speculative_generate
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.models._tiny import tiny_draft_of, tiny_model
from specaudit.selftest.mutants import MUTANTS
from specaudit.stats.equivalence import draft_affinity, surprisal_martingale
from specaudit.stats.scoring import (
    monte_carlo_null_draws,
    score_records,
    token_statistics,
)

TESTS = {"surprisal": surprisal_martingale, "draft_affinity": draft_affinity}
VARIANCES = {"surprisal": "surprisal_var", "draft_affinity": "q_var"}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _binomial_interval(n, alpha):
    low, high = stats.binom.interval(0.95, n, alpha)
    return low / n, high / n


def test_null_draws_have_the_moments_of_the_statistics():
    g = torch.Generator().manual_seed(0)
    logits = 2.0 * torch.randn(30, 40, generator=g)
    p = torch.softmax(logits, -1).double()
    q = torch.softmax(logits + torch.randn(30, 40, generator=g), -1).double()
    tokens = torch.multinomial(p, 1, generator=g).squeeze(1)
    draws = monte_carlo_null_draws(p, tokens, 20_000, draft_probs=q, seed=1)
    columns = token_statistics(p, tokens, q)
    for name, variance in VARIANCES.items():
        total_var = columns[variance].sum()
        assert abs(draws[name].mean()) < 4 * np.sqrt(total_var / 20_000)
        assert draws[name].var() == pytest.approx(total_var, rel=0.05)
    # Seeded: the same draws again, other draws with another seed; the draft changes nothing
    # about the surprisal draws (both statistics read the same resampled tokens).
    again = monte_carlo_null_draws(p, tokens, 20_000, draft_probs=q, seed=1)
    assert all(np.array_equal(draws[name], again[name]) for name in TESTS)
    assert not np.array_equal(draws["surprisal"], monte_carlo_null_draws(p, tokens, 20_000, seed=2)["surprisal"])
    without_draft = monte_carlo_null_draws(p, tokens, 20_000, seed=1)
    assert set(without_draft) == {"surprisal"} and np.array_equal(without_draft["surprisal"], draws["surprisal"])


def _heavy_tailed_run(rng, n_tokens, rare=1e-6, n_rare=1000):
    """Every position: one token of probability 1 − n_rare·rare and n_rare tokens of ``rare``;
    the draft agrees with the target (q = p)."""
    p = torch.full((n_tokens, n_rare + 1), rare, dtype=torch.float64)
    p[:, 0] = 1 - n_rare * rare
    tokens = torch.as_tensor(rng.choice(n_rare + 1, size=n_tokens, p=p[0].numpy()))
    frame = pd.DataFrame(token_statistics(p, tokens, p))
    frame.insert(0, "key", "run|vanilla|0")
    draws = monte_carlo_null_draws(p, tokens, 2000, draft_probs=p, seed=int(rng.integers(1 << 31)))
    return frame, {name: {"run|vanilla|0": values} for name, values in draws.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TESTS))
def test_monte_carlo_null_holds_where_the_normal_approximation_fails(name):
    """100 positions with a 1e-3 chance of a p = 1e-6 token each: one such token gives
    |z| ≈ 2.8 (surprisal) or 3.2 (draft affinity: q of the token missed ≈ 1 against a total
    variance ≈ 0.1), normal p ≤ 0.005, yet it happens in ~10% of runs. The Monte Carlo p-value
    knows that."""
    rng = np.random.default_rng(3)
    n_runs, alpha = 600, 0.01
    normal = mc = 0
    for _ in range(n_runs):
        frame, null = _heavy_tailed_run(rng, 100)
        normal += TESTS[name](frame).pvalue < alpha
        mc += TESTS[name](frame, null=null[name]).pvalue < alpha
    assert normal / n_runs > 0.05  # about 0.095: ten times the nominal rate
    assert mc / n_runs <= _binomial_interval(n_runs, alpha)[1]


@pytest.mark.slow
def test_monte_carlo_nulls_are_calibrated_on_tiny_models():
    """A tiny Llama whose output layer is scaled up so that about a third of the positions are
    near-certain and rare tokens carry large surprisal, with a noisy copy as the draft; 600 audits
    of 6 sampled prompts each, scored as the analysis scores them (target and draft). Both Monte
    Carlo p-values reject at the nominal rates."""
    model = tiny_model(seed=0, vocab_size=1024)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    draft = tiny_draft_of(model, noise=0.3, seed=1)
    g = torch.Generator().manual_seed(2)
    n_audits, per_audit, n_new = 600, 6, 16
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
    scores = score_records(model, records, draft_model=draft, null_draws=1000, batch_size=64)
    assert {name: set(per_record) for name, per_record in scores.monte_carlo_null.items()} == {
        name: {r["key"] for r in records} for name in TESTS
    }
    pvalues = {name: [] for name in TESTS}
    for audit in range(n_audits):
        members = scores.select(prompt_ids=[f"r{i}" for i in range(audit * per_audit, (audit + 1) * per_audit)])
        for name, test in TESTS.items():
            result = test(members)
            assert result.method.startswith("Monte Carlo null")
            pvalues[name].append(result.pvalue)
    for name, values in pvalues.items():
        values = np.array(values)
        low, high = _binomial_interval(n_audits, 0.05)
        assert low <= np.mean(values < 0.05) <= high, name
        assert np.mean(values < 0.01) <= _binomial_interval(n_audits, 0.01)[1], name
        assert np.mean(values < 0.5) >= 0.4, name  # not conservative to the point of never rejecting


@pytest.mark.slow
@pytest.mark.parametrize("mutant", ["always_accept", "resample_from_p"])
def test_draft_affinity_with_its_monte_carlo_null_catches_samplers_pulled_toward_the_draft(mutant):
    """Two self-test mutants whose output over-represents what the draft proposes, run through
    the speculative engine on the tiny pair: 10 audits of 8 prompts x 24 tokens (about 190
    tokens) each. Measured: always_accept caught 10/10 (p at the Monte Carlo floor),
    resample_from_p 9/10."""
    target = tiny_model(0)
    draft = tiny_draft_of(target, noise=0.3, seed=1)
    vocab, spec = target.config.vocab_size, SamplingSpec(1.0)
    caught = 0
    for audit in range(10):
        g = torch.Generator().manual_seed(audit)
        records = []
        for i, prompt in enumerate(torch.randint(3, vocab, (8, 4), generator=g).tolist()):
            out = speculative_generate(
                target,
                draft,
                prompt,
                spec=spec,
                k=3,
                max_new_tokens=24,
                generator=g,
                eos_ids=set(),
                vocab_size=vocab,
                verify=MUTANTS[mutant],
            )
            records.append(
                {
                    "key": f"p{i}|speculative|0",
                    "prompt_id": f"p{i}",
                    "engine": "speculative",
                    "sampling": spec.to_dict(),
                    "prompt_token_ids": prompt,
                    "output_token_ids": out.tokens,
                }
            )
        result = draft_affinity(score_records(target, records, draft_model=draft, null_draws=1000, batch_size=64))
        assert result.method.startswith("Monte Carlo null")
        caught += result.pvalue < 0.05 and result.statistic > 0
    assert caught >= 8
