"""Speculative acceptance along target-distributed paths, without running the speculative engine.

Notation, for one row (one prompt and sample): a path x_0 .. x_{T-1} sampled from the warped
target, p_t = p(. | prompt, x_<t) and q_t = q(. | prompt, x_<t) the warped target and draft
distributions at output position t (both [T, V], q from one teacher-forced draft pass).

Why a target path is enough. A correct speculative sampler emits every token from p_t whatever
happened before, so its output path has the target's law. What the path does not say is which
tokens were drafted and accepted. Given the path:

- a drafted position t accepts with probability a_t = min(1, q_t(x_t) / p_t(x_t)): the draft
  proposed y ~ q_t, kept it with probability min(1, p_t(y)/q_t(y)), so P(accepted, x_t = x) =
  min(p_t, q_t)(x) while P(x_t = x) = p_t(x). Its mean over x_t ~ p_t is
  beta_t = sum_x min(p_t(x), q_t(x)) (Leviathan et al.'s alpha);
- the future path does not depend on whether t was accepted (either way x_{t+1} ~ p_{t+1}), so
  given the path the acceptances at different positions are independent Bernoulli(a_t);
- which positions are drafted follows from the earlier acceptances: a step starting at s drafts
  k_s = min(k, max_new_tokens - s - 1) positions (the engine never drafts past its budget),
  accepts n of them (the first n accepted, position s + n rejected, or n = k_s), emits n + 1
  tokens, and the next step starts at s + n + 1.

So the expected number of steps, proposed and accepted tokens of a speculative run that produced
this path is a small dynamic programme over step starts s (O(T k)):

    E(s) = (1, k_s, E[n | s], E[reached | s]) + sum_n P(n | s) E(s + n + 1),   E(s >= T) = 0
    P(n | s) = prod_{i<n} a_{s+i} * (1 - a_{s+n})   (n < k_s),   P(k_s | s) = prod_{i<k_s} a_{s+i}

with a_t = 0 beyond the path's end (the engine would verify drafts past an end-of-sequence token
against a continuation this path does not have: the screen counts none of them accepted).
Averaging E(0) over target paths gives the engine's expected counts exactly (Rao-Blackwellised:
lower variance than one engine run per path). tests/screen compare it with the engine.

One run's acceptance rate, accepted / proposed, is a ratio of two random counts, so its mean is
not E[accepted] / E[proposed]: fewer steps mean more accepted and fewer proposed tokens at once, and
the rate is convex in the steps (on the default pair one run's rate averages 0.7% above the ratio of
expectations). Comparing the screen with single engine runs therefore needs the mean of the run's
rate itself: `expected_run_rate` carries the distribution of (accepted, proposed) forward over step
starts, where (s, accepted) fix the steps taken (s = accepted + steps) and proposed differs only
near the budget, so the states stay few.

Deterministic drafts couple exactly: q_t is one-hot on the proposal, a_t is 1 when the target's
sample equals it and 0 otherwise, and the programme collapses to one simulated run. Prompt
lookup (n-gram) proposes a block of k tokens at the step start from the context then, so its
proposals depend on s; `ngram_counts` simulates those steps along the path directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import numpy as np

    from specaudit.models import NgramDraft


@dataclass
class PathAcceptance:
    """Expected speculative counts of one path (exact counts for deterministic drafts)."""

    steps: float
    proposed: float
    accepted: float
    reached: float  # drafted positions tried (a position is tried when every earlier one of its step was accepted)
    beta: list[float] = field(default_factory=list)  # [T] sum min(p_t, q_t) (empty for n-gram)
    accept_cond: list[float] = field(default_factory=list)  # [T] min(1, q_t(x_t) / p_t(x_t)) (1/0 for n-gram)
    accepted_per_step: list[int] = field(default_factory=list)  # n-gram only: the simulated steps
    proposed_per_step: list[int] = field(default_factory=list)


def position_acceptance(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(beta [..., T], accept_cond [..., T]) from p, q [..., T, V] and the path's tokens [..., T]."""
    p, q = p.double(), q.double()
    beta = torch.minimum(p, q).sum(dim=-1)
    p_x = p.gather(-1, tokens[..., None]).squeeze(-1)
    q_x = q.gather(-1, tokens[..., None]).squeeze(-1)
    accept = torch.where(p_x > 0, (q_x / p_x.clamp_min(1e-300)).clamp_max(1.0), torch.zeros_like(p_x))
    return beta, accept


def _drafted(start: int, k: int, max_new_tokens: int) -> int:
    """k_s: positions a step starting at s drafts (the engine never drafts past its budget)."""
    return max(0, min(k, max_new_tokens - start - 1))


def _step_outcomes(accept_cond: list[float], start: int, k: int, max_new_tokens: int) -> tuple[int, list[tuple[int, float]]]:
    """(k_s, [(n, P(n | s))]) of a step starting at s: the first n drafts accepted and the next
    rejected, or all k_s accepted (a_t = 0 beyond the path); outcomes of probability 0 left out."""
    drafted = _drafted(start, k, max_new_tokens)
    outcomes, survive = [], 1.0  # survive: P(the first n drafted positions were all accepted)
    for n in range(drafted + 1):
        a = accept_cond[start + n] if n < drafted and start + n < len(accept_cond) else 0.0
        chance = survive * (1.0 - a)
        if chance > 0.0:
            outcomes.append((n, chance))
        survive *= a
    return drafted, outcomes


