"""Exactness of one speculative step, by enumeration on a toy vocabulary.

Toy "models" give context-dependent logits. We enumerate every draft proposal and every
accept/reject outcome of one speculative step with k = 3 and add up the probability of each
emitted token sequence (truncated to its first m tokens); it must equal the target's own
probability of that sequence, for every sampling setting. The enumeration uses the same warp
and residual functions as the engine.
"""

import pytest
import torch

from specaudit.decoding import SamplingSpec, residual_distribution, warp

V, K = 4, 3


def toy_logits(seed: int):
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(V ** (K + 1) + 7, V, generator=generator, dtype=torch.float64) * 2

    def logits(prefix: tuple[int, ...]) -> torch.Tensor:
        index = sum((t + 1) * (V + 1) ** i for i, t in enumerate(prefix)) % table.shape[0]
        return table[index]

    return logits


def step_distribution(target, draft, spec: SamplingSpec) -> dict[tuple[int, ...], float]:
    """Probability of each complete emitted sequence of one speculative step."""
    out: dict[tuple[int, ...], float] = {}

    def p(prefix):
        return warp(target(prefix), spec).double()

    def q(prefix):
        return warp(draft(prefix), spec).double()

    def walk(prefix: tuple[int, ...], mass: float, depth: int):
        if mass == 0.0:
            return
        p_here, q_here = p(prefix), q(prefix)
        if depth == K:  # all k accepted: bonus token from p
            for token in range(V):
                out[prefix + (token,)] = out.get(prefix + (token,), 0.0) + mass * float(p_here[token])
            return
        residual = residual_distribution(p_here, q_here)
        for token in range(V):
            proposed = mass * float(q_here[token])
            if proposed == 0.0:
                continue
            accept = min(1.0, float(p_here[token] / q_here[token]))
            walk(prefix + (token,), proposed * accept, depth + 1)
            reject = proposed * (1.0 - accept)
            for correction in range(V):
                seq = prefix + (correction,)
                out[seq] = out.get(seq, 0.0) + reject * float(residual[correction])

    walk((), 1.0, 0)
    return out


def marginal(dist: dict[tuple[int, ...], float], m: int) -> dict[tuple[int, ...], float]:
    """Probability of the first m emitted tokens (sequences shorter than m are a step that stopped early)."""
    result: dict[tuple[int, ...], float] = {}
    for seq, prob in dist.items():
        if len(seq) >= m:
            result[seq[:m]] = result.get(seq[:m], 0.0) + prob
    return result


@pytest.mark.parametrize(
    "spec",
    [
        SamplingSpec(1.0),
        SamplingSpec(0.6),
        SamplingSpec(1.0, top_k=2),
        SamplingSpec(0.9, top_p=0.7),
        SamplingSpec(1.2, top_k=3, top_p=0.8),
        SamplingSpec(0.0),
    ],
    ids=["T1", "T0.6", "topk2", "topp0.7", "combined", "greedy"],
)
@pytest.mark.parametrize("seeds", [(0, 1), (2, 3)])
def test_one_step_emits_the_target_distribution(spec, seeds):
    target, draft = toy_logits(seeds[0]), toy_logits(seeds[1])
    dist = step_distribution(target, draft, spec)
    assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
    # The first token is emitted in every step: its law must be p(.|()) exactly.
    first = marginal(dist, 1)
    expected = warp(target(()), spec).double()
    for token in range(V):
        assert first.get((token,), 0.0) == pytest.approx(float(expected[token]), abs=1e-12)
    # Deeper tokens: P(x1..xm emitted in this step) = P_target(x1..xm) * P(step reaches m | x1..xm-1),
    # so compare conditionals: P(xm | x<m, step emitted >= m tokens) = p(xm | x<m).
    for m in range(2, K + 2):
        joint = marginal(dist, m)
        prefix_mass = marginal(dist, m - 1)
        for seq, prob in joint.items():
            reach = sum(v for s, v in joint.items() if s[:-1] == seq[:-1])
            conditional = prob / reach
            assert conditional == pytest.approx(float(warp(target(seq[:-1]), spec)[seq[-1]]), abs=1e-9), (m, seq)
            assert reach <= prefix_mass[seq[:-1]] + 1e-12


def test_enumeration_catches_a_wrong_residual():
    """The oracle is not vacuous: resampling from p instead of the residual breaks it."""
    import specaudit.decoding as decoding

    target, draft = toy_logits(0), toy_logits(1)
    original = residual_distribution
    globals()["residual_distribution"] = lambda p, q: p
    try:
        dist = step_distribution(target, draft, SamplingSpec(1.0))
    finally:
        globals()["residual_distribution"] = original
    first = marginal(dist, 1)
    expected = warp(target(()), SamplingSpec(1.0)).double()
    assert max(abs(first.get((t,), 0.0) - float(expected[t])) for t in range(V)) > 1e-3
    assert decoding.residual_distribution is original
