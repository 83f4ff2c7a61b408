"""The rejection step of speculative sampling, as a pluggable function.

A verify function has the signature

    verify(draft_tokens, draft_probs, target_probs, generator) -> emitted token ids

- draft_tokens: LongTensor [k], the tokens the draft proposed;
- draft_probs:  FloatTensor [k, V], the (warped) draft distribution q_i each token was drawn from;
- target_probs: FloatTensor [k+1, V], the (warped) target distribution p_i at each drafted
  position plus one more for the bonus token;
- generator:    torch.Generator on the tensors' device, the only source of randomness;
- returns a LongTensor of 1..k+1 token ids: the accepted prefix of draft_tokens followed by one
  token sampled by the verifier (the correction at the first rejection, or the bonus token).

So `len(emitted) - 1` drafted tokens were accepted. Users plug their own sampler in here, and
the self-test's mutants are verify functions with one real bug each.

A verify function with the attribute `wants_logits = True` is also given `logits=VerifyLogits(...)`:
the sampling setting and the raw logits behind q and p. Only bugs in an engine's own warping need
them (the self-test's field mutants: a q or p computed with other sampling parameters than used).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specaudit.decoding._spec import SamplingSpec

VerifyFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor]


@dataclass(frozen=True)
class VerifyLogits:
    """What q and p were warped from, for a verify function with `wants_logits = True`."""

    spec: SamplingSpec  # the run's sampling setting
    draft: torch.Tensor | None  # [k, V] raw draft logits (None for a lookup draft, which has none)
    target: torch.Tensor  # [k+1, V] raw target logits


def sample_from(probs: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one index from a (possibly unnormalised) 1-D distribution by inverse CDF.

    Never returns an index with zero probability, not even when float rounding puts the uniform
    at the very end of the CDF (the vLLM "recovered token id >= vocab size" class of bug).
    """
    cdf = probs.double().cumsum(dim=0)
    u = torch.rand((), generator=generator, device=probs.device, dtype=torch.float64)
    index = int(torch.searchsorted(cdf, (u * cdf[-1]).reshape(1), right=True))
    last_possible = int(torch.nonzero(probs > 0)[-1])
    return min(index, last_possible)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(0, p - q)); falls back to p when p <= q everywhere (then rejection has
    probability zero and only float noise can bring us here)."""
    residual = (p - q).clamp_min(0.0)
    total = residual.sum()
    return residual / total if total > 0 else p


def reference_verify(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """Speculative sampling as in Leviathan et al. 2023 / Chen et al. 2023.

    Accept drafted token i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
    emit a sample of normalise(max(0, p_i - q_i)) and stop; if all k are accepted, emit a bonus
    sample of p_{k+1}. Each position gets its own uniform.
    """
    k = draft_tokens.shape[0]
    positions = torch.arange(k, device=draft_tokens.device)
    p_of_draft = target_probs[positions, draft_tokens].double()
    q_of_draft = draft_probs[positions, draft_tokens].double()
    uniforms = torch.rand(k, generator=generator, device=draft_tokens.device, dtype=torch.float64)
    # u < p/q written without the division; q > 0 because the draft sampled these tokens.
    accepted = uniforms * q_of_draft < p_of_draft
    n_accepted = int(accepted.long().cumprod(dim=0).sum())
    if n_accepted == k:
        last = sample_from(target_probs[k], generator)
    else:
        last = sample_from(residual_distribution(target_probs[n_accepted], draft_probs[n_accepted]), generator)
    emitted = torch.empty(n_accepted + 1, dtype=torch.long, device=draft_tokens.device)
    emitted[:n_accepted] = draft_tokens[:n_accepted]
    emitted[n_accepted] = last
    return emitted


def contract_problem(emitted: object, draft_tokens: torch.Tensor, vocab_size: int) -> tuple[str | None, bool]:
    """What breaks the verify contract in a verify function's return value, and whether the step
    is unusable: (None, False) when it keeps the contract; (problem, True) when the value cannot be
    decoded on (not a 1-D integer tensor of 1..k+1 ids inside the vocabulary); (problem, False)
    when it is well formed but its accepted prefix is not the drafted tokens."""
    k = draft_tokens.shape[0]
    if not isinstance(emitted, torch.Tensor):
        return f"returned {type(emitted).__name__}, not a tensor of token ids", True
    if emitted.dim() != 1:
        return f"returned a tensor of shape {tuple(emitted.shape)}, not 1-D", True
    if emitted.dtype.is_floating_point or emitted.dtype.is_complex or emitted.dtype == torch.bool:
        return f"returned {str(emitted.dtype).removeprefix('torch.')} values, not integer token ids", True
    if not 1 <= emitted.shape[0] <= k + 1:
        return f"returned {emitted.shape[0]} token ids; a step with {k} drafted tokens emits 1 to {k + 1}", True
    outside = emitted[(emitted < 0) | (emitted >= vocab_size)]
    if outside.numel():
        return f"returned token id {int(outside[0])}, outside the vocabulary [0, {vocab_size})", True
    accepted = emitted[:-1].to(draft_tokens.device)
    if not torch.equal(accepted, draft_tokens[: accepted.shape[0]].to(accepted.dtype)):
        return (
            f"accepted {accepted.tolist()} but the draft proposed {draft_tokens[: accepted.shape[0]].tolist()}: "
            "the accepted prefix must be the drafted tokens"
        ), False
    return None, False


def acceptance_probabilities(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """β_i = Σ_x min(p_i(x), q_i(x)) = 1 - TV(p_i, q_i) for each drafted position i."""
    k = draft_probs.shape[0]
    return torch.minimum(draft_probs, target_probs[:k]).sum(dim=-1)


def token_acceptance_probabilities(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """min(1, p_i(x_i) / q_i(x_i)) for each drafted token x_i: the probability a correct verifier
    accepts it given it was drafted (β_i is its mean over x_i ~ q_i)."""
    positions = torch.arange(draft_tokens.shape[0], device=draft_tokens.device)
    p = target_probs[positions, draft_tokens].double()
    q = draft_probs[positions, draft_tokens].double()
    return torch.where(q > 0, (p / q.clamp_min(1e-300)).clamp_max(1.0), torch.zeros_like(p))


def mass_before(probs: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row of `probs` [N, V] and its token [N]: the mass of the tokens ranked before it
    (descending probability, ties by ascending id: an order that never depends on the token, so
    a randomised PIT F(x−) + V·f(x) is exactly U(0, 1) under the row's law) and its own mass.
    Ids outside the vocabulary get (1, 0): after every possible token, impossible."""
    probs = probs.to(torch.float64)
    inside = (tokens >= 0) & (tokens < probs.shape[-1])
    index = torch.where(inside, tokens, torch.zeros_like(tokens))
    own = probs.gather(1, index[:, None]).squeeze(1)
    ids = torch.arange(probs.shape[-1], device=probs.device)
    before = (probs > own[:, None]) | ((probs == own[:, None]) & (ids[None, :] < index[:, None]))
    below = torch.where(before, probs, torch.zeros((), dtype=probs.dtype, device=probs.device)).sum(dim=1)
    return torch.where(inside, below, torch.ones_like(below)), torch.where(inside, own, torch.zeros_like(own))


