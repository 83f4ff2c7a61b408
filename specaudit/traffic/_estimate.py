"""Ratio metrics per group, adjusted by stratification, with request-clustered standard errors.

Both metrics are ratios of per-request sums: acceptance = Σ accepted / Σ proposed, latency per
token = Σ latency / Σ output tokens. A request's tokens are not independent (one prompt, one
load), so the variance treats the request as the unit (the ratio estimator's linearisation,
i.e. a cluster-robust variance with one cluster per request): V(Y/X) = n/(n-1) Σ (y - R x)² / X².

A comparison of group A with a reference R (the other groups in the same period, or the same
group in the baseline) is direct standardisation on A's mix: within each stratum the two ratios
are compared, and strata are weighed by A's share of the denominator there. Strata that only one
side has are left out (`overlap` says what share of A's denominator was compared). Everything
works on arrays whose last axis is the stratum, so a simulation computes 10,000 looks at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_REQUESTS = 10  # a stratum is compared once each side has this many requests there: fewer make its variance too noisy for a normal bound


@dataclass(frozen=True)
class Sums:
    """Per-stratum sums over requests (arrays of one shape, last axis = stratum)."""

    n: np.ndarray
    x: np.ndarray
    y: np.ndarray
    xx: np.ndarray
    yy: np.ndarray
    xy: np.ndarray

    def __sub__(self, other: Sums) -> Sums:
        return Sums(*(getattr(self, f) - getattr(other, f) for f in FIELDS))

    def total(self) -> Sums:
        return Sums(*(getattr(self, f).sum(axis=-1, keepdims=True) for f in FIELDS))


FIELDS = ("n", "x", "y", "xx", "yy", "xy")


def _ratio_and_variance(s: Sums) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(s.x > 0, s.y / np.where(s.x > 0, s.x, 1), np.nan)
        residual = s.yy - 2 * rate * s.xy + rate**2 * s.xx
        correction = np.where(s.n > 1, s.n / np.maximum(s.n - 1, 1), np.nan)
        variance = np.maximum(residual, 0) * correction / np.where(s.x > 0, s.x, 1) ** 2
    return rate, variance


@dataclass(frozen=True)
class Estimate:
    """A rate with its standard error (arrays)."""

    rate: np.ndarray
    se: np.ndarray


def overall(s: Sums) -> Estimate:
    """The group's own rate over all its strata (unadjusted)."""
    rate, variance = _ratio_and_variance(s.total())
    return Estimate(rate[..., 0], np.sqrt(variance[..., 0]))


@dataclass(frozen=True)
class Comparison:
    """A versus R on A's mix of strata: log(A / E) with its standard error, and the unadjusted log ratio."""

    adjusted: np.ndarray  # rate of A on the compared strata
    expected: np.ndarray  # what R has on A's mix
    log_ratio: np.ndarray
    se: np.ndarray
    crude_log_ratio: np.ndarray  # A's rate over R's, all strata, no adjustment
    overlap: np.ndarray  # share of A's denominator in strata R also has


def compare(a: Sums, r: Sums) -> Comparison:
    rate_a, var_a = _ratio_and_variance(a)
    rate_r, var_r = _ratio_and_variance(r)
    usable = (a.n >= MIN_REQUESTS) & (r.n >= MIN_REQUESTS) & (a.x > 0) & (r.x > 0)
    weight_raw = np.where(usable, a.x, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        total_weight = weight_raw.sum(axis=-1, keepdims=True)
        w = weight_raw / np.where(total_weight > 0, total_weight, 1)
        adjusted = np.nansum(np.where(usable, w * rate_a, 0), axis=-1)
        expected = np.nansum(np.where(usable, w * rate_r, 0), axis=-1)
        var_adj = np.nansum(np.where(usable, w**2 * var_a, 0), axis=-1)
        var_exp = np.nansum(np.where(usable, w**2 * var_r, 0), axis=-1)
        ok = (total_weight[..., 0] > 0) & (adjusted > 0) & (expected > 0)
        log_ratio = np.where(ok, np.log(np.where(ok, adjusted / np.where(expected > 0, expected, 1), 1)), np.nan)
        se = np.where(ok, np.sqrt(var_adj / np.where(ok, adjusted, 1) ** 2 + var_exp / np.where(ok, expected, 1) ** 2), np.nan)
        crude_a, crude_r = overall(a).rate, overall(r).rate
        crude = np.log(crude_a / crude_r)
        overlap = total_weight[..., 0] / np.where(a.x.sum(axis=-1) > 0, a.x.sum(axis=-1), 1)
    return Comparison(adjusted, expected, log_ratio, se, crude, overlap)
