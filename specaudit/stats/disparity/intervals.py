"""Ratio-to-reference intervals valid at the group sizes used, the status they give, and their power.

One method decides each comparison, and the same method gives its interval, its status and its
minimum detectable ratio (docs/statistics.md, "Disparity"):

- **paired Fieller** when the group and its reference share parallel prompts (``pair_id``): the
  ratio of the mean per-prompt values over shared pairs, with Fieller's interval from the paired
  variances and covariance of the two means, t with n_pairs − 1 degrees of freedom. Pairing
  removes the prompt's own difficulty, which both versions of a parallel prompt share.
- **Fieller (Welch)** otherwise: unpaired Fieller interval for the ratio of mean per-prompt values,
  t with Welch–Satterthwaite degrees of freedom.

The cluster bootstrap is not used for the status. Measured on per-prompt values as skewed as
acceptance rates (log-normal, σ = 0.4; 400 simulations each): the percentile bootstrap's 95%
interval for a ratio of group means missed on each side 4.8% and 5.0% of the time at 20 prompts a
side and 3.5% and 4.8% at 50, against 2.5% nominal, while the Welch–Fieller interval missed
4.0%/2.3% at 20 and 2.5%/3.8% at 50 (Monte Carlo sd ≈ 0.8%). The bootstrap stays in the
descriptive tables (group values, ``to_reference``), where no decision rests on its tails.

Status (``specaudit.contracts.DisparityStatus``): FLAG when the interval lies wholly outside the
band, WITHIN when wholly inside, INCONCLUSIVE when it straddles one band edge, INSUFFICIENT when
the design cannot decide: too few prompts or pairs for an interval, an unbounded Fieller set (the
reference mean is not distinguishable from 0), or an interval that covers the whole band.

A FLAG is a one-sided test of "the ratio is inside the band" at level (1 − confidence) / 2: with a
true ratio on a band edge it occurs with probability at most α/2, and less inside the band.

The minimum detectable ratio is the true ratio at which this same interval FLAGs with the given
power: below the band, L·exp(−(t_{1−α/2} + t_power)·se), above it H·exp(+(t_{1−α/2} + t_power)·se),
with se the standard error of the log ratio (delta method) and the method's degrees of freedom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from specaudit.contracts import DEFAULT_BAND, DisparityStatus

__all__ = [
    "MIN_PAIRS",
    "RatioInterval",
    "fieller_interval",
    "minimum_detectable_ratio",
    "paired_values",
    "ratio_interval",
    "ratio_status",
]

# Shared pairs needed for the paired interval (t with 2 degrees of freedom: valid, if wide).
MIN_PAIRS = 3

PAIRED_FIELLER = "paired Fieller"
WELCH_FIELLER = "Fieller (Welch)"


@dataclass(frozen=True)
class RatioInterval:
    """A group's ratio to its reference with the interval, status and power of one method."""

    ratio: float
    ci_low: float
    ci_high: float
    confidence_level: float
    method: str
    status: DisparityStatus
    se_log: float
    df: float
    n_group: int
    n_reference: int
    n_pairs: int
    min_detectable_ratio_low: float
    min_detectable_ratio_high: float
    reason: str | None = None

    def confidence_interval(self) -> tuple[float, float]:
        return self.ci_low, self.ci_high

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "confidence_level": self.confidence_level,
            "method": self.method,
            "status": self.status.value,
            "se_log": self.se_log,
            "df": self.df,
            "n_group": self.n_group,
            "n_reference": self.n_reference,
            "n_pairs": self.n_pairs,
            "min_detectable_ratio_low": self.min_detectable_ratio_low,
            "min_detectable_ratio_high": self.min_detectable_ratio_high,
            "reason": self.reason,
        }


def fieller_interval(mean_x: float, mean_y: float, var_x: float, var_y: float, cov: float, t: float) -> tuple[float, float]:
    """Fieller's interval for mean_x / mean_y, given the variances and covariance of the two means
    and the critical value t: the ratios R with (x̄ − R·ȳ)² ≤ t²·(v_x − 2R·c + R²·v_y). NaN, NaN
    when that set is unbounded (ȳ is within t standard errors of 0)."""
    a = mean_y**2 - t**2 * var_y
    b = mean_x * mean_y - t**2 * cov
    c = mean_x**2 - t**2 * var_x
    discriminant = b * b - a * c
    if not (a > 0 and discriminant >= 0):
        return math.nan, math.nan
    root = math.sqrt(discriminant)
    return (b - root) / a, (b + root) / a


def ratio_status(low: float, high: float, band: tuple[float, float] = DEFAULT_BAND) -> DisparityStatus:
    """FLAG / WITHIN / INCONCLUSIVE from the interval; INSUFFICIENT when there is none or it covers
    the whole band (neither outcome is reachable from this evidence)."""
    covers_band = low < band[0] and high > band[1]
    return DisparityStatus.from_interval(low, high, band, decidable=not covers_band)


def minimum_detectable_ratio(
    se_log: float, df: float, *, band: tuple[float, float] = DEFAULT_BAND, confidence: float = 0.95, power: float = 0.8
) -> tuple[float, float]:
    """True ratios (below, above the band) that the interval FLAGs with probability ``power``.

    A FLAG below the band needs the upper limit, about log R̂ + t_{1−α/2}·se, under log L; with
    log R̂ ~ log R + t_df·se that has probability ``power`` at log R = log L − (t_{1−α/2} + t_power)·se.
    ``df`` = inf gives the normal quantiles."""
    if not (np.isfinite(se_log) and se_log > 0 and df > 0):
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    shift = (stats.t.ppf(1.0 - tail, df) + stats.t.ppf(power, df)) * se_log
    return float(band[0] * math.exp(-shift)), float(band[1] * math.exp(shift))


