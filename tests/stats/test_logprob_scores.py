"""White-box scores from returned top-N logprobs: exact PIT, calibration, power, raw-mode warping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from specaudit.decoding import SamplingSpec, warp
from specaudit.stats.equivalence import goodness_of_fit, impossible_tokens, pit_uniformity
from specaudit.stats.logprob_scores import carries_sampling_logprobs, scores_from_logprobs
from specaudit.stats.scoring import token_statistics


def _record(key: str, prompt: str, tokens, dists, top_n: int, *, sampling=None, mode="processed", logp=None):
    """A record as the endpoint backend writes it; `logp` [len, V] are the logprobs the server
    reports (default: log of `dists`, the distributions the tokens were drawn from)."""
    with np.errstate(divide="ignore"):
        logp = np.log(np.asarray(dists)) if logp is None else np.asarray(logp)
    order = np.argsort(-logp, axis=1, kind="stable")[:, :top_n]  # ties by ascending id
    entries = []
    for t, token in enumerate(tokens):
        own = logp[t, token]
        entries.append(
            {
                "token_logprob": float(own) if np.isfinite(own) else None,
                "top": [[int(i), float(logp[t, i])] for i in order[t] if np.isfinite(logp[t, i])],
            }
        )
    return {
        "key": key,
        "prompt_id": prompt,
        "engine": "speculative",
        "sample": 0,
        "attributes": {},
        "sampling": sampling or {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
        "output_token_ids": [int(t) for t in tokens],
        "target_logprobs": entries,
        "logprobs_mode": mode,
    }


def _draws(rng, n: int, vocab: int, *, sharpen: float = 1.0):
    """n positions: model distributions p (random logits) and tokens drawn from p^sharpen (renormalised)."""
    logits = rng.normal(0.0, 2.0, (n, vocab))
    dists = np.exp(logits - logits.max(axis=1, keepdims=True))
    dists /= dists.sum(axis=1, keepdims=True)
    drawn = dists**sharpen
    drawn /= drawn.sum(axis=1, keepdims=True)
    tokens = np.minimum((drawn.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), vocab - 1)
    return tokens.tolist(), dists


def test_full_top_n_equals_teacher_forced_statistics():
    rng = np.random.default_rng(1)
    tokens, dists = _draws(rng, 50, 12)
    scores = scores_from_logprobs([_record("a", "p", tokens, dists, top_n=12)])
    reference = token_statistics(torch.as_tensor(dists), tokens)
    for column in ("p", "cdf_below", "surprisal", "entropy", "surprisal_var", "p_min"):
        np.testing.assert_allclose(scores.tokens[column].to_numpy(float), reference[column], rtol=1e-9, atol=1e-12, err_msg=column)


def test_token_outside_top_n_gets_the_tail_interval_and_null_is_impossible():
    dists = np.array([[0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.2, 0.0]])
    record = _record("a", "p", [3, 3], dists, top_n=2)
    scores = scores_from_logprobs([record]).tokens
    assert scores.loc[0, "cdf_below"] == pytest.approx(0.8) and scores.loc[0, "p"] == pytest.approx(0.2)
    assert scores.loc[0, "surprisal"] == pytest.approx(-math.log(0.05))  # the real p, for log-likelihoods
    assert math.isnan(scores.loc[0, "entropy"])  # the top-2 does not hold the distribution
    assert scores.loc[1, "p"] == 0.0 and impossible_tokens(scores).offenders == (("a", 1, 3),)


@pytest.mark.slow
def test_pit_is_calibrated_and_catches_a_sharpened_sampler():
    """200 replicates of 200 tokens, top-5 of 30 tokens (a fifth of the emitted tokens fall outside)."""
    rng = np.random.default_rng(7)
    replicates = 200

    def rejections(sharpen: float) -> int:
        records = []
        for r in range(replicates):
            for j in range(2):
                tokens, dists = _draws(rng, 100, 30, sharpen=sharpen)
                records.append(_record(f"r{r}|{j}", f"r{r}", tokens, dists, top_n=5))
        tokens = scores_from_logprobs(records).tokens
        if sharpen == 1.0:  # the tail case matters: many emitted tokens lie outside the top-5
            assert (tokens["cdf_below"] + tokens["p"] > 1 - 1e-9).mean() > 0.15
        groups = tokens.groupby("prompt_id")
        return sum(pit_uniformity(frame, seed=i, alpha=0.05).pvalue < 0.05 for i, (_, frame) in enumerate(groups))

    null = rejections(1.0)
    assert 3 <= null <= 20, null  # nominal 10 of 200 (binomial 99.9% range 2-21); measured 13
    assert rejections(1.3) >= 190  # output sharper than the reported distribution (measured 197)


def test_raw_logprobs_are_warped_exactly_when_top_k_fits_in_top_n():
    rng = np.random.default_rng(3)
    spec = SamplingSpec(temperature=0.7, top_k=4, top_p=0.9)
    logits = torch.as_tensor(rng.normal(0.0, 2.0, (40, 16)))
    warped = warp(logits, spec).numpy()
    tokens = [rng.choice(16, p=row / row.sum()) for row in warped]
    raw = torch.log_softmax(logits, dim=-1).numpy()
    record = _record("a", "p", tokens, None, top_n=6, sampling=spec.to_dict(), mode="raw", logp=raw)
    assert carries_sampling_logprobs([record])
    scores = scores_from_logprobs([record]).tokens
    reference = token_statistics(torch.as_tensor(warped, dtype=torch.float64), tokens)
    for column in ("p", "cdf_below", "entropy", "surprisal_var"):
        np.testing.assert_allclose(scores[column].to_numpy(float), reference[column], rtol=1e-6, atol=1e-9, err_msg=column)
    # without a top-k inside the top-N, raw logprobs cannot give the tempered distribution
    untied = _record("b", "p", tokens, None, top_n=6, sampling={"temperature": 0.7, "top_k": 0, "top_p": 1.0}, mode="raw", logp=raw)
    assert not carries_sampling_logprobs([untied])


def test_martingale_is_left_out_without_entropy():
    rng = np.random.default_rng(5)
    tokens, dists = _draws(rng, 300, 30)
    scores = scores_from_logprobs([_record("a", "p", tokens, dists, top_n=5)])
    result = goodness_of_fit(scores, by=[], alpha=0.05)
    assert set(result.tests) == {"pit"} and result.verdict == "PASS"
