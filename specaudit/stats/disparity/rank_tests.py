"""Rank tests on per-prompt values (supporting diagnostics beside the ratio intervals)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from specaudit.stats.power import z_shift


@dataclass(frozen=True)
class KruskalResult:
    """Kruskal–Wallis H test across groups on per-prompt values."""

    statistic: float
    pvalue: float
    n_groups: int
    n_prompts: int


@dataclass(frozen=True)
class PairwiseResult:
    """One group against the reference group on per-prompt values.

    ``effect_size`` is the rank-biserial correlation, positive when the group is higher: for
    Mann–Whitney it equals Cliff's δ = P(X > Y) − P(X < Y); for Wilcoxon it is the matched-pairs
    rank-biserial (R+ − R−) / (R+ + R−)."""

    test: str
    statistic: float
    pvalue: float
    effect_size: float
    effect_size_name: str
    n_group: int
    n_reference: int
    n_pairs: int


def kruskal_test(samples: Sequence[np.ndarray]) -> KruskalResult:
    """Kruskal–Wallis across the non-empty samples (p = 1 when fewer than two, or all equal)."""
    samples = [np.asarray(s, dtype=float)[np.isfinite(np.asarray(s, dtype=float))] for s in samples]
    samples = [s for s in samples if s.size]
    total = int(sum(s.size for s in samples))
    if len(samples) < 2:
        return KruskalResult(np.nan, np.nan, len(samples), total)
    pooled = np.concatenate(samples)
    if np.all(pooled == pooled[0]):  # every value identical (greedy n-gram runs): no evidence of any difference
        return KruskalResult(0.0, 1.0, len(samples), total)
    result = stats.kruskal(*samples)
    pvalue = float(result.pvalue) if np.isfinite(result.pvalue) else 1.0
    return KruskalResult(float(result.statistic), pvalue, len(samples), total)


def pairwise_test(
    group: np.ndarray,
    reference: np.ndarray,
    *,
    group_pairs: np.ndarray | None = None,
    reference_pairs: np.ndarray | None = None,
    min_pairs: int = 6,
) -> PairwiseResult:
    """Mann–Whitney U of ``group`` against ``reference``, or the Wilcoxon signed-rank test on
    parallel prompts when pair ids are given and at least ``min_pairs`` pairs are shared and they
    cover at least half of the smaller sample. Several prompts of one pair id in a group are
    averaged."""
    group = np.asarray(group, dtype=float)
    reference = np.asarray(reference, dtype=float)
    keep_g, keep_r = np.isfinite(group), np.isfinite(reference)
    n_g, n_r = int(keep_g.sum()), int(keep_r.sum())
    if group_pairs is not None and reference_pairs is not None:
        g = _mean_by_pair(group[keep_g], np.asarray(group_pairs, dtype=object)[keep_g])
        r = _mean_by_pair(reference[keep_r], np.asarray(reference_pairs, dtype=object)[keep_r])
        shared = [p for p in g if p in r]
        if len(shared) >= min_pairs and len(shared) >= 0.5 * min(n_g, n_r):
            return _wilcoxon(np.array([g[p] - r[p] for p in shared]), n_g, n_r)
    x, y = group[keep_g], reference[keep_r]
    if x.size == 0 or y.size == 0:
        return PairwiseResult("mannwhitneyu", np.nan, np.nan, np.nan, "rank_biserial", n_g, n_r, 0)
    result = stats.mannwhitneyu(x, y, alternative="two-sided")
    # U counts pairs with x > y plus half the ties, so 2U/(nm) − 1 = P(X>Y) − P(X<Y).
    delta = 2.0 * float(result.statistic) / (x.size * y.size) - 1.0
    pvalue = float(result.pvalue) if np.isfinite(result.pvalue) else 1.0
    return PairwiseResult("mannwhitneyu", float(result.statistic), pvalue, delta, "rank_biserial", n_g, n_r, 0)


def _mean_by_pair(values: np.ndarray, pairs: np.ndarray) -> dict[Any, float]:
    """Mean value per pair id (prompts without a pair id are left out)."""
    sums: dict[Any, list[float]] = {}
    for value, pair in zip(values, pairs):
        if pair is None or (isinstance(pair, float) and math.isnan(pair)):
            continue
        entry = sums.setdefault(pair, [0.0, 0.0])
        entry[0] += value
        entry[1] += 1.0
    return {pair: total / count for pair, (total, count) in sums.items()}


def _wilcoxon(differences: np.ndarray, n_g: int, n_r: int) -> PairwiseResult:
    nonzero = differences[differences != 0]
    if nonzero.size == 0:
        return PairwiseResult("wilcoxon", 0.0, 1.0, 0.0, "matched_pairs_rank_biserial", n_g, n_r, differences.size)
    ranks = stats.rankdata(np.abs(nonzero))
    plus, minus = ranks[nonzero > 0].sum(), ranks[nonzero < 0].sum()
    result = stats.wilcoxon(nonzero, alternative="two-sided")
    pvalue = float(result.pvalue) if np.isfinite(result.pvalue) else 1.0
    return PairwiseResult(
        "wilcoxon",
        float(result.statistic),
        pvalue,
        float((plus - minus) / (plus + minus)),
        "matched_pairs_rank_biserial",
        n_g,
        n_r,
        differences.size,
    )


# Asymptotic relative efficiency of the rank tests to the t-test: 0.864 is the minimum over all
# continuous distributions (Hodges & Lehmann 1956), so dividing the sample size by it is safe.
RANK_TEST_EFFICIENCY = 0.864


def minimum_detectable_difference(
    sd: float,
    n_group: int,
    n_reference: int | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    n_comparisons: int = 1,
    efficiency: float = RANK_TEST_EFFICIENCY,
) -> float:
    """Smallest difference in mean per-prompt value a two-sided rank test detects with ``power``.

    Normal approximation for a difference of means, (z_{1−α'/2} + z_power)·sd·√(1/n₁ + 1/n₂),
    with α' = α / n_comparisons (the first, strictest step of Holm) and sample sizes scaled by the
    rank test's efficiency against the t-test. With ``n_reference=None`` it is the paired
    version: ``sd`` of the differences over ``n_group`` pairs. An approximation for planning and
    for saying what a null result rules out, not an exact power calculation."""
    z = z_shift(alpha, power, max(1, n_comparisons))
    if n_group < 1 or (n_reference is not None and n_reference < 1) or not np.isfinite(sd):
        return float("nan")
    spread = 1.0 / n_group if n_reference is None else 1.0 / n_group + 1.0 / n_reference
    return float(z * sd * math.sqrt(spread / efficiency))
