"""Mutants of tree and staged verification: the exact rules with one real failure mode each.

- `siblings_without_residual`: i.i.d. siblings each tried against p itself, the correction from
  norm(max(0, p − q)) (the residual update between siblings left out: SpecInfer's multi-step
  speculative sampling without its r_{i+1} = norm(max(0, r_i − q))). Over-accepts.
- `top_k_as_sampled`: the draft's top-k children verified by the i.i.d. rule with ratios
  min(1, r/q), as if they had been sampled from q (they were not: the rule's exactness rests on it).
- `typical_acceptance`: Medusa's typical acceptance (Cai et al. 2024): a child is kept when the
  target gives it more than min(ε, δ·exp(−H(p))) (ε = 0.09, δ = 0.3, Medusa's defaults), else the
  token is drawn from p. Not distribution-preserving, and not meant to be: lossy by design.
- `staged_small_q`: the staged run's final check against the small draft's q₁, although the
  medium's corrections made its chain follow q₂.
"""

from __future__ import annotations

import math

import torch

from specaudit.decoding.staged import REFERENCE_STAGED, StagedRule
from specaudit.decoding.tree import REFERENCE_RULES, NodeOutcome, TreeRule, multi_step_verify
from specaudit.decoding.verify import residual_distribution, sample_from

__all__ = ["STAGED_MUTANTS", "TREE_MUTANTS"]

_TYPICAL_EPSILON = 0.09  # Medusa's posterior_threshold
_TYPICAL_DELTA = 0.3  # Medusa's posterior_alpha (applied to exp(-entropy))


def _unrecorded(child: int | None, token: int, p: torch.Tensor) -> NodeOutcome:
    """A mutant's outcome: the audit reads only the token; the probabilities are not defined."""
    return NodeOutcome(child, token, math.nan, math.nan, p.double())


def siblings_without_residual(tokens: list[int], q: torch.Tensor, p: torch.Tensor, generator: torch.Generator) -> NodeOutcome:
    p64, q64 = p.double() / p.double().sum(), q.double()
    for i, x in enumerate(tokens):
        if float(torch.rand((), generator=generator, dtype=torch.float64)) * float(q64[x]) < float(p64[x]):
            return _unrecorded(i, x, p64)
    return _unrecorded(None, sample_from(residual_distribution(p64, q64), generator), p64)


def typical_acceptance(tokens: list[int], q: torch.Tensor, p: torch.Tensor, generator: torch.Generator) -> NodeOutcome:
    p64 = p.double() / p.double().sum()
    entropy = float(-(p64[p64 > 0] * p64[p64 > 0].log()).sum())
    threshold = min(_TYPICAL_EPSILON, _TYPICAL_DELTA * math.exp(-entropy))
    for i, x in enumerate(tokens):
        if float(p64[x]) > threshold:
            return _unrecorded(i, x, p64)
    return _unrecorded(None, sample_from(p64, generator), p64)


def _small_draft_q(small: torch.Tensor, medium: torch.Tensor) -> torch.Tensor:
    return small


TREE_MUTANTS: dict[str, TreeRule] = {
    "correct-sampled": REFERENCE_RULES["sampled"],
    "correct-top-k": REFERENCE_RULES["top-k"],
    "siblings_without_residual": TreeRule("siblings verified without the residual update", "sampled", siblings_without_residual),
    "top_k_as_sampled": TreeRule("top-k children verified as if sampled", "top-k", multi_step_verify),
    "typical_acceptance": TreeRule("Medusa's typical acceptance", "top-k", typical_acceptance, lossy_by_design=True),
}
"""Tree rules by name: the two exact ones, then one failure mode each."""

STAGED_MUTANTS: dict[str, StagedRule] = {
    "correct-staged": REFERENCE_STAGED,
    "staged_small_q": StagedRule("final check against the small draft's q", _small_draft_q),
}
"""Staged rules by name: the exact one, then the final check against the wrong proposal law."""
