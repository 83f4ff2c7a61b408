"""Small frozen result objects shared by the equivalence statistics (scipy.stats style).

Every hypothesis test returns an object with `statistic`, `pvalue` and a `verdict`; where an
interval is meaningful there is a `confidence_interval()`. Verdicts use the gate's vocabulary
(specaudit.contracts.CheckStatus): PASS (not rejected at `alpha`), FAIL (rejected), and "skipped"
(no data to test).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as _st

from specaudit.contracts.status import CheckStatus

# Verdict words: the check statuses, so a test's verdict is spelt as the gate spells it.
PASS, FAIL, SKIPPED = CheckStatus.PASS, CheckStatus.FAIL, "skipped"


def _verdict(pvalue: float, n: int, alpha: float) -> str:
    if n == 0 or not math.isfinite(pvalue):
        return SKIPPED
    return FAIL if pvalue < alpha else PASS


@dataclass(frozen=True)
class ConfidenceInterval:
    low: float
    high: float


@dataclass(frozen=True)
class StatTestResult:
    """One hypothesis test of "the sampler follows the target" (H0).

    `n` counts the units the test used (tokens, samples, drafted positions); `method` says how
    the p-value was obtained (e.g. "asymptotic", "permutation (999)").
    """

    name: str
    statistic: float
    pvalue: float
    n: int
    alpha: float = 0.05
    method: str = ""

    @property
    def verdict(self) -> str:
        return _verdict(self.pvalue, self.n, self.alpha)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "statistic": _finite_or_none(self.statistic),
            "pvalue": _finite_or_none(self.pvalue),
            "n": int(self.n),
            "method": self.method,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class ZTestResult(StatTestResult):
    """A standardised martingale sum z = Σ d_t / sqrt(Σ v_t), N(0, 1) under H0 (two-sided p).

    `confidence_interval()` is for the mean per-unit standardised shift μ = z / sqrt(n): the
    effect size the power planner (`specaudit.stats.power`) speaks in.
    """

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        if self.n == 0 or not math.isfinite(self.statistic):
            return ConfidenceInterval(math.nan, math.nan)
        half = _st.norm.ppf(0.5 + confidence_level / 2)
        root_n = math.sqrt(self.n)
        return ConfidenceInterval((self.statistic - half) / root_n, (self.statistic + half) / root_n)


@dataclass(frozen=True)
class PITResult(StatTestResult):
    """Uniformity of randomised PIT values: Anderson–Darling (`statistic`, `pvalue`) with the
    Kolmogorov–Smirnov test alongside (`ks`), and histogram counts on equal bins for plots."""

    ks: StatTestResult | None = None
    histogram: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["ks"] = self.ks.to_dict() if self.ks is not None else None
        out["histogram"] = list(self.histogram)
        return out


@dataclass(frozen=True)
class ImpossibleTokens:
    """Emitted tokens whose warped target probability is exactly 0: proof of a bug.

    `offenders` lists (key, position, token) for each one, in record order; `near_boundary` the
    tokens of probability 0 that the scoring put within its numerical tolerance of a truncation
    boundary (not counted: the engine's own numbers may have kept them).
    """

    offenders: tuple[tuple[str, int, int], ...]
    n: int
    near_boundary: tuple[tuple[str, int, int], ...] = ()

    @property
    def statistic(self) -> int:
        return len(self.offenders)

    @property
    def pvalue(self) -> float:
        # Under H0 an impossible token has probability zero: any one is conclusive.
        return 0.0 if self.offenders else 1.0

    @property
    def verdict(self) -> str:
        if self.n == 0:
            return SKIPPED
        return FAIL if self.offenders else PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": "impossible_tokens",
            "statistic": self.statistic,
            "pvalue": self.pvalue,
            "n": int(self.n),
            "verdict": self.verdict,
            "offenders": [{"key": k, "position": p, "token": t} for k, p, t in self.offenders],
            **({"near_boundary": [{"key": k, "position": p, "token": t} for k, p, t in self.near_boundary]} if self.near_boundary else {}),
        }


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a result table as JSON-safe dicts (numpy scalars → Python, NaN/inf → None)."""
    if len(frame) == 0:
        return []
    clean = frame.replace([np.inf, -np.inf], np.nan)
    return json.loads(clean.to_json(orient="records"))


def holm(pvalues: np.ndarray | list[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (family-wise error control under any dependence).

    NaN p-values (tests that could not run) stay NaN and do not count in the family.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size == 0:
        return adjusted
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    scaled = p[order] * (m - np.arange(m))
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted


def bh(pvalues: np.ndarray | list[float]) -> np.ndarray:
    """Benjamini–Hochberg q-values via scipy.stats.false_discovery_control; NaN stays NaN."""
    p = np.asarray(pvalues, dtype=float)
    q = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        q[ok] = _st.false_discovery_control(p[ok], method="bh")
    return q


__all__ = [
    "FAIL",
    "PASS",
    "SKIPPED",
    "ConfidenceInterval",
    "ImpossibleTokens",
    "PITResult",
    "StatTestResult",
    "ZTestResult",
    "bh",
    "frame_records",
    "holm",
]