def paired_values(x: np.ndarray, x_pairs: np.ndarray, y: np.ndarray, y_pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The group's and the reference's mean value per shared pair id, aligned (prompts without a
    pair id, or with a non-finite value, are left out)."""

    def by_pair(values: np.ndarray, pairs: np.ndarray) -> dict[Any, float]:
        sums: dict[Any, list[float]] = {}
        for value, pair in zip(values, pairs):
            if pair is None or (isinstance(pair, float) and math.isnan(pair)) or not np.isfinite(value):
                continue
            entry = sums.setdefault(pair, [0.0, 0.0])
            entry[0] += float(value)
            entry[1] += 1.0
        return {p: s / n for p, (s, n) in sums.items()}

    gx, gy = by_pair(x, x_pairs), by_pair(y, y_pairs)
    shared = [p for p in gx if p in gy]
    return np.array([gx[p] for p in shared], dtype=float), np.array([gy[p] for p in shared], dtype=float)


def _fieller(
    x_mean: float, y_mean: float, var_x: float, var_y: float, cov: float, df: float, confidence: float
) -> tuple[float, float, float]:
    t = float(stats.t.ppf(1.0 - (1.0 - confidence) / 2.0, df))
    low, high = fieller_interval(x_mean, y_mean, var_x, var_y, cov, t)
    if not (x_mean > 0 and y_mean > 0):  # a zero mean (no acceptance at all): no log-scale error
        return low, high, math.nan
    rel = var_x / x_mean**2 + var_y / y_mean**2 - 2.0 * cov / (x_mean * y_mean)
    se_log = math.sqrt(rel) if rel >= 0 else math.nan
    return low, high, se_log


def ratio_interval(
    x: np.ndarray,
    y: np.ndarray,
    *,
    x_pairs: np.ndarray | None = None,
    y_pairs: np.ndarray | None = None,
    band: tuple[float, float] = DEFAULT_BAND,
    confidence: float = 0.95,
    power: float = 0.8,
    min_pairs: int = MIN_PAIRS,
) -> RatioInterval:
    """The ratio of group values ``x`` to reference values ``y`` (one per prompt), by the method
    the design supports (module docstring). Paired when pair ids are given and at least ``min_pairs`` are shared covering at least half of
    the smaller side."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    keep_x, keep_y = np.isfinite(x), np.isfinite(y)
    n_x, n_y = int(keep_x.sum()), int(keep_y.sum())

    def result(
        ratio: float, low: float, high: float, method: str, se_log: float, df: float, n_pairs: int = 0, reason: str | None = None
    ) -> RatioInterval:
        low = max(low, 0.0) if np.isfinite(low) else low  # per-prompt values are ≥ 0, so is their ratio
        status = ratio_status(low, high, band)
        if status is DisparityStatus.INSUFFICIENT and reason is None:
            reason = (
                "the interval covers the whole band"
                if np.isfinite(low) and np.isfinite(high)
                else "the reference mean is not distinguishable from 0 (unbounded Fieller interval)"
            )
        mdr = minimum_detectable_ratio(se_log, df, band=band, confidence=confidence, power=power)
        return RatioInterval(
            float(ratio),
            float(low),
            float(high),
            confidence,
            method,
            status,
            float(se_log),
            float(df),
            n_x,
            n_y,
            n_pairs,
            mdr[0],
            mdr[1],
            reason,
        )

    if x_pairs is not None and y_pairs is not None:
        px, py = paired_values(x, np.asarray(x_pairs, dtype=object), y, np.asarray(y_pairs, dtype=object))
        if px.size >= min_pairs and px.size >= 0.5 * min(n_x, n_y):
            n = px.size
            cov = np.cov(px, py, ddof=1)
            mean_x, mean_y = float(px.mean()), float(py.mean())
            low, high, se_log = _fieller(mean_x, mean_y, cov[0, 0] / n, cov[1, 1] / n, cov[0, 1] / n, n - 1, confidence)
            ratio = mean_x / mean_y if mean_y else math.nan
            return result(ratio, low, high, PAIRED_FIELLER, se_log, n - 1, n_pairs=n)
    if n_x < 2 or n_y < 2:
        return result(
            math.nan,
            math.nan,
            math.nan,
            WELCH_FIELLER,
            math.nan,
            math.nan,
            reason=f"{n_x} group and {n_y} reference prompts with a value: an interval needs at least 2 on each side",
        )
    xs, ys = x[keep_x], y[keep_y]
    mean_x, mean_y = float(xs.mean()), float(ys.mean())
    var_x, var_y = float(xs.var(ddof=1)) / n_x, float(ys.var(ddof=1)) / n_y
    ratio = mean_x / mean_y if mean_y else math.nan
    # Welch–Satterthwaite degrees of freedom of x̄ − R·ȳ, at the point estimate of R.
    r2 = ratio**2 if np.isfinite(ratio) else 1.0
    denominator = var_x**2 / (n_x - 1) + r2**2 * var_y**2 / (n_y - 1)
    df = (var_x + r2 * var_y) ** 2 / denominator if denominator > 0 else float(n_x + n_y - 2)
    low, high, se_log = _fieller(mean_x, mean_y, var_x, var_y, 0.0, df, confidence)
    return result(ratio, low, high, WELCH_FIELLER, se_log, df)
