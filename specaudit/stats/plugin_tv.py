"""The plug-in TV of n samples drawn from the target itself, and the samples per prompt at which
the white-box TV bound can show equivalence within δ.

`stats.equivalence.tv_bound` bounds the mean over prompts of TV̂_j = ½ Σ_x |#x/n_j − p_j(x)| at
the first output position and adds a McDiarmid margin. A correct engine's TV̂_j is not 0: n draws
from p_j itself scatter around it, and at T = 1 over a 49k vocabulary most of p_j's mass sits on
tokens that n draws never reach. So "more samples" is the only way to show equivalence, and how
many is a property of the target's first-token distributions, known exactly once they are scored:

    E TV̂_j(n) = (1/2n) Σ_x E|X_x − n p_j(x)|,  X_x ~ Binomial(n, p_j(x)),

with de Moivre's closed form E|X − np| = 2ν·C(n, ν)·p^ν·(1 − p)^(n−ν+1), ν = ⌊np⌋ + 1.
The bound a correct engine reaches with P prompts of n samples each is mean_j TV̂_j(n) +
sqrt(log(1/α) / (2Pn)) (the margin at position 0). Its first term's mean (the plug-in's bias)
does not shrink with more prompts, only with more samples of each; its spread is at most
1/(2·sqrt(Pn)) (bounded differences: one sample moves TV̂_j by at most 1/n). So with power
1 − β the bound reaches δ once

    mean_j E TV̂_j(n) + sqrt(log(1/α) / (2Pn)) + z_(1−β) / (2·sqrt(Pn)) ≤ δ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import gammaln
from scipy.stats import norm

# Samples per prompt at which each prompt's expected plug-in TV is kept: 1 … 2**20, four per doubling.
SAMPLE_GRID = np.unique(np.round(2.0 ** (np.arange(0, 81) / 4)).astype(np.int64))


def expected_plugin_tv(probs: Any, n: np.ndarray = SAMPLE_GRID) -> np.ndarray:
    """E[½ Σ_x |#x/n − p(x)|] for n i.i.d. draws from `probs` (one distribution, any array-like
    that numpy reads; normalised here), at each n of `n`."""
    p = np.asarray(probs, dtype=np.float64).ravel()
    p = p[p > 0] / p.sum()
    n = np.asarray(n, dtype=np.float64)
    out = np.zeros(n.shape)
    inner = p[p < 1.0]  # a token of probability 1 is always drawn: |X − n| = 0
    if inner.size == 0:
        return out
    for i, count in enumerate(n):
        nu = np.floor(count * inner) + 1.0
        log_mad = (
            math.log(2.0)
            + np.log(nu)
            + gammaln(count + 1.0)
            - gammaln(nu + 1.0)
            - gammaln(count - nu + 1.0)
            + nu * np.log(inner)
            + (count - nu + 1.0) * np.log1p(-inner)
        )
        out[i] = 0.5 * float(np.exp(log_mad).sum()) / count
    return out


@dataclass(frozen=True)
class SamplesToShow:
    """The samples per prompt on P prompts at which a correct engine's TV bound reaches δ with
    probability `power`.

    `samples` is None when no n up to the grid's end (2**20) gets there. `expected_upper` (the
    bound's expectation at that n) is `bias` plus `margin`; the power's allowance for the bound's
    spread comes on top. When the bias is most of δ, fewer prompts barely lower the samples each
    prompt needs (`fewer_prompts`: P' prompts -> samples per prompt, for a claim about those P' only).
    """

    delta: float
    alpha: float
    power: float
    n_prompts: int
    samples: int | None
    expected_upper: float
    bias: float
    margin: float
    fewer_prompts: dict[int, int | None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "delta": self.delta,
            "alpha": self.alpha,
            "power": self.power,
            "n_prompts": self.n_prompts,
            "samples": self.samples,
            "expected_upper": self.expected_upper,
            "bias": self.bias,
            "margin": self.margin,
            "fewer_prompts": {str(k): v for k, v in self.fewer_prompts.items()},
        }


def _bias(mean_curve: np.ndarray, n: float, grid: np.ndarray) -> float:
    """The mean plug-in TV at n samples, interpolated in log-log between grid points."""
    return float(np.exp(np.interp(math.log(n), np.log(grid), np.log(np.maximum(mean_curve, 1e-300)))))


def _margin(n_prompts: int, n: float, alpha: float) -> float:
    """McDiarmid's margin at position 0 with n samples on each of n_prompts prompts."""
    return math.sqrt(math.log(1 / alpha) / (2 * n_prompts * n))


def expected_bound(curves: np.ndarray, n: float, *, alpha: float, grid: np.ndarray = SAMPLE_GRID) -> tuple[float, float]:
    """(bias, margin) of the TV bound a correct engine reaches with n samples on each of the
    P = len(curves) prompts: the mean over prompts of E TV̂_j at n and the margin at position 0."""
    curves = np.atleast_2d(curves)
    return _bias(curves.mean(axis=0), n, grid), _margin(curves.shape[0], n, alpha)


def _samples_for(mean_curve: np.ndarray, n_prompts: int, delta: float, alpha: float, power: float, grid: np.ndarray) -> int | None:
    """The smallest n at which the bound on n_prompts prompts (a random n_prompts of the audited
    ones, in expectation: their mean curve) reaches δ with `power`; None past the grid's end."""
    spread = float(norm.ppf(power)) / 2

    def upper(n: float) -> float:
        return _bias(mean_curve, n, grid) + _margin(n_prompts, n, alpha) + spread / math.sqrt(n_prompts * n)

    first = next((i for i, n in enumerate(grid) if upper(n) <= delta), None)
    if first is None:
        return None
    if first == 0:
        return int(grid[0])
    lo, hi = int(grid[first - 1]), int(grid[first])
    while hi - lo > 1:  # the expected bound falls with n: bisect between the two grid points
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if upper(mid) <= delta else (mid, hi)
    return hi


def samples_to_show(curves: np.ndarray, *, delta: float, alpha: float, power: float = 0.8, grid: np.ndarray = SAMPLE_GRID) -> SamplesToShow:
    """`curves` [P, len(grid)]: each audited prompt's expected_plugin_tv on `grid`."""
    curves = np.atleast_2d(np.asarray(curves, dtype=np.float64))
    n_prompts = curves.shape[0]
    mean_curve = curves.mean(axis=0)
    samples = _samples_for(mean_curve, n_prompts, delta, alpha, power, grid)
    bias, margin = expected_bound(curves, float(samples if samples is not None else grid[-1]), alpha=alpha, grid=grid)
    fewer = sorted({max(1, math.ceil(n_prompts / 2**i)) for i in range(1, 6)} - {n_prompts})
    return SamplesToShow(
        delta=delta,
        alpha=alpha,
        power=power,
        n_prompts=n_prompts,
        samples=samples,
        expected_upper=bias + margin,
        bias=bias,
        margin=margin,
        fewer_prompts={p: _samples_for(mean_curve, p, delta, alpha, power, grid) for p in reversed(fewer)},
    )


__all__ = ["SAMPLE_GRID", "SamplesToShow", "expected_bound", "expected_plugin_tv", "samples_to_show"]
