"""The identity-draft check: with the target as its own draft (q = p), a correct verifier's
acceptance is known before the run, so a shortfall is proof of a broken verifier, without any
statistics of the output.

The rule of the engine (the registry's `EngineSpec.rejection_sampling`) gives each drafted
position t the verifier judged (a "tested" position: every earlier draft of its step was kept)
the chance a_t that a correct verifier keeps it:

- rejection sampling keeps y ~ q with probability min(1, p(y)/q(y)) = 1: a_t = 1 at any
  temperature, greedy included;
- a greedy draft kept on a match (llama.cpp: the target's own sample must equal argmax q) keeps
  it with probability p_t(argmax q_t) = max p_t when q = p: a_t = max p_t, from the target's
  warped distribution along the output (1 at greedy).

Given the tested positions, the rejections R = tested − accepted are a sum of Bernoulli(1 − a_t):
a Poisson-binomial law, computed exactly here (`_poisson_binomial_pmf`). Which positions are
tested and their a_t depend on earlier draws, so the law is exact given them and the sum
Σ (kept_t − a_t) is a martingale; `bench/identity_calibration.py` measures the false-alarm rate
(docs/identity.md).

Numerics: the draft's distribution is computed one token a call and the verifier's in a batch of
k + 1, so q and p differ by float rounding and a correct rejection sampler rejects now and then
(1 − min(1, p/q) > 0). `tolerance` ε allows that many extra rejections per tested position:
the lower side is judged against rejection chances 1 − a_t + ε, the upper side (too many kept,
possible only for a rule with a_t < 1) against 1 − a_t − ε.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from specaudit.contracts.status import CheckStatus
from specaudit.stats._results import ConfidenceInterval

REJECTION_SAMPLING = "rejection sampling"
GREEDY_MATCH = "greedy match"
# Extra rejection chance per tested position allowed for float rounding between the draft's and
# the verifier's call shapes. Measured with the reference engine in float32 (docs/identity.md):
# mean 1 − min(1, p/q) over drafted tokens of 2.8e-7 (tiny pair) and 1.9e-6 (embedded pair, t=1),
# largest single position 3e-5; ε = 1e-3 is about 500 times the larger mean, 33 times the largest.
DEFAULT_TOLERANCE = 1e-3
# Above this many uncertain positions the exact law is replaced by its normal approximation
# (the exact convolution costs n² operations).
_EXACT_LIMIT = 20_000


@dataclass(frozen=True)
class IdentityDraftResult:
    """The identity check of one engine at one setting (scipy.stats style).

    `statistic` is the observed acceptance accepted / tested; `confidence_interval()` the
    acceptance a correct verifier reaches with probability 1 − α (α split over two sides for a
    rule that can also over-accept); `pvalue` of H0 "the verifier keeps each tested draft with
    its rule's a_t (within ε)"."""

    rule: str
    accepted: int
    tested: int
    expected: float  # Σ a_t: accepted drafts a correct verifier averages
    low: int  # accepted counts a correct verifier reaches: [low, high]
    high: int
    pvalue: float
    alpha: float
    tolerance: float
    method: str

    @property
    def statistic(self) -> float:
        return self.accepted / self.tested if self.tested else math.nan

    @property
    def expected_rate(self) -> float:
        return self.expected / self.tested if self.tested else math.nan

    def confidence_interval(self) -> ConfidenceInterval:
        if not self.tested:
            return ConfidenceInterval(math.nan, math.nan)
        return ConfidenceInterval(self.low / self.tested, self.high / self.tested)

    @property
    def verdict(self) -> CheckStatus | str:
        if not self.tested:
            return "skipped"
        return CheckStatus.FAIL if self.pvalue < self.alpha else CheckStatus.PASS

    def describe(self) -> str:
        """One line: observed against expected, with the interval."""
        if not self.tested:
            return "no drafted position was judged (nothing to check)"
        interval = self.confidence_interval()
        return (
            f"accepted {self.accepted} of {self.tested} judged drafts ({self.statistic:.4f}); a correct {self.rule} verifier "
            f"keeps {self.expected_rate:.4f} on average, {interval.low:.4f}-{interval.high:.4f} at alpha {self.alpha:g} "
            f"(p = {self.pvalue:.3g}, tolerance {self.tolerance:g} per draft)"
        )

    def to_dict(self) -> dict[str, Any]:
        interval = self.confidence_interval()
        finite = lambda x: float(x) if math.isfinite(x) else None  # noqa: E731 - strict JSON
        return {
            "rule": self.rule,
            "accepted": self.accepted,
            "tested": self.tested,
            "acceptance": finite(self.statistic),
            "expected": finite(self.expected_rate),
            "interval": [finite(interval.low), finite(interval.high)],
            "pvalue": finite(self.pvalue),
            "alpha": self.alpha,
            "tolerance": self.tolerance,
            "method": self.method,
            "verdict": str(self.verdict),
        }


