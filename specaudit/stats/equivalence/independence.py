"""Are outputs that ran together independent? A permutation test of agreement between samples.

A correct server draws every request from the target on its own randomness, so the samples of one
prompt are i.i.d. whatever ran beside them: the samples made at concurrency L and those made one
at a time (the baseline level) are exchangeable. A server that shares random numbers across the
requests of a batch (one seed or noise vector for the batch) leaves each output's law right and
makes outputs that ran together agree: copies, or long common prefixes. No per-token test sees
that (each output alone is right); agreement between samples does.

Statistic: over prompts, the mean longest common prefix (in tokens) of the pairs of samples
within the level, minus the same mean within the baseline level. Under H0 the labels "level" and
"baseline" are exchangeable within a prompt, so the p-value is exact by permutation (labels
shuffled within each prompt, one-sided: more agreement in the level).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specaudit.stats._results import StatTestResult

N_PERMUTATIONS = 999


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _agreement(matrix: np.ndarray, mask: np.ndarray) -> float:
    """Mean off-diagonal entry of `matrix` (zero diagonal) over the rows and columns `mask` selects."""
    m = int(mask.sum())
    if m < 2:
        return 0.0
    weights = mask.astype(float)
    return float(weights @ matrix @ weights) / (m * (m - 1))


def concurrent_independence(
    level: Mapping[str, Sequence[Sequence[int]]],
    baseline: Mapping[str, Sequence[Sequence[int]]],
    *,
    alpha: float = 0.05,
    n_permutations: int = N_PERMUTATIONS,
    seed: int = 0,
) -> StatTestResult:
    """Test that outputs made at a concurrency level agree no more than outputs made at the
    baseline level (`level`, `baseline`: prompt id -> output token lists). `statistic` is the
    excess mean common prefix in tokens; `n` the prompts with two or more samples on each side."""
    rng = np.random.default_rng(seed)
    prompts = []
    for prompt, outputs in level.items():
        other = list(baseline.get(prompt, ()))
        if len(outputs) >= 2 and len(other) >= 2:
            both = [*outputs, *other]
            matrix = np.array([[common_prefix(a, b) if i != j else 0 for j, b in enumerate(both)] for i, a in enumerate(both)], dtype=float)
            prompts.append((matrix, len(outputs)))
    if not prompts:
        return StatTestResult("concurrent_independence", float("nan"), float("nan"), 0, alpha, "permutation")

    def excess(masks: list[np.ndarray]) -> float:
        return sum(_agreement(m, mask) - _agreement(m, ~mask) for (m, _), mask in zip(prompts, masks)) / len(prompts)

    observed = excess([np.arange(len(m)) < size for m, size in prompts])
    at_least = 0
    for _ in range(n_permutations):
        masks = [rng.permutation(len(m)) < size for m, size in prompts]
        at_least += excess(masks) >= observed - 1e-12
    pvalue = (1 + at_least) / (1 + n_permutations)
    return StatTestResult("concurrent_independence", observed, pvalue, len(prompts), alpha, f"permutation ({n_permutations})")


__all__ = ["common_prefix", "concurrent_independence"]
