"""Staged (multi-level) speculative sampling: a small draft feeds a medium model, whose verified
tokens are the target's proposals.

One step: the medium model's chain of k₂ tokens is produced by ordinary speculative sampling of
the small draft (k₁ tokens a round) against the medium's distribution q₂, round after round, so
each token of that chain follows q₂ given the tokens before it (the exactness of the inner
level). The target then verifies the chain by one rejection step against q₂: the distribution
the surviving proposals actually follow, not the small draft's q₁, which they no longer follow
once the medium has corrected them. With q₂ as the proposal law, the outer step is the chain's
speculative sampling and the output follows the target exactly.

`staged_step` is the same algorithm on fixed per-position distributions (the unit audit's form,
`specaudit.stats.tree_audit.audit_staged`); `staged_generate` decodes a prompt with real models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from specaudit.decoding._generation import Generation, end_step, record_step
from specaudit.decoding.speculative import crop_cache
from specaudit.decoding.verify import (
    acceptance_probabilities,
    reference_verify,
    sample_from,
    step_pit,
    token_acceptance_probabilities,
)
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.models import NgramDraft, Stopwatch, forward_cached

# Which proposal law the target's check uses, given (small draft's q₁ rows, medium's q₂ rows).
FinalProposal = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def medium_proposal(small: torch.Tensor, medium: torch.Tensor) -> torch.Tensor:
    """The exact choice: the medium's q₂, the law its verified chain follows."""
    return medium


@dataclass(frozen=True)
class StagedRule:
    """How a staged step checks the medium's chain against the target (the self-test swaps it)."""

    name: str
    final_proposal: FinalProposal = medium_proposal


REFERENCE_STAGED = StagedRule("final check against the medium's q")


def staged_step(
    small_probs: torch.Tensor,
    medium_probs: torch.Tensor,
    target_probs: torch.Tensor,
    k_small: int,
    generator: torch.Generator,
    rule: StagedRule = REFERENCE_STAGED,
) -> torch.Tensor:
    """One staged step on fixed distributions: position i's small-draft law is small_probs[i],
    the medium's medium_probs[i] (both [K, V]), the target's target_probs[i] ([K + 1, V]), none
    depending on earlier tokens. The medium's chain of K tokens is built by rounds of k_small
    drafted tokens verified against q₂, then checked against the target; returns the emitted ids."""
    k = medium_probs.shape[0]
    chain: list[int] = []
    while len(chain) < k:
        start = len(chain)
        k_round = min(k_small, k - start - 1)
        if k_round > 0:
            q1 = small_probs[start : start + k_round]
            drafted = torch.multinomial(q1.float(), 1, generator=generator)[:, 0]
            chain += reference_verify(drafted, q1, medium_probs[start : start + k_round + 1], generator).tolist()
        else:
            chain.append(sample_from(medium_probs[start], generator))
    proposals = torch.tensor(chain[:k], dtype=torch.long, device=target_probs.device)
    return reference_verify(proposals, rule.final_proposal(small_probs, medium_probs), target_probs, generator)