def expected_counts(accept_cond: list[float], k: int, max_new_tokens: int) -> tuple[float, float, float, float]:
    """(steps, proposed, accepted, reached) expected for a path with these conditional acceptances."""
    length = len(accept_cond)
    value = [(0.0, 0.0, 0.0, 0.0)] * length
    for start in range(length - 1, -1, -1):
        drafted, outcomes = _step_outcomes(accept_cond, start, k, max_new_tokens)
        steps, proposed, accepted, reached = 1.0, float(drafted), 0.0, 0.0
        for n, chance in outcomes:
            later = value[start + n + 1] if start + n + 1 < length else (0.0, 0.0, 0.0, 0.0)
            steps += chance * later[0]
            proposed += chance * later[1]
            accepted += chance * (n + later[2])
            reached += chance * (min(n + 1, drafted) + later[3])
        value[start] = (steps, proposed, accepted, reached)
    return value[0] if length else (0.0, 0.0, 0.0, 0.0)


def prompt_pass_counts(accept_cond: list[float], k: int, max_new_tokens: int) -> tuple[float, float, float, float]:
    """`expected_counts` for llama.cpp's step structure: the prompt pass emits output position 0
    without a draft (a step proposing nothing), and a later step starting at s offers
    min(k, max_new_tokens - s) drafts (llama.cpp drafts k whatever the budget left; its records
    count the drafts up to the budget, with no position kept for the correction token). On the
    path after position 0 that is the programme above with the budget one position larger."""
    steps, proposed, accepted, reached = expected_counts(accept_cond[1:], k, max_new_tokens)
    return steps + 1.0, proposed, accepted, reached


def accepted_on_path(accepted_per_step: list[int], length: int) -> int:
    """Accepted drafts of an engine run at positions inside its `length` emitted tokens. A step can
    accept drafts past an end-of-sequence token it also accepted; the run's tokens stop at that
    token, and so does the path the screen's programmes see (a_t = 0 beyond it)."""
    start = inside = 0
    for accepted in accepted_per_step:
        inside += max(0, min(accepted, length - start))
        start += accepted + 1
    return inside


def run_rate_moments(accept_cond: list[float], k: int, max_new_tokens: int) -> tuple[float, float]:
    """(mean, variance) of accepted / proposed of one speculative run that produced this path (runs
    that propose nothing excluded); (nan, nan) when no run proposes anything."""
    length = len(accept_cond)
    at_start: list[dict[tuple[int, int], float]] = [{} for _ in range(length)]  # s -> {(accepted, proposed): P}
    if length:
        at_start[0][(0, 0)] = 1.0
    first = second = mass = 0.0
    for start in range(length):
        drafted, outcomes = _step_outcomes(accept_cond, start, k, max_new_tokens)
        for (accepted, proposed), weight in at_start[start].items():
            for n, chance in outcomes:
                state = (accepted + n, proposed + drafted)
                if start + n + 1 < length:
                    at_start[start + n + 1][state] = at_start[start + n + 1].get(state, 0.0) + weight * chance
                elif state[1] > 0:  # the run ends here
                    rate = state[0] / state[1]
                    first += weight * chance * rate
                    second += weight * chance * rate * rate
                    mass += weight * chance
        at_start[start] = {}
    if mass <= 0.0:
        return float("nan"), float("nan")
    mean = first / mass
    return mean, max(second / mass - mean * mean, 0.0)


def expected_run_rate(accept_cond: list[float], k: int, max_new_tokens: int, *, prompt_pass: bool = False) -> float:
    """E[accepted / proposed] of one speculative run that produced this path (runs that propose
    nothing excluded); nan when no run proposes anything. `prompt_pass`: llama.cpp's step
    structure (`prompt_pass_counts`; its first step proposes nothing, so the rate is the
    programme's on the rest of the path)."""
    if prompt_pass:
        accept_cond = accept_cond[1:]
    return run_rate_moments(accept_cond, k, max_new_tokens)[0]


def sample_run(accept_cond: list[float], k: int, max_new_tokens: int, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """(accepted_per_step, proposed_per_step) of one speculative run that produced this path, drawn
    from the law the programmes above average over (`rng`: a numpy Generator). For simulations of
    the engine."""
    start, accepted, proposed = 0, [], []
    while start < len(accept_cond):
        drafted = _drafted(start, k, max_new_tokens)
        n = 0
        while n < drafted and start + n < len(accept_cond) and rng.random() < accept_cond[start + n]:
            n += 1
        accepted.append(n)
        proposed.append(drafted)
        start += n + 1
    return accepted, proposed


def model_draft_acceptance(beta: list[float], accept_cond: list[float], k: int, max_new_tokens: int) -> PathAcceptance:
    steps, proposed, accepted, reached = expected_counts(accept_cond, k, max_new_tokens)
    return PathAcceptance(steps, proposed, accepted, reached, beta=beta, accept_cond=accept_cond)


def ngram_counts(lookup: NgramDraft, prompt: list[int], path: list[int], k: int, max_new_tokens: int) -> PathAcceptance:
    """Prompt-lookup steps simulated along the path: accept while the path's token equals the proposal."""
    start, per_step_accepted, per_step_proposed = 0, [], []
    accept_cond = [0.0] * len(path)
    while start < len(path):
        drafted = _drafted(start, k, max_new_tokens)
        proposal = lookup.propose(prompt + path[:start], drafted) if drafted > 0 else []
        n = 0
        while n < len(proposal) and start + n < len(path) and proposal[n] == path[start + n]:
            accept_cond[start + n] = 1.0
            n += 1
        per_step_accepted.append(n)
        per_step_proposed.append(len(proposal))
        start += n + 1
    accepted, proposed = sum(per_step_accepted), sum(per_step_proposed)
    reached = sum(min(a + 1, d) for a, d in zip(per_step_accepted, per_step_proposed))
    return PathAcceptance(
        float(len(per_step_accepted)),
        float(proposed),
        float(accepted),
        float(reached),
        accept_cond=accept_cond,
        accepted_per_step=per_step_accepted,
        proposed_per_step=per_step_proposed,
    )
