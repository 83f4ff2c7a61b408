"""Temperature, top-k and top-p: the ONE warping implementation every engine uses.

Target and draft distributions go through the same function with the same `SamplingSpec`, so a
"warper applied to one side only" bug cannot come from this package itself. Order and tie rules
follow transformers' logits processors (temperature, then top-k keeping ties at the boundary,
then top-p keeping the smallest prefix whose mass reaches top_p), so our engines and
transformers' assisted generation warp identically.
"""

from __future__ import annotations

import torch

from specaudit.decoding._spec import SamplingSpec


def warp(logits: torch.Tensor, spec: SamplingSpec) -> torch.Tensor:
    """Map logits [..., V] to the warped probability distribution [..., V] (float32, or float64
    when given float64).

    Greedy gives a one-hot distribution on the argmax (first index on exact ties, as torch.argmax).
    """
    logits = logits if logits.dtype == torch.float64 else logits.float()
    if spec.greedy:
        probs = torch.zeros_like(logits)
        return probs.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    scores = logits / spec.temperature
    if spec.top_k and spec.top_k < scores.shape[-1]:
        kth = torch.topk(scores, spec.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if spec.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= spec.top_p
        drop_sorted[..., 0] = False  # always keep the most likely token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(dim=-1)
