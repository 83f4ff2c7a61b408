"""The screen's expected acceptance for a tree shape or a staged level, along target-sampled paths.

The chain's screen (stats.acceptance) rests on one fact: given the target path x_0 .. x_{T-1},
a correct speculative sampler's acceptances at different positions are independent, position t
accepted with probability a_t = min(1, q_t(x_t)/p_t(x_t)). The same holds for a tree, with the
acceptance depending on the depth d at which position t falls in its step (its branching b_d):

- Along the accepted path the tree's node at depth d has the path's prefix as its context, so its
  target and draft distributions are p_t and q_t: the ones a teacher-forced draft pass over the
  path gives (no pass over the rest of the tree is needed).
- At a node with b children drawn i.i.d. from q, multi-step speculative sampling tries them
  against the residuals r_1 = p, r_{i+1} = norm(max(0, r_i − q)); all b are rejected with
  probability Π_i (1 − β_i), β_i = Σ min(r_i, q), and the token is then drawn from r_{b+1}. So
  P(emitted x, by a correction) = Π_i (1 − β_i) r_{b+1}(x) and, since the node emits x with
  probability p(x),
      a_t(b) = 1 − Π_i (1 − β_i) · r_{b+1}(x_t) / p_t(x_t),
  the chain's min(1, q/p) when b = 1.
- With the draft's top-b tokens as children (recursive rejection sampling) the node emits x by
  acceptance exactly when x is one of them: a_t(b) = 1[x_t in the top b of q_t].
- Whether position t was accepted does not change the law of x_{t+1} (p_{t+1} either way), and
  each node uses fresh randomness: given the path the acceptances are independent.

So the expected steps, tokens and acceptance per depth of a tree run that produced the path are a
dynamic programme over step starts, as for the chain, with a_t read at the depth t falls at
(`expected_shape_counts`). Averaged over the target's paths it is exact in expectation; its only
error is the Monte Carlo error of the sampled paths (the prompt bootstrap's interval).

A staged run's outer level (the medium's chain checked by the target) is a chain whose draft is
the medium: a_t = min(1, q₂_t(x_t)/p_t(x_t)), exact in the same way with the medium's
teacher-forced q₂; it is the chain's screen with the medium as the draft and k = the medium's k
(the same law, step for step). Its inner level (the small draft checked by the medium) runs along
the medium's own chains, which follow q₂, not the target's path: no target path decides it, and
it is only estimated by running the levels (Monte Carlo: the staged engine's own records, with
their prompt-bootstrap interval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["ShapeCounts", "expected_shape_counts", "tree_accept_cond"]


def tree_accept_cond(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, children: int, mode: str = "sampled") -> torch.Tensor:
    """a_t(b) [T]: the probability that path position t was emitted by accepting one of `children`
    children at its node, given the path's token there (module docstring); p, q [T, V], tokens [T]."""
    p = p.double() / p.double().sum(dim=-1, keepdim=True)
    q = q.double()
    x = tokens.long()[:, None]
    p_x = p.gather(-1, x)[:, 0]
    if mode == "top-k":
        top = torch.topk(q, children, dim=-1).indices
        return (top == x).any(dim=-1).double()
    residual, none = p, torch.ones_like(p_x)
    for _ in range(children):
        overlap = torch.minimum(residual, q).sum(dim=-1)
        none = none * (1.0 - overlap).clamp_min(0.0)
        rest = (residual - q).clamp_min(0.0)
        total = rest.sum(dim=-1, keepdim=True)
        residual = torch.where(total > 0, rest / total.clamp_min(1e-300), residual)
    corrected = none * residual.gather(-1, x)[:, 0]
    return torch.where(p_x > 0, (1.0 - corrected / p_x.clamp_min(1e-300)).clamp(0.0, 1.0), torch.zeros_like(p_x))


@dataclass(frozen=True)
class ShapeCounts:
    """Expected counts of one run along a path: verification steps, tokens emitted, positions
    offered (`proposed`) and accepted, and per depth d (index d − 1) the steps that reached depth d
    and those that accepted there."""

    steps: float
    tokens: float
    proposed: float
    accepted: float
    reached_at: list[float] = field(default_factory=list)
    accepted_at: list[float] = field(default_factory=list)

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else float("nan")

    @property
    def depth_acceptance(self) -> list[float]:
        """Expected accepted over expected reached, per depth: the ratio the records' sums estimate."""
        return [a / r if r else float("nan") for a, r in zip(self.accepted_at, self.reached_at)]


def expected_shape_counts(accept_at_depth: Sequence[Sequence[float]], max_new_tokens: int) -> ShapeCounts:
    """Expected counts for a path of length T whose position t accepts with probability
    `accept_at_depth[d][t]` when it falls at depth d + 1 of its step (D rows, one per depth; a chain's
    rows are all min(1, q/p)). A step starting at s offers min(D, max_new_tokens − s − 1) positions
    (the engines never draft past the budget) and emits its accepted ones plus one; positions past
    the path's end accept with probability 0."""
    depth = len(accept_at_depth)
    length = len(accept_at_depth[0]) if depth else 0
    rows = [list(map(float, row)) for row in accept_at_depth]
    zero = np.zeros(4 + 2 * depth)
    value = [zero] * (length + 1)  # value[s]: (steps, tokens, proposed, accepted, reached_1..D, accepted_1..D) from s on
    for start in range(length - 1, -1, -1):
        offered = max(0, min(depth, max_new_tokens - start - 1))
        total = zero.copy()
        survive = 1.0
        for n in range(offered + 1):
            a = rows[n][start + n] if n < offered and start + n < length else 0.0
            chance = survive * (1.0 - a)
            survive *= a
            if chance <= 0.0:
                continue
            outcome = value[min(start + n + 1, length)].copy()  # what the later steps add
            outcome[0] += 1.0
            outcome[1] += min(n + 1, length - start)  # tokens kept on the path
            outcome[2] += offered
            outcome[3] += n
            reached = min(n + 1, offered)  # depths 1..n accepted, n + 1 tried
            outcome[4 : 4 + reached] += 1.0
            outcome[4 + depth : 4 + depth + n] += 1.0
            total += chance * outcome
        value[start] = total
    result = value[0] if length else zero
    return ShapeCounts(
        steps=float(result[0]),
        tokens=float(result[1]),
        proposed=float(result[2]),
        accepted=float(result[3]),
        reached_at=[float(v) for v in result[4 : 4 + depth]],
        accepted_at=[float(v) for v in result[4 + depth :]],
    )
