"""Mutant verify functions: the reference rejection step with one real bug each.

Every mutant has the signature of `specaudit.decoding.verify.reference_verify` and differs from
it in exactly one place, reproducing a bug class found in a real implementation (the rows of
shared/reference/ANCHORS.md, "Real bug classes", or of the bug-class table in docs/selftest.md). Where the
fixed signature cannot carry the bug literally (the draft's own sampling, the engine's warping),
the docstring says how the mutant models it. The auditor is judged on them: the correct sampler
must be rejected at the nominal rate, every mutant at >= 99% at the default budget.

Not every reported bug class changes the output distribution: treating q as one-hot for a
sampled draft (vLLM #40149) accepts x with probability p(x) and corrects from p without x,
which still emits exactly p (q(y)p(y) + p(y)(1 - q(y)) = p(y)); it only lowers acceptance, a
speed/fairness bug for the acceptance statistics, so it has no mutant here.
"""

from __future__ import annotations

import torch

from specaudit.decoding.verify import VerifyFn, reference_verify, residual_distribution, sample_from

__all__ = ["MUTANTS"]


def _drafted_values(probs: torch.Tensor, draft_tokens: torch.Tensor) -> torch.Tensor:
    """probs[i, draft_tokens[i]] for each drafted position i, in float64."""
    positions = torch.arange(draft_tokens.shape[0], device=draft_tokens.device)
    return probs[positions, draft_tokens].double()


