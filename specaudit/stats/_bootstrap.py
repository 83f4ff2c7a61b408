"""The cluster bootstrap: specaudit's one bootstrap implementation.

Tokens of one prompt are correlated (every step of a prompt shares that prompt's difficulty for
the draft), so the unit of resampling is the prompt, never the token or the step: resampling
tokens would make intervals far too narrow. Resampling is stratified: prompts are redrawn
within each stratum (each group), so every replicate keeps the group sizes of the data and
groups stay independent of each other, as they are in the design.

A replicate is written as a weight vector: replicate b draws prompt j ``W[b, j]`` times. A
statistic is then a function ``statistic(W) -> array`` of a weight matrix ``W`` of shape
``(m, n_clusters)`` returning shape ``(m, ...)``. Ratio estimators become one matrix product
for all replicates at once, and the jackknife that BCa needs is the same function evaluated on
leave-one-cluster-out weights. scipy.stats.bootstrap resamples observations of independent
samples and cannot keep clusters and strata together in one vectorised call, hence this module.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special

from specaudit.errors import InputError
from specaudit.stats._results import ConfidenceInterval  # low/high hold arrays for vector statistics

Statistic = Callable[[np.ndarray], np.ndarray]
Method = Literal["percentile", "bca"]

# Rows of the weight matrix evaluated at once: bounds memory at about 8 * _CHUNK_CELLS bytes.
_CHUNK_CELLS = 4_000_000


@dataclass(frozen=True)
class BootstrapResult:
    """Point estimate and bootstrap interval (arrays when the statistic is vector-valued)."""

    statistic: float | np.ndarray
    ci_low: float | np.ndarray
    ci_high: float | np.ndarray
    standard_error: float | np.ndarray
    confidence_level: float
    method: str
    n_boot: int

    def confidence_interval(self) -> ConfidenceInterval:
        return ConfidenceInterval(self.ci_low, self.ci_high)


def _check_options(n_boot: int, confidence_level: float, method: str) -> None:
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise InputError(f"bootstrap: n_boot must be a positive integer, got {n_boot!r}.")
    if not 0.0 < confidence_level < 1.0:
        raise InputError(f"bootstrap: the confidence level must lie strictly between 0 and 1, got {confidence_level!r}.")
    if method not in ("percentile", "bca"):
        raise InputError(f"bootstrap: method must be 'percentile' or 'bca', got {method!r}.")


@dataclass(frozen=True)
class Replicates:
    """A statistic's point estimate, its bootstrap replicates and (for BCa) its jackknife values.

    ``map`` carries all three through a derived quantity (a difference or ratio between groups,
    a minimum over groups), so derived quantities get intervals from the same replicates and
    stay consistent with each other.
    """

    estimate: np.ndarray
    boot: np.ndarray
    jackknife: np.ndarray | None = None

    def map(self, fn: Callable[[np.ndarray], np.ndarray]) -> Replicates:
        """Apply ``fn`` (leading axis = replicate) to estimate, replicates and jackknife values."""
        with np.errstate(all="ignore"):
            estimate = np.asarray(fn(self.estimate[None, ...]))[0]
            boot = np.asarray(fn(self.boot))
            jack = None if self.jackknife is None else np.asarray(fn(self.jackknife))
        return Replicates(estimate, boot, jack)

    def interval(self, confidence_level: float = 0.95, method: Method = "percentile") -> BootstrapResult:
        """Two-sided interval. Replicates that are NaN (an empty resampled denominator) are
        dropped; if more than half are NaN the interval is NaN rather than a misleading number."""
        _check_options(max(1, len(self.boot)), confidence_level, method)
        if method == "bca" and self.jackknife is None:
            raise InputError("bootstrap: BCa needs jackknife values; build the replicates with jackknife=True.")
        estimate = np.asarray(self.estimate, dtype=float)
        shape = estimate.shape
        boot = np.asarray(self.boot, dtype=float).reshape(len(self.boot), -1)
        flat_est = estimate.reshape(-1)
        jack = None if self.jackknife is None else np.asarray(self.jackknife, dtype=float).reshape(len(self.jackknife), -1)
        tail = (1.0 - confidence_level) / 2.0
        finite = np.isfinite(boot)
        enough = np.isfinite(flat_est) & (finite.sum(axis=0) >= max(2, boot.shape[0] // 2))
        low = np.full(flat_est.shape, np.nan)
        high = np.full(flat_est.shape, np.nan)
        se = np.full(flat_est.shape, np.nan)
        if enough.any():
            kept = np.where(finite[:, enough], boot[:, enough], np.nan)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                se[enough] = np.nanstd(kept, axis=0, ddof=1)
                if method == "percentile":
                    quantile = np.quantile if finite[:, enough].all() else np.nanquantile
                    low[enough], high[enough] = quantile(kept, [tail, 1.0 - tail], axis=0)
        if method == "bca":
            for j in np.flatnonzero(enough):
                column = boot[finite[:, j], j]
                levels = _bca_levels(flat_est[j], column, jack[:, j], tail)
                low[j], high[j] = np.quantile(column, levels)
        reshape = (lambda a: float(a[0])) if shape == () else (lambda a: a.reshape(shape))
        return BootstrapResult(
            statistic=float(estimate) if shape == () else estimate,
            ci_low=reshape(low),
            ci_high=reshape(high),
            standard_error=reshape(se),
            confidence_level=confidence_level,
            method=method,
            n_boot=len(self.boot),
        )


def _bca_levels(estimate: float, boot: np.ndarray, jack: np.ndarray, tail: float) -> tuple[float, float]:
    """Bias-corrected and accelerated quantile levels (Efron 1987). Falls back to the percentile
    levels where the correction is undefined (all replicates on one side of the estimate)."""
    # Ties count half, so discrete statistics (quantiles of few prompts) get no spurious bias.
    below = (np.sum(boot < estimate) + 0.5 * np.sum(boot == estimate)) / boot.size
    if not 0.0 < below < 1.0:
        return tail, 1.0 - tail
    z0 = special.ndtri(below)
    jack = jack[np.isfinite(jack)]
    deviations = jack.mean() - jack if jack.size else np.zeros(1)
    denominator = 6.0 * np.sum(deviations**2) ** 1.5
    acceleration = np.sum(deviations**3) / denominator if denominator > 0 else 0.0
    levels = []
    for z_alpha in (special.ndtri(tail), special.ndtri(1.0 - tail)):
        shifted = z0 + z_alpha
        levels.append(float(special.ndtr(z0 + shifted / (1.0 - acceleration * shifted))))
    return levels[0], levels[1]


def _strata_members(strata: np.ndarray | None, n_clusters: int) -> list[np.ndarray]:
    if strata is None:
        return [np.arange(n_clusters)]
    strata = np.asarray(strata)
    if strata.shape != (n_clusters,):
        raise InputError(f"bootstrap: strata must give one label per cluster ({n_clusters}), got shape {strata.shape}.")
    _, inverse = np.unique(strata, return_inverse=True)
    return [np.flatnonzero(inverse == s) for s in range(inverse.max() + 1)] if n_clusters else []


def bootstrap_weights(n_clusters: int, n_boot: int, rng: np.random.Generator, strata: np.ndarray | None = None) -> np.ndarray:
    """Weights (n_boot, n_clusters): how often each cluster is drawn, drawing n_s clusters with
    replacement within each stratum s of size n_s."""
    weights = np.zeros((n_boot, n_clusters))
    rows = np.arange(n_boot)[:, None]
    for members in _strata_members(strata, n_clusters):
        size = members.size
        draws = rng.integers(0, size, size=(n_boot, size))
        counts = np.bincount((draws + rows * size).ravel(), minlength=n_boot * size)
        weights[:, members] = counts.reshape(n_boot, size)
    return weights


def cluster_replicates(
    statistic: Statistic,
    n_clusters: int,
    *,
    strata: np.ndarray | None = None,
    n_boot: int = 1000,
    seed: int | np.random.Generator | None = 0,
    jackknife: bool = False,
) -> Replicates:
    """Evaluate ``statistic`` on the data (all weights 1), on ``n_boot`` stratified cluster
    resamples and, if asked, on the n leave-one-cluster-out jackknife weights."""
    _check_options(n_boot, 0.95, "percentile")
    if n_clusters < 1:
        raise InputError("bootstrap: there are no prompts to resample; check that the records are not empty.")
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, _CHUNK_CELLS // n_clusters)
    estimate = np.asarray(statistic(np.ones((1, n_clusters))))[0]
    chunks = []
    done = 0
    while done < n_boot:
        rows = min(rows_per_chunk, n_boot - done)
        chunks.append(np.asarray(statistic(bootstrap_weights(n_clusters, rows, rng, strata))))
        done += rows
    boot = np.concatenate(chunks, axis=0)
    jack = None
    if jackknife:
        parts = []
        for start in range(0, n_clusters, rows_per_chunk):
            stop = min(n_clusters, start + rows_per_chunk)
            weights = np.ones((stop - start, n_clusters))
            weights[np.arange(stop - start), np.arange(start, stop)] = 0.0
            parts.append(np.asarray(statistic(weights)))
        jack = np.concatenate(parts, axis=0)
    return Replicates(estimate, boot, jack)


def cluster_bootstrap(
    statistic: Statistic,
    n_clusters: int,
    *,
    strata: np.ndarray | None = None,
    n_boot: int = 1000,
    confidence_level: float = 0.95,
    method: Method = "percentile",
    seed: int | np.random.Generator | None = 0,
) -> BootstrapResult:
    """Cluster (prompt) bootstrap interval of ``statistic(weights)``; seeded and reproducible.

    >>> values = np.array([0.2, 0.4, 0.6, 0.8])
    >>> mean = lambda w: (w @ values) / w.sum(axis=1)
    >>> cluster_bootstrap(mean, 4, n_boot=200).statistic
    0.5
    """
    _check_options(n_boot, confidence_level, method)
    replicates = cluster_replicates(statistic, n_clusters, strata=strata, n_boot=n_boot, seed=seed, jackknife=(method == "bca"))
    return replicates.interval(confidence_level, method)
