"""Teacher-forced scoring: exact per-token maths, batching invariance, records handling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.errors import InputError
from specaudit.stats.scoring import TokenScores, logit_gaps, score_records, token_statistics

SPEC = SamplingSpec(temperature=0.7, top_k=20, top_p=0.9)


@pytest.fixture(autouse=True)
def _one_thread():
    # The test machine's cores are shared: small tensor ops thrash with several threads.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_llama(seed: int, vocab: int = 64, logit_scale: float = 1.0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # random init is nearly uniform; sharpen it
    return model


def make_records(n: int, seed: int = 0, vocab: int = 64) -> list[dict]:
    rng = np.random.default_rng(seed)
    records = []
    prompts = {f"p{j}": rng.integers(0, vocab, size=2 + j).tolist() for j in range(3)}
    for i in range(n):
        pid = f"p{i % 3}"
        prompt = prompts[pid]
        output = rng.integers(0, vocab, size=3 + (5 * i) % 7).tolist()
        records.append(
            {
                "key": f"{pid}|vanilla|{i}",
                "prompt_id": pid,
                "engine": "vanilla",
                "sample": i,
                "attributes": {"lang": "en" if i % 2 else "fr"},
                "prompt_token_ids": prompt,
                "output_token_ids": output,
                "sampling": SPEC.to_dict(),
                "timing_only": False,
            }
        )
    return records


# ------------------------------------------------------------------ token_statistics
def test_token_statistics_matches_brute_force_with_ties_and_zeros():
    p = torch.tensor(
        [
            [0.3, 0.2, 0.2, 0.0, 0.3],  # ties at 0.3 and 0.2, one impossible token
            [0.1, 0.1, 0.1, 0.1, 0.6],
            [1.0, 0.0, 0.0, 0.0, 0.0],
        ],
        dtype=torch.float64,
    )
    q = torch.tensor([[0.2] * 5, [0.5, 0.0, 0.0, 0.0, 0.5], [0.0, 1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    tokens = [4, 2, 0]
    stats = token_statistics(p, tokens, q)
    for row, x in enumerate(tokens):
        probs = p[row].numpy()
        # descending probability, ties by ascending id
        order = sorted(range(5), key=lambda y: (-probs[y], y))
        before = order[: order.index(x)]
        assert stats["cdf_below"][row] == pytest.approx(probs[before].sum(), abs=1e-12)
        assert stats["p"][row] == pytest.approx(probs[x])
        nz = probs[probs > 0]
        entropy = -(nz * np.log(nz)).sum()
        assert stats["entropy"][row] == pytest.approx(entropy, abs=1e-12)
        assert stats["surprisal_var"][row] == pytest.approx((nz * (-np.log(nz) - entropy) ** 2).sum(), abs=1e-12)
        assert stats["p_min"][row] == pytest.approx(nz.min())
        qr = q[row].numpy()
        assert stats["q"][row] == pytest.approx(qr[x])
        assert stats["q_mean"][row] == pytest.approx((probs * qr).sum())
        assert stats["q_var"][row] == pytest.approx((probs * qr**2).sum() - (probs * qr).sum() ** 2, abs=1e-12)
        assert stats["beta"][row] == pytest.approx(np.minimum(probs, qr).sum())
    # token 4 ties token 0 at 0.3 and comes after it; deterministic distribution has zero variance
    assert stats["cdf_below"][0] == pytest.approx(0.3)
    assert stats["surprisal_var"][2] == 0.0 and stats["entropy"][2] == 0.0


def test_token_statistics_marks_impossible_tokens_with_infinite_surprisal():
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    stats = token_statistics(p, [2])
    assert stats["p"][0] == 0.0 and math.isinf(stats["surprisal"][0])
    assert stats["cdf_below"][0] == pytest.approx(1.0)


def test_token_statistics_rejects_bad_shapes():
    with pytest.raises(InputError):
        token_statistics(torch.ones(3), [0])
    with pytest.raises(InputError):
        token_statistics(torch.ones(2, 3) / 3, [0])
    with pytest.raises(InputError):
        token_statistics(torch.ones(1, 3) / 3, [0], torch.ones(1, 4) / 4)


# ------------------------------------------------------------------ score_records
def test_batched_scores_equal_one_at_a_time_and_direct_forward():
    target, draft = tiny_llama(0, logit_scale=20.0), tiny_llama(1, logit_scale=20.0)
    records = make_records(7)
    one = score_records(target, records, draft_model=draft, batch_size=1)
    many = score_records(target, records, draft_model=draft, batch_size=4)
    assert len(one) == sum(len(r["output_token_ids"]) for r in records)
    numeric = ["p", "cdf_below", "surprisal", "entropy", "surprisal_var", "q", "q_mean", "q_var", "beta"]
    finite = np.isfinite(one.tokens["surprisal"].to_numpy())
    a, b = one.tokens[numeric].to_numpy(), many.tokens[numeric].to_numpy()
    np.testing.assert_allclose(a[finite], b[finite], rtol=1e-4, atol=1e-6)
    assert (one.tokens["key"] == many.tokens["key"]).all()
    np.testing.assert_allclose(one.position_mass["target_mass"], many.position_mass["target_mass"], atol=1e-6)

    # direct, unpadded forward of one record: logits at prompt_len - 1 + t predict output token t
    r = records[5]
    ids = torch.tensor([r["prompt_token_ids"] + r["output_token_ids"]])
    with torch.no_grad():
        probs = warp(target(ids).logits[0], SPEC).double()
    start = len(r["prompt_token_ids"]) - 1
    expected = [float(probs[start + t, x] / probs[start + t].sum()) for t, x in enumerate(r["output_token_ids"])]
    got = many.tokens[many.tokens["key"] == r["key"]]["p"].to_numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_scores_carry_ids_attributes_and_spec():
    target = tiny_llama(0, logit_scale=20.0)
    records = make_records(4)
    scores = score_records(target, records)
    assert isinstance(scores, TokenScores) and scores.spec == SPEC
    row = scores.tokens.iloc[0]
    assert row["key"] == records[0]["key"] and row["position"] == 0 and row["attr.lang"] == "fr"
    assert scores.tokens["q"].isna().all() and not scores.has_draft
    # under top-k 20 of 64, random tokens are often impossible: p exactly 0
    assert (scores.tokens["p"] == 0).any()
    # a prompt's first position has the same prefix for every record: mass = n_reached * p(x)
    first = scores.tokens[scores.tokens["position"] == 0]
    mass = scores.position_mass[scores.position_mass["position"] == 0]
    for _, m in mass.iterrows():
        p_x = first[(first["prompt_id"] == m["prompt_id"]) & (first["token"] == m["token"])]["p"].iloc[0]
        assert m["target_mass"] == pytest.approx(m["n_reached"] * p_x, rel=1e-6, abs=1e-12)
    assert scores.select(prompt_ids=["p1"]).tokens["prompt_id"].eq("p1").all()


def test_timing_only_records_are_ignored_and_bad_input_is_named():
    target = tiny_llama(0)
    records = make_records(3)
    records[1]["timing_only"] = True
    scores = score_records(target, records)
    assert records[1]["key"] not in set(scores.tokens["key"])

    mixed = make_records(2)
    mixed[1]["sampling"] = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    with pytest.raises(InputError, match="different sampling settings"):
        score_records(target, mixed)
    score_records(target, mixed, SPEC)  # an explicit spec settles it

    empty_prompt = make_records(1)
    empty_prompt[0]["prompt_token_ids"] = []
    with pytest.raises(InputError, match="empty prompt_token_ids"):
        score_records(target, empty_prompt)

    out_of_vocab = make_records(1)
    out_of_vocab[0]["output_token_ids"] = [1, 200]
    with pytest.raises(InputError, match="outside the model's vocabulary"):
        score_records(target, out_of_vocab)

    with pytest.raises(InputError, match="vocabulary sizes"):
        score_records(target, make_records(1), draft_model=tiny_llama(1, vocab=80))


def test_logit_gaps_read_the_last_position():
    target = tiny_llama(2, logit_scale=20.0)
    prefixes = [[1, 2, 3], [4, 5], [7]]
    gaps = logit_gaps(target, prefixes, [0, 1, 2], [3, 4, 5], batch_size=2)
    for i, prefix in enumerate(prefixes):
        with torch.no_grad():
            last = target(torch.tensor([prefix])).logits[0, -1].double()
        top = torch.topk(last, 2).values
        assert gaps.loc[i, "gap"] == pytest.approx(abs(float(last[[0, 1, 2][i]] - last[[3, 4, 5][i]])), abs=1e-5)
        assert gaps.loc[i, "top2_gap"] == pytest.approx(float(top[0] - top[1]), abs=1e-5)
        assert gaps.loc[i, "scale"] == pytest.approx(float(last.abs().max()), abs=1e-5)
