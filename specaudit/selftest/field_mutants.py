"""Field mutants: bugs of real engines in their own warping, reproduced literally inside our
speculative engine. Unlike `mutants.py`, whose fixed constants stand in for a sampling setting,
these recompute the wrong distribution from the raw logits of the run (`wants_logits`, see
specaudit.decoding.verify.VerifyLogits), so each changes the output exactly at the settings where
the real bug did, and is distributed as the correct sampler elsewhere
(specaudit.decoding.settings.BUG_CLASSES says where). They need the engine, so the unit audit
(`audit_sampler`, which has no logits) does not run them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specaudit.decoding._spec import SamplingSpec
from specaudit.decoding.verify import VerifyFn, VerifyLogits, reference_verify
from specaudit.decoding.warping import warp

if TYPE_CHECKING:
    import torch

__all__ = ["FIELD_MUTANTS"]


def draft_q_before_truncation(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator, *, logits: VerifyLogits
) -> torch.Tensor:
    """Drafts sampled from top-k/top-p-processed logits, q taken from the logits before top-k and
    top-p (transformers #47932 / PR #47961: DFlash and MTP candidate generators returned the
    unprocessed logits). On the kept tokens that q is Z·q_warped, Z the kept mass, so p/q is
    inflated by 1/Z and the residual is wrong; without truncation Z = 1 and nothing changes."""
    if logits.draft is None:  # a lookup draft has no logits: nothing to get wrong
        return reference_verify(draft_tokens, draft_probs, target_probs, generator)
    untruncated = SamplingSpec(temperature=logits.spec.temperature)
    raw_q = warp(logits.draft, untruncated).to(draft_probs.dtype)
    return reference_verify(draft_tokens, raw_q, target_probs, generator)


def target_default_sampling(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator, *, logits: VerifyLogits
) -> torch.Tensor:
    """Target probabilities computed with the default parameters (T = 1, no top-k, top-p = 1)
    while the draft's follow the request's (vLLM #9834 / PR #10198). The engine then samples the
    T = 1 target correctly, which is the wrong target whenever the request warps."""
    default_p = warp(logits.target, SamplingSpec()).to(target_probs.dtype)
    return reference_verify(draft_tokens, draft_probs, default_p, generator)


draft_q_before_truncation.wants_logits = True
target_default_sampling.wants_logits = True

FIELD_MUTANTS: dict[str, VerifyFn] = {
    "draft_q_before_truncation": draft_q_before_truncation,
    "target_default_sampling": target_default_sampling,
}
"""Engine-level mutants by name (end-to-end self-test only)."""