class _Level:
    """A model with a KV cache of the context that scores a block of proposed tokens."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        self.cache = DynamicCache(config=model.config)
        self.cached = 0

    def logits(self, context: list[int], proposed: list[int], vocab_size: int) -> torch.Tensor:
        """[len(proposed) + 1, V]: the logits after context and after each proposed token."""
        feed = torch.tensor([context[self.cached :] + proposed], device=self.device)
        logits = forward_cached(self.model, feed, self.cache, logits_to_keep=len(proposed) + 1)
        self.cached = len(context) + len(proposed)
        return logits[0, :, :vocab_size]

    def rollback(self, valid: int) -> None:
        if self.cached > valid:
            crop_cache(self.cache, valid)
            self.cached = valid


def _small_proposals(
    small: _Level | NgramDraft, context: list[int], k: int, spec: SamplingSpec, generator: torch.Generator, vocab_size: int
) -> tuple[list[int], list[torch.Tensor]]:
    """k tokens of the small draft, each with the law it was drawn from (one-hot for n-gram lookup)."""
    if isinstance(small, NgramDraft):
        tokens = small.propose(context, k)
        one_hot = torch.nn.functional.one_hot
        return tokens, [one_hot(torch.tensor(t, device=generator.device), vocab_size).float() for t in tokens]
    tokens, laws = [], []
    for _ in range(k):
        q = warp(small.logits(context + tokens, [], vocab_size)[-1], spec)
        tokens.append(sample_from(q, generator))
        laws.append(q)
    return tokens, laws


def staged_generate(
    target: torch.nn.Module,
    small: torch.nn.Module | NgramDraft,
    medium: torch.nn.Module,
    prompt_ids: list[int],
    *,
    spec: SamplingSpec,
    k_small: int,
    k_medium: int,
    max_new_tokens: int,
    generator: torch.Generator,
    eos_ids: set[int],
    vocab_size: int,
) -> Generation:
    """Staged speculative decoding of one prompt (module docstring). The record's step counters
    are the target's level (medium chain proposed / accepted); `extra["levels"]` holds both levels'
    totals: small → medium and medium → target, proposed and accepted."""
    device = generator.device
    clock = Stopwatch(device)
    start = clock.now()
    target_level, medium_level = _Level(target, device), _Level(medium, device)
    small_level = small if isinstance(small, NgramDraft) else _Level(small, device)
    context, tokens = list(prompt_ids), []
    result = Generation(tokens=tokens, finish_reason="", wall_s=0.0, ttft_s=0.0, steps=0)
    inner_proposed = inner_accepted = 0
    untimed = 0.0
    with torch.inference_mode():
        while True:
            step_start = clock.now()
            k = max(0, min(k_medium, max_new_tokens - len(tokens) - 1))
            chain: list[int] = []
            chain_q: list[torch.Tensor] = []
            while len(chain) < k:
                k_round = min(k_small, k - len(chain) - 1)
                drafted, q1 = _small_proposals(small_level, context + chain, k_round, spec, generator, vocab_size) if k_round else ([], [])
                q2 = warp(medium_level.logits(context + chain, drafted, vocab_size), spec)
                if drafted:
                    emitted = reference_verify(torch.tensor(drafted, device=device), torch.stack(q1), q2, generator).tolist()
                else:
                    emitted = [sample_from(q2[0], generator)]
                inner_proposed += len(drafted)
                inner_accepted += len(emitted) - 1
                chain += emitted
                chain_q += list(q2[: len(emitted)])
                medium_level.rollback(len(context) + len(chain) - 1)  # the last token is fed next round
                if isinstance(small_level, _Level):
                    small_level.rollback(len(context) + len(chain) - 1)
            drafted_at = clock.now()
            p = warp(target_level.logits(context, chain, vocab_size), spec)
            q = torch.stack(chain_q) if chain_q else p.new_zeros((0, vocab_size))
            chain_ids = torch.tensor(chain, dtype=torch.long, device=device)
            emitted = reference_verify(chain_ids, q, p, generator).tolist()
            accepted = len(emitted) - 1
            target_level.rollback(len(context) + accepted)
            medium_level.rollback(len(context) + accepted)
            if isinstance(small_level, _Level):
                small_level.rollback(len(context) + accepted)
            verified_at = clock.now()
            record_step(result, len(chain), accepted, step_start, drafted_at, verified_at, start)
            result.beta.append(acceptance_probabilities(q, p).tolist() if chain else [])
            result.accept_prob.append(token_acceptance_probabilities(chain_ids, q, p).tolist() if chain else [])
            result.step_pit.extend(step_pit(q, p, torch.tensor(emitted)))
            untimed += clock.now() - verified_at
            reason = end_step(result, context, emitted, eos_ids, max_new_tokens)
            if reason is not None:
                break
    result.finish_reason = reason
    result.wall_s = clock.now() - start - untimed
    result.extra = {
        "levels": [
            {"level": "small -> medium", "proposed": inner_proposed, "accepted": inner_accepted, "k": k_small},
            {"level": "medium -> target", "proposed": result.proposed, "accepted": result.accepted, "k": k_medium},
        ]
    }
    return result
