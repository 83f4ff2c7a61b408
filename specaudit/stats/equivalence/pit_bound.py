"""A positive, bounded statement about the PIT: "no distortion of the PIT above d, shown at 1 − α".

The randomised PIT u_t = F_t(x_t−) + V_t·p_t(x_t) of every emitted token under the target is
U(0, 1) given everything before it when the sampler follows the target (`token_tests.pit_values`).
A sampler that distorts the target gives the u_t some other average law G. The distortion of the
PIT is D = sup_y |G(y) − y|, the Kolmogorov distance of G from uniform. The Dvoretzky–Kiefer–
Wolfowitz inequality with Massart's constant bounds the empirical CDF's distance from G:
P(sup |F_n − G| > ε) ≤ 2·exp(−2nε²), so D ≤ D_n + ε with probability at least 1 − α, where D_n is
the observed Kolmogorov–Smirnov statistic and ε = sqrt(ln(2/α) / (2n)).

What the bound implies: every event on the PIT scale happens within d of its frequency under a
correct sampler — in particular the share of tokens drawn from the target's top y of probability
mass (by vocabulary order) is off by at most d for every y, which is where sharpening, flattening and
truncation bugs move tokens. What it does not imply: a bound on the total-variation distance between
output distributions (a sampler can keep the PIT uniform while swapping two tokens of equal mass),
nor a bound for any one prompt or group (the PIT is pooled over all tokens), nor anything about
settings the audit did not sample. The u_t are treated as n independent draws (they are under a
correct sampler, where each is uniform given the past); the count n is set by where outputs stop,
which the calibration tests include.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class PITDistortionBound:
    """Upper confidence bound `upper` on the PIT's Kolmogorov distance from U(0, 1).

    `observed` is the Kolmogorov–Smirnov statistic D_n of the `n` PIT values, `margin` the DKW
    half-width ε at `level` (= 1 − α); `upper` = min(1, observed + margin)."""

    upper: float
    observed: float
    margin: float
    n: int
    level: float

    @property
    def shown(self) -> bool:
        """Whether the bound says anything: with no tokens, or a bound of 1, nothing is shown."""
        return self.n > 0 and self.upper < 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "upper": self.upper,
            "observed": self.observed,
            "margin": self.margin,
            "n": self.n,
            "level": self.level,
            "method": "dkw (Massart)",
        }


def dkw_margin(n: int, level: float) -> float:
    """The DKW half-width ε with P(sup |F_n − G| > ε) ≤ 1 − level for n draws."""
    if n <= 0:
        return math.inf
    return math.sqrt(math.log(2.0 / (1.0 - level)) / (2.0 * n))


def kolmogorov_distance(u: np.ndarray) -> float:
    """sup_y |F_n(y) − y| of the empirical CDF of `u` on [0, 1]."""
    u = np.sort(np.clip(np.asarray(u, dtype=float), 0.0, 1.0))
    n = u.size
    if n == 0:
        return math.nan
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - u), np.max(u - (i - 1) / n)))


def pit_distortion_bound(u: np.ndarray, level: float = 0.95) -> PITDistortionBound:
    """The bound from PIT values `u` (NaN entries, tokens without a PIT, are left out)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    u = np.asarray(u, dtype=float)
    u = u[~np.isnan(u)]
    n = int(u.size)
    if n == 0:
        return PITDistortionBound(1.0, math.nan, math.inf, 0, level)
    observed = kolmogorov_distance(u)
    margin = dkw_margin(n, level)
    return PITDistortionBound(min(1.0, observed + margin), observed, margin, n, level)