def step_laws(draft_probs: torch.Tensor, target_probs: torch.Tensor, n_accepted: int) -> torch.Tensor:
    """The distribution each emitted token of a correct verification step follows given its role
    [n_accepted + 1, V]: an accepted draft at position i follows min(p_i, q_i) / β_i (drawn from
    q_i, kept with probability min(1, p_i/q_i)); the correction at the first rejection follows
    the residual normalise(max(0, p - q)); the bonus token (all drafts accepted) follows p_{k+1}."""
    k = draft_probs.shape[0]
    raw_p, raw_q = target_probs.to(torch.float64), draft_probs.to(torch.float64)
    # float32 warps sum to 1 only within ~1e-7: normalise, so that F + f <= 1 holds exactly
    p, q = (x / x.sum(dim=-1, keepdim=True).clamp_min(1e-300) for x in (raw_p, raw_q))
    accepted = torch.minimum(p[:n_accepted], q[:n_accepted])
    laws = [accepted / accepted.sum(dim=-1, keepdim=True).clamp_min(1e-300)]  # β = 0: nothing can be accepted
    # The residual from p and q as given (normalised after the difference): its support is then
    # exactly {p > q} of the verifier's own comparison, so a correction outside it (f = 0) is
    # impossible for a correct verifier, never a rounding accident of normalising p and q apart.
    laws.append((residual_distribution(raw_p[n_accepted], raw_q[n_accepted]) if n_accepted < k else p[k])[None])
    return torch.cat(laws)


def step_pit(draft_probs: torch.Tensor, target_probs: torch.Tensor, emitted: torch.Tensor) -> list[list[float]]:
    """[F(x−), f(x)] of each emitted token under the law its role in the step implies (see
    `step_laws`), from the p and q the verifier was given. Whatever bug a verify function has,
    these stay what a correct one would produce, so the auditor can test them (one test over
    every token: u = F + V·f is i.i.d. U(0, 1) for a correct verifier)."""
    laws = step_laws(draft_probs, target_probs, emitted.shape[0] - 1)
    below, own = mass_before(laws, emitted)
    return torch.stack([below, own], dim=1).tolist()
