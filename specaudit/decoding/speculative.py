"""The reference speculative sampler (Leviathan et al. 2023; Chen et al. 2023), instrumented.

Both models keep a KV cache; after each verification the caches are cropped back to the accepted
prefix. The rejection step is a pluggable verify function (verify.py), so a user's own sampler
or a self-test mutant runs inside exactly this engine.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache

from specaudit.decoding._generation import Generation, end_step, record_step
from specaudit.decoding.verify import (
    VerifyFn,
    VerifyLogits,
    acceptance_probabilities,
    contract_problem,
    reference_verify,
    sample_from,
    step_pit,
    token_acceptance_probabilities,
)
from specaudit.decoding.warping import Prefix, SamplingSpec, warp
from specaudit.models import NgramDraft, Stopwatch, forward_cached

# The draft's processed distribution from its raw logits [V] and this step's drafts so far.
DraftProcessing = Callable[[torch.Tensor, list[int]], torch.Tensor]


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached positions beyond `length` (a negative count works across transformers versions)."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


class _DraftModel:
    """Proposes tokens by sampling a draft model's warped distribution, one cached step at a time."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.cached = 0  # tokens of the context already in the cache
        self.logits: list[torch.Tensor] = []  # the last proposal's raw logits, for a verifier that asks (VerifyLogits)

    def propose(
        self, context: list[int], k: int, process: DraftProcessing, generator: torch.Generator, vocab_size: int
    ) -> tuple[list[int], list[torch.Tensor]]:
        feed = context[self.cached :]
        tokens, probs, self.logits = [], [], []
        for _ in range(k):
            ids = torch.tensor([feed], device=generator.device)
            logits = forward_cached(self.model, ids, self.cache)
            self.cached += len(feed)
            self.logits.append(logits[0, -1, :vocab_size])
            q = process(self.logits[-1], tokens)
            token = sample_from(q, generator)
            tokens.append(token)
            probs.append(q)
            feed = [token]
        return tokens, probs

    def rollback(self, valid: int) -> None:
        if self.cached > valid:
            crop_cache(self.cache, valid)
            self.cached = valid


class _DraftLookup:
    """Prompt lookup (n-gram) drafting: deterministic proposals, so q is one-hot."""

    def __init__(self, lookup: NgramDraft) -> None:
        self.lookup = lookup
        self.logits: list[torch.Tensor] = []  # a lookup has none

    def propose(
        self, context: list[int], k: int, process: DraftProcessing, generator: torch.Generator, vocab_size: int
    ) -> tuple[list[int], list[torch.Tensor]]:
        tokens = self.lookup.propose(context, k)
        probs = [torch.nn.functional.one_hot(torch.tensor(t, device=generator.device), vocab_size).float() for t in tokens]
        return tokens, probs

    def rollback(self, valid: int) -> None:
        pass