def identity_acceptance_test(
    accepted: int,
    position_accept: Sequence[float] | np.ndarray,
    *,
    rule: str = REJECTION_SAMPLING,
    alpha: float = 0.05,
    tolerance: float = DEFAULT_TOLERANCE,
) -> IdentityDraftResult:
    """Test `accepted` kept drafts against the chances `position_accept` (a_t of every tested
    position) of a correct verifier with q = p. Rejection sampling is tested on one side (it
    cannot keep more than every draft); a greedy-match rule on both, α/2 each."""
    if rule not in (REJECTION_SAMPLING, GREEDY_MATCH):
        raise ValueError(f"rule must be {REJECTION_SAMPLING!r} or {GREEDY_MATCH!r}, got {rule!r}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must lie in [0, 1), got {tolerance}")
    chances = np.clip(np.asarray(position_accept, dtype=np.float64), 0.0, 1.0)
    tested = int(chances.size)
    if not 0 <= accepted <= tested:
        raise ValueError(f"accepted {accepted} is not a count of the {tested} tested positions")
    if tested == 0:
        return IdentityDraftResult(rule, 0, 0, 0.0, 0, 0, math.nan, alpha, tolerance, "no tested position")
    rejected = tested - accepted
    two_sided = rule == GREEDY_MATCH
    side = alpha / 2 if two_sided else alpha
    more = np.minimum(1.0 - chances + tolerance, 1.0)  # the most rejection H0 allows at each position
    fewer = np.maximum(1.0 - chances - tolerance, 0.0)  # the least
    most, least = _Law(more), _Law(fewer)
    too_many = most.at_least(rejected)  # P(R >= rejected) at the most rejection allowed
    low = tested - most.largest_with_tail(side)
    if two_sided:
        too_few = least.at_most(rejected)  # P(R <= rejected) at the least rejection allowed
        pvalue = min(1.0, 2 * min(too_many, too_few))
        high = tested - least.smallest_with_head(side)
    else:
        pvalue, high = too_many, tested
    method = most.method
    return IdentityDraftResult(
        rule, int(accepted), tested, float(chances.sum()), int(low), int(high), float(pvalue), alpha, tolerance, method
    )


def _poisson_binomial_pmf(chances: np.ndarray) -> np.ndarray:
    """P(sum = j) for j = 0..n of independent Bernoulli(chances); certain outcomes (0 or 1) only shift it."""
    certain = int((chances >= 1.0).sum())
    uncertain = chances[(chances > 0.0) & (chances < 1.0)]
    pmf = np.zeros(uncertain.size + 1)
    pmf[0] = 1.0
    for i, chance in enumerate(uncertain, start=1):
        pmf[1 : i + 1] = pmf[1 : i + 1] * (1.0 - chance) + pmf[:i] * chance
        pmf[0] *= 1.0 - chance
    return np.concatenate([np.zeros(certain), pmf, np.zeros(int((chances <= 0.0).sum()))])


class _Law:
    """The number of rejections under H0: exact, or its normal approximation past _EXACT_LIMIT uncertain positions."""

    def __init__(self, chances: np.ndarray) -> None:
        self.exact = int(((chances > 0.0) & (chances < 1.0)).sum()) <= _EXACT_LIMIT
        if self.exact:
            pmf = _poisson_binomial_pmf(chances)
            self.head = np.cumsum(pmf)  # head[j] = P(R <= j)
            self.tail = np.cumsum(pmf[::-1])[::-1]  # tail[j] = P(R >= j)
            self.method = "exact Poisson-binomial"
        else:
            self.mean, self.sd = float(chances.sum()), math.sqrt(float((chances * (1.0 - chances)).sum()))
            self.method = "normal approximation to the Poisson-binomial"

    def at_least(self, count: int) -> float:
        if self.exact:
            return float(min(1.0, self.tail[count])) if count < self.tail.size else 0.0
        return float(_st.norm.sf((count - 0.5 - self.mean) / self.sd))

    def at_most(self, count: int) -> float:
        if self.exact:
            return float(min(1.0, self.head[min(count, self.head.size - 1)]))
        return float(_st.norm.cdf((count + 0.5 - self.mean) / self.sd))

    def largest_with_tail(self, side: float) -> int:
        """The most rejections whose upper-tail chance is still >= side."""
        if self.exact:
            return int(np.nonzero(self.tail >= side)[0].max())
        return int(math.floor(self.mean + 0.5 + self.sd * _st.norm.isf(side)))

    def smallest_with_head(self, side: float) -> int:
        """The fewest rejections whose lower-tail chance is still >= side."""
        if self.exact:
            return int(np.nonzero(self.head >= side)[0].min())
        return max(0, int(math.ceil(self.mean - 0.5 - self.sd * _st.norm.isf(side))))


__all__ = ["DEFAULT_TOLERANCE", "GREEDY_MATCH", "REJECTION_SAMPLING", "IdentityDraftResult", "identity_acceptance_test"]