def _uniforms(k: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.rand(k, generator=generator, device=device, dtype=torch.float64)


def _leading_accepts(accepted: torch.Tensor) -> int:
    return int(accepted.long().cumprod(dim=0).sum())


def _emit(draft_tokens: torch.Tensor, n_accepted: int, last: int) -> torch.Tensor:
    emitted = torch.empty(n_accepted + 1, dtype=torch.long, device=draft_tokens.device)
    emitted[:n_accepted] = draft_tokens[:n_accepted]
    emitted[n_accepted] = last
    return emitted


def _correct_accepts(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator) -> int:
    """Number of leading drafts accepted by the correct rule u < p/q, one uniform each."""
    p_draft = _drafted_values(target_probs, draft_tokens)
    q_draft = _drafted_values(draft_probs, draft_tokens)
    accepted = _uniforms(draft_tokens.shape[0], generator, draft_tokens.device) * q_draft < p_draft
    return _leading_accepts(accepted)


def _finish(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator, accepted: torch.Tensor
) -> torch.Tensor:
    """The correct tail of the step: correction from the residual at the first rejection, or a
    bonus token from p_{k+1}, given per-position accept decisions."""
    k = draft_tokens.shape[0]
    n_accepted = _leading_accepts(accepted)
    if n_accepted == k:
        last = sample_from(target_probs[k], generator)
    else:
        last = sample_from(residual_distribution(target_probs[n_accepted], draft_probs[n_accepted]), generator)
    return _emit(draft_tokens, n_accepted, last)


def always_accept(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Draft tokens always accepted (transformers PR #28508: faulty acceptance test).

    Emits every drafted token, then a bonus token from p_{k+1}; the output follows q, not p.
    """
    k = draft_tokens.shape[0]
    return _emit(draft_tokens, k, sample_from(target_probs[k], generator))


def softmax_residual(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Correction sampled from softmax(p - q) instead of normalise(max(0, p - q))
    (transformers PR #28508). softmax gives mass to every token, masked ones included."""
    k = draft_tokens.shape[0]
    n_accepted = _correct_accepts(draft_tokens, draft_probs, target_probs, generator)
    if n_accepted == k:
        return _emit(draft_tokens, k, sample_from(target_probs[k], generator))
    residual = torch.softmax(target_probs[n_accepted].double() - draft_probs[n_accepted].double(), dim=-1)
    return _emit(draft_tokens, n_accepted, sample_from(residual, generator))


def resample_from_p(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """On rejection, resample from p instead of the residual normalise(max(0, p - q)): the
    "residual not formed / not normalised" class (transformers PR #28508). Tokens the draft over-proposes end up over-represented."""
    n_accepted = _correct_accepts(draft_tokens, draft_probs, target_probs, generator)
    return _emit(draft_tokens, n_accepted, sample_from(target_probs[n_accepted], generator))


def greedy_draft(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Draft runs greedily while its soft probabilities are used as q (transformers #32867 and
    PR #28166: assistant greedy while the target samples).

    The harness samples the drafts from q, so the bug is modelled inside the verifier: the
    mutant replaces the proposed tokens by argmax(q_i), exactly what a greedy drafter reporting
    its soft q would have proposed, and then verifies them correctly against that q.
    """
    greedy_tokens = draft_probs.argmax(dim=-1)
    return reference_verify(greedy_tokens, draft_probs, target_probs, generator)


# The sampling temperature the run is assumed to have asked for, to undo it (see below).
_RUN_TEMPERATURE = 0.7


def target_not_warped(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Verification with the temperature-1 target instead of the warped one (vLLM #9834 /
    PR #10198: target probabilities ignored the request's temperature/top-p).

    The verifier receives the warped p; the mutant reconstructs the unwarped target of a run
    at temperature 0.7: p ∝ exp(l/0.7) implies exp(l) ∝ p^0.7, renormalised. Masked tokens stay
    masked (the mask cannot be undone from p), so this models the temperature half of the bug.
    The mutant is then a correct speculative sampler for the wrong target.
    """
    unwarped = target_probs.double().pow(_RUN_TEMPERATURE)
    unwarped = (unwarped / unwarped.sum(dim=-1, keepdim=True)).to(target_probs.dtype)
    return reference_verify(draft_tokens, draft_probs, unwarped, generator)


# Mass the draft's top-k/top-p kept of its raw distribution in transformers #47932's setting.
_KEPT_MASS = 0.8


def raw_draft_q(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Draft sampled from its warped (top-k) distribution but reports raw probabilities as q
    (transformers #47932 / PR #47961).

    On the kept tokens the raw probability is Z·q with Z the kept mass, so the acceptance ratio
    p/q is inflated by 1/Z; the mutant uses q_raw = Z·q with Z = 0.8, in the ratio and in the
    residual, as the buggy code did.
    """
    return reference_verify(draft_tokens, draft_probs * _KEPT_MASS, target_probs, generator)


def bonus_wrong_position(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Bonus token sampled from p_k (the last drafted position) instead of p_{k+1}
    (transformers PR #28166: wrong indexing)."""
    k = draft_tokens.shape[0]
    n_accepted = _correct_accepts(draft_tokens, draft_probs, target_probs, generator)
    if n_accepted == k:
        return _emit(draft_tokens, k, sample_from(target_probs[k - 1], generator))
    residual = residual_distribution(target_probs[n_accepted], draft_probs[n_accepted])
    return _emit(draft_tokens, n_accepted, sample_from(residual, generator))


# A typical magnitude of an LLM's largest logit; bf16 rounding error scales with it.
_TOP_LOGIT = 24.0


def bf16_draft_logits(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Draft sampled through the bf16 logits path while the ratio uses the float32 q
    (deepseek-ai/DeepSpec #31).

    The harness samples from the q it passes in, so that q plays the bf16 distribution and the
    mutant rebuilds the other one: logits with the top one at 24 (typical of LLMs), rounded to
    bfloat16, softmaxed. The two differ by one bf16 rounding of each logit (up to ±0.06 nats at
    that scale), the size of the difference between the two paths in the real bug.
    """
    return reference_verify(draft_tokens, _float32_path_q(draft_probs), target_probs, generator)


def _float32_path_q(draft_probs: torch.Tensor) -> torch.Tensor:
    """The draft distribution of the other precision path: LLM-scale logits, one bf16 rounding."""
    logits = draft_probs.double().log()
    logits = logits - logits.max(dim=-1, keepdim=True).values + _TOP_LOGIT
    rounded = logits.to(torch.bfloat16).double()
    return torch.softmax(rounded, dim=-1).to(draft_probs.dtype)


def deterministic_accept(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Accept iff p >= q, no randomness (mlx-swift-lm PR #459: equality-based acceptance at
    T > 0; SGLang PR #31214: verification silently greedy). Tokens with p < q are never
    emitted by acceptance, and the residual cannot produce them either."""
    p_draft = _drafted_values(target_probs, draft_tokens)
    q_draft = _drafted_values(draft_probs, draft_tokens)
    return _finish(draft_tokens, draft_probs, target_probs, generator, p_draft >= q_draft)


def greedy_verification(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Verification silently greedy: accept a draft iff it is the target's argmax, emit the argmax
    at the first mismatch or as the bonus, whatever the temperature and top-p (SGLang PR #31214:
    EAGLE verification fell back to argmax on some hardware). At greedy decoding this is the
    correct rule; at any T > 0 the output is the target's argmax path."""
    k = draft_tokens.shape[0]
    best = target_probs.argmax(dim=-1)
    n_accepted = _leading_accepts(draft_tokens == best[:k])
    return _emit(draft_tokens, n_accepted, int(best[n_accepted]))


def vocab_padding_off_by_one(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Correction token drawn over V + 1 slots (vLLM GHSA-8wr5-jm2h-8r4f: a padded slot past
    the vocabulary won, recovered id >= vocab size).

    Modelled as an off-by-one bound in a kernel reading the flattened [k, V] buffers: slot V of
    row i is element 0 of row i + 1 (zero past the end of a buffer), so the residual has a
    spurious entry max(0, p_{i+1}[0] - q_{i+1}[0]) at id V, which can be emitted.
    """
    k, vocab = draft_probs.shape
    n_accepted = _correct_accepts(draft_tokens, draft_probs, target_probs, generator)
    if n_accepted == k:
        return _emit(draft_tokens, k, sample_from(target_probs[k], generator))
    flat_p = torch.cat([target_probs.reshape(-1), target_probs.new_zeros(1)]).double()
    flat_q = torch.cat([draft_probs.reshape(-1), draft_probs.new_zeros(1)]).double()
    start = n_accepted * vocab
    residual = (flat_p[start : start + vocab + 1] - flat_q[start : start + vocab + 1]).clamp_min(0.0)
    return _emit(draft_tokens, n_accepted, sample_from(residual, generator))


def shared_uniform(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """One uniform shared by all positions of a step (a vectorisation slip; the randomised
    acceptance rules of docs/selftest.md's bug-class table, mlx-swift-lm PR #459). Reaching position i means u was small, so later drafts are accepted too often."""
    k = draft_tokens.shape[0]
    p_draft = _drafted_values(target_probs, draft_tokens)
    q_draft = _drafted_values(draft_probs, draft_tokens)
    u = _uniforms(1, generator, draft_tokens.device).expand(k)
    return _finish(draft_tokens, draft_probs, target_probs, generator, u * q_draft < p_draft)


_Q_FLOOR = 0.05


def q_floor(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Acceptance ratio p / max(q, 0.05): a guard against division by small q (docs/selftest.md's
    bug-class table; the llama.cpp #3919 class, where a sampler setting leaked into the acceptance
    probability). Drafts with small q are under-accepted."""
    k = draft_tokens.shape[0]
    p_draft = _drafted_values(target_probs, draft_tokens)
    q_draft = _drafted_values(draft_probs, draft_tokens).clamp_min(_Q_FLOOR)
    accepted = _uniforms(k, generator, draft_tokens.device) * q_draft < p_draft
    return _finish(draft_tokens, draft_probs, target_probs, generator, accepted)


_RATIO_POWER = 0.8


def power_ratio(
    draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Accept with probability min(1, (p/q)^0.8) (docs/selftest.md's bug-class table,
    mlx-swift-lm PR #459: a tempered or "smoothed" acceptance rule). Over-accepts drafts whose p/q < 1."""
    k = draft_tokens.shape[0]
    ratio = _drafted_values(target_probs, draft_tokens) / _drafted_values(draft_probs, draft_tokens)
    accepted = _uniforms(k, generator, draft_tokens.device) < ratio.pow(_RATIO_POWER)
    return _finish(draft_tokens, draft_probs, target_probs, generator, accepted)


MUTANTS: dict[str, VerifyFn] = {
    "correct": reference_verify,
    "always_accept": always_accept,
    "softmax_residual": softmax_residual,
    "resample_from_p": resample_from_p,
    "greedy_draft": greedy_draft,
    "target_not_warped": target_not_warped,
    "raw_draft_q": raw_draft_q,
    "bonus_wrong_position": bonus_wrong_position,
    "bf16_draft_logits": bf16_draft_logits,
    "deterministic_accept": deterministic_accept,
    "greedy_verification": greedy_verification,
    "vocab_padding_off_by_one": vocab_padding_off_by_one,
    "shared_uniform": shared_uniform,
    "q_floor": q_floor,
    "power_ratio": power_ratio,
}
"""Verify functions by name: "correct" is the reference sampler, every other one has one bug."""
