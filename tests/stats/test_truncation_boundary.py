"""Tokens just outside a truncation under the scorer's numbers: an engine whose logits differ from
the scorer's by rounding (llama.cpp's batch shapes, another process) may keep a token the scorer
puts just past a min-p / top-k / top-p boundary. Within the scoring model's tolerance such a token
is `near_boundary`, counted apart and not proof of a bug; one far outside stays an impossible token."""

import math

import torch

from specaudit.decoding import SamplingSpec
from specaudit.stats.equivalence import impossible_tokens
from specaudit.stats.scoring import BOUNDARY_COLUMN, score_records


def _record(prompt: list[int], token: int, spec: SamplingSpec, name: str) -> dict:
    return {
        "key": f"{name}|vanilla|0",
        "prompt_id": name,
        "engine": "vanilla",
        "sample": 0,
        "prompt_token_ids": prompt,
        "output_token_ids": [token],
        "sampling": spec.to_dict(),
        "attributes": {},
    }


def test_a_token_just_past_min_p_is_near_the_boundary_and_a_far_one_is_impossible(tiny_pair, tiny_texts):
    prompt = tiny_pair.tokenizer(next(iter(tiny_texts.values())))["input_ids"]
    with torch.no_grad():
        logits = tiny_pair.target(input_ids=torch.tensor([prompt])).logits[0, -1].double()
    ratios = torch.exp(logits - logits.max())  # p / p_max
    order = torch.argsort(ratios, descending=True)
    near, far = int(order[4]), int(order[-1])
    # min-p 1% above the fifth token's ratio: it falls out by log(1.01) ≈ 0.01 logits, the last token by far more
    spec = SamplingSpec(min_p=float(ratios[near]) * 1.01)
    records = [_record(prompt, near, spec, "near"), _record(prompt, far, spec, "far")]
    tolerance = 2 * math.log(1.01) / float(logits.abs().max())

    scores = score_records(tiny_pair.target, records, null_draws=0, boundary_tolerance=tolerance)
    assert (scores.tokens["p"] == 0).all()
    assert scores.tokens.set_index("prompt_id")[BOUNDARY_COLUMN].to_dict() == {"near": True, "far": False}
    result = impossible_tokens(scores)
    assert result.offenders == (("far|vanilla|0", 0, far),)
    assert result.near_boundary == (("near|vanilla|0", 0, near),)
    assert result.verdict == "FAIL" and result.to_dict()["near_boundary"][0]["token"] == near

    exact = impossible_tokens(score_records(tiny_pair.target, records, null_draws=0))  # a torch target: no tolerance
    assert exact.statistic == 2 and exact.near_boundary == ()
