"""Temperature, top-k and top-p: the ONE warping implementation every engine uses.

Target and draft distributions go through the same function with the same `SamplingSpec`, so a
"warper applied to one side only" bug cannot come from this package itself. Order and tie rules
follow transformers' logits processors (temperature, then top-k keeping ties at the boundary,
then top-p keeping the smallest prefix whose mass reaches top_p), so our engines and
transformers' assisted generation warp identically.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from specaudit.errors import InputError


@dataclass(frozen=True)
class SamplingSpec:
    """How tokens are chosen. `temperature == 0` means greedy (argmax)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0) or self.temperature != self.temperature:
            raise InputError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        if self.top_k < 0:
            raise InputError(f"top-k must be >= 0 (0 turns it off), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise InputError(f"top-p must be in (0, 1] (1 turns it off), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        return asdict(self)


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