class SpeculativeDecoding:
    """One speculative decoding of one prompt, a verification step at a time (`step`), so that a
    server can interleave the steps of concurrent requests (specaudit.testing.batching);
    `speculative_generate` runs it to the end. `result` is the Generation so far."""

    @torch.inference_mode()
    def __init__(
        self,
        target: torch.nn.Module,
        draft: torch.nn.Module | NgramDraft,
        prompt_ids: list[int],
        *,
        spec: SamplingSpec,
        k: int,
        max_new_tokens: int,
        generator: torch.Generator,
        eos_ids: set[int],
        vocab_size: int,
        verify: VerifyFn = reference_verify,
    ) -> None:
        self.target, self.spec, self.k, self.generator = target, spec, k, generator
        self.max_new_tokens, self.eos_ids, self.vocab_size, self.verify = max_new_tokens, eos_ids, vocab_size, verify
        self.clock = Stopwatch(generator.device)
        self.drafter = _DraftLookup(draft) if isinstance(draft, NgramDraft) else _DraftModel(draft)
        self.wants_logits = bool(getattr(verify, "wants_logits", False))
        self.target_cache = DynamicCache(config=target.config)
        self.target_cached = 0
        self.context = list(prompt_ids)
        self.prompt_len = len(prompt_ids)
        self.tokens: list[int] = []
        self.result = Generation(tokens=self.tokens, finish_reason="", wall_s=0.0, ttft_s=0.0, steps=0)
        self.start = self.clock.now()
        self.untimed = 0.0
        self.done = False

    def prefix(self, drafts: list[int]) -> Prefix:
        """The tokens before the position after this step's `drafts`: prompt, accepted output, drafts."""
        return Prefix(self.context[: self.prompt_len], self.tokens + drafts)

    def draft_distribution(self, logits: torch.Tensor, drafts: list[int]) -> torch.Tensor:
        """The draft's processed distribution after this step's `drafts` so far: its own prefix,
        drafts included (penalties)."""
        return warp(logits, self.spec, self.prefix(drafts))

    def target_distributions(self, logits: torch.Tensor, drafted: list[int]) -> torch.Tensor:
        """The target's processed distributions of a verification's rows [len(drafted) + 1, V]:
        each drafted token is verified at its own prefix, so row i's penalty state counts the
        accepted output and drafts 0..i-1. (A served mutant overrides these two to get it wrong.)"""
        return warp(logits, self.spec, self.prefix(drafted))

    @torch.inference_mode()
    def step(self, k: int | None = None) -> bool:
        """One draft-and-verify step with up to `k` drafted tokens (default the decoding's k; a
        server may draft fewer); returns whether the decoding has ended."""
        clock, result, tokens, context, generator = self.clock, self.result, self.tokens, self.context, self.generator
        spec, vocab_size, device, verify = self.spec, self.vocab_size, generator.device, self.verify
        step_start = clock.now()
        # Never draft past the length budget: the last slot is the verifier's own token.
        k_step = min(self.k if k is None else k, self.max_new_tokens - len(tokens) - 1)
        drafter = self.drafter
        drafted, draft_probs = drafter.propose(context, k_step, self.draft_distribution, generator, vocab_size) if k_step > 0 else ([], [])
        drafted_at = clock.now()

        feed = torch.tensor([context[self.target_cached :] + drafted], device=device)
        logits = forward_cached(self.target, feed, self.target_cache, logits_to_keep=len(drafted) + 1)
        target_probs = self.target_distributions(logits[0, :, :vocab_size], drafted)
        q = torch.stack(draft_probs) if draft_probs else target_probs.new_zeros((0, vocab_size))
        drafted_ids = torch.tensor(drafted, dtype=torch.long, device=device)
        try:
            if self.wants_logits:  # a verifier modelling a bug in the engine's own warping (specaudit.selftest.field_mutants)
                raw = VerifyLogits(spec, torch.stack(drafter.logits) if drafter.logits else None, logits[0, :, :vocab_size])
                emitted_ids = verify(drafted_ids, q, target_probs, generator, logits=raw)
            else:
                emitted_ids = verify(drafted_ids, q, target_probs, generator)
            problem, unusable = contract_problem(emitted_ids, drafted_ids, vocab_size)
        except Exception as err:  # noqa: BLE001 (a user's sampler failing is a finding of the audit, not a crash)
            problem, unusable = f"raised {type(err).__name__}: {' '.join(str(err).split())[:200]}", True
        if problem:
            result.verify_violations.append({"call": result.steps + 1, "position": len(tokens), "problem": problem})
            if unusable:  # nothing trustworthy to emit: the record ends here, with the violation on it
                return self._end("verify_error")
        emitted_ids = emitted_ids.to(device=device, dtype=torch.long)
        emitted = emitted_ids.tolist()
        n_accepted = len(emitted) - 1
        # Drafted tokens the verifier really kept (all n_accepted when it keeps the contract).
        kept_drafts = next((i for i, (a, b) in enumerate(zip(emitted[:n_accepted], drafted)) if a != b), n_accepted)

        # Keep the accepted prefix in both caches; the verifier's token is fed next step.
        self.target_cached = len(context) + kept_drafts
        crop_cache(self.target_cache, self.target_cached)
        drafter.rollback(len(context) + kept_drafts)
        verified_at = clock.now()

        record_step(result, len(drafted), n_accepted, step_start, drafted_at, verified_at, self.start)
        # The auditor's bookkeeping is not part of decoding: kept out of the timings.
        result.beta.append(acceptance_probabilities(q, target_probs).tolist() if drafted else [])
        result.accept_prob.append(token_acceptance_probabilities(drafted_ids, q, target_probs).tolist() if drafted else [])
        result.step_pit.extend(step_pit(q, target_probs, emitted_ids))
        self.untimed += clock.now() - verified_at
        reason = end_step(result, context, emitted, self.eos_ids, self.max_new_tokens)
        return self._end(reason) if reason is not None else False

    def _end(self, reason: str) -> bool:
        self.result.finish_reason = reason
        self.result.wall_s = self.clock.now() - self.start - self.untimed
        self.done = True
        return True


def speculative_generate(
    target: torch.nn.Module,
    draft: torch.nn.Module | NgramDraft,
    prompt_ids: list[int],
    *,
    spec: SamplingSpec,
    k: int,
    max_new_tokens: int,
    generator: torch.Generator,
    eos_ids: set[int],
    vocab_size: int,
    verify: VerifyFn = reference_verify,
) -> Generation:
    decoding = SpeculativeDecoding(
        target,
        draft,
        prompt_ids,
        spec=spec,
        k=k,
        max_new_tokens=max_new_tokens,
        generator=generator,
        eos_ids=eos_ids,
        vocab_size=vocab_size,
        verify=verify,
    )
    while not decoding.step():
        pass
    return decoding.result
