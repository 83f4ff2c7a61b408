"""Whether a model's distributions depend on how it is called: decoding calls a draft one cached
token at a time, scoring teacher-forces it over a whole path in one call. The screen refuses a draft
whose two differ (engines.screen), and analysis then scores with the q the engine recorded
(analysis.equivalence)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.models import forward_cached

if TYPE_CHECKING:
    from specaudit.models import ModelPair

# The draft's q from a teacher-forced call must be the q it gives step by step at decode time. Its
# TV between the two call shapes is compared with the target's own on the same path: that is the
# float noise of the model's dtype (~5e-6 in float32, ~4e-2 in bfloat16, measured on the default
# pair), which every engine has too (verification scores k + 1 tokens per call, vanilla one). A
# draft is call-invariant when its TV stays below CALL_INVARIANCE_TV or FLOAT_NOISE_FACTOR x the
# target's; torch's dynamic int8 reaches 0.84, five orders above float32's floor.
CALL_INVARIANCE_TV = 1e-3
FLOAT_NOISE_FACTOR = 3.0


def call_shape_tv(model: torch.nn.Module, ids: torch.Tensor, positions: int, vocab_size: int) -> float:
    """Max TV over the last `positions` positions of `ids` ([1, L]) between one teacher-forced call
    and a cached prefix followed by one call per token (how decoding calls a draft)."""
    from transformers import DynamicCache

    split = ids.shape[1] - positions
    with torch.inference_mode():
        whole = model(input_ids=ids).logits[0, split:, :vocab_size]
        cache = DynamicCache(config=model.config)
        forward_cached(model, ids[:, :split], cache)
        stepwise = torch.cat([forward_cached(model, ids[:, i : i + 1], cache)[0] for i in range(split, ids.shape[1])])
    spec = SamplingSpec(1.0)
    return float((0.5 * (warp(whole, spec) - warp(stepwise[:, :vocab_size], spec)).abs().sum(-1)).max())


def draft_batch_invariance(pair: ModelPair, records: list[dict], positions: int = 6) -> dict:
    """Whether teacher-forcing the draft reproduces the q it sampled from during decoding.

    Scoring recomputes q in one batched pass; decoding computed it one cached step at a time.
    For most drafts the two agree to the float noise of their dtype, which the target's own TV
    between the same two call shapes measures. Drafts with dynamic activation quantisation
    (torch's int8 dynamic linear: one scale per call over all tokens in it) do not: their q
    depends on how they were called, so q-based tests must use the q the engine recorded.
    """
    record = next((r for r in records if r["engine"] != CONTROL_ENGINE and len(r["output_token_ids"]) > positions), None)
    if record is None or not pair.draft_is_model:
        return {"checked": False}
    ids = torch.tensor([record["prompt_token_ids"] + record["output_token_ids"]], device=pair.device)
    max_tv = call_shape_tv(pair.draft, ids, positions, pair.vocab_size)
    target_tv = call_shape_tv(pair.target, ids, positions, pair.vocab_size)
    tolerance = max(CALL_INVARIANCE_TV, FLOAT_NOISE_FACTOR * target_tv)
    return {
        "checked": True,
        "batch_invariant": max_tv < tolerance,
        "max_tv": max_tv,
        "target_max_tv": target_tv,  # the dtype's float noise between these call shapes
        "tolerance": tolerance,
        "positions": positions,
        "record": record["key"],
    }


__all__ = ["CALL_INVARIANCE_TV", "FLOAT_NOISE_FACTOR", "call_shape_tv", "draft_batch_invariance"]
