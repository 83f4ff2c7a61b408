"""The drift statistics: one run against a baseline (normal approximation of bootstrap intervals,
or prompt by prompt when the snapshots carry per-prompt values) and the CUSUM over a history.

The method is described in `specaudit.monitor._drift`, which turns these results into checks.
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specaudit.monitor._snapshot import MetricPoint, _normal_quantile

ConfidenceInterval = namedtuple("ConfidenceInterval", ["low", "high"])


def _two_sided_p(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2.0))


# ------------------------------------------------------------------ statistics
class _Change:
    """What both drift results derive from current, baseline and their difference."""

    difference: float
    current: float
    baseline: float

    @property
    def relative_change(self) -> float:
        return self.difference / abs(self.baseline) if self.baseline else (math.inf if self.difference else 0.0)

    @property
    def ratio(self) -> float:
        return self.current / self.baseline if self.baseline else math.nan


@dataclass(frozen=True)
class DriftTestResult(_Change):
    """Change of one metric between a run and its baseline (normal approximation from the CIs).

    `statistic` is z = difference / standard_error, `pvalue` two-sided (not adjusted for the
    other groups). `current_standard_error` includes τ² (`heterogeneity`, the between-run
    variance in the baseline window); `baseline_standard_error` is that of the pooled baseline.
    """

    statistic: float
    pvalue: float
    difference: float
    standard_error: float
    current: float
    baseline: float
    current_standard_error: float
    baseline_standard_error: float
    heterogeneity: float
    n_baseline_runs: int
    confidence_level: float = 0.95

    def confidence_interval(self, confidence_level: float | None = None) -> ConfidenceInterval:
        """CI of the difference current − baseline."""
        half = _normal_quantile(confidence_level or self.confidence_level) * self.standard_error
        return ConfidenceInterval(self.difference - half, self.difference + half)

    def ratio_confidence_interval(self, confidence_level: float | None = None) -> ConfidenceInterval:
        """CI of current / baseline on the log scale (delta method, Var log x ≈ Var x / x²); NaN unless both > 0."""
        if not (self.current > 0 and self.baseline > 0):
            return ConfidenceInterval(math.nan, math.nan)
        sd = math.hypot(self.current_standard_error / self.current, self.baseline_standard_error / self.baseline)
        half = _normal_quantile(confidence_level or self.confidence_level) * sd
        log_ratio = math.log(self.current / self.baseline)
        return ConfidenceInterval(math.exp(log_ratio - half), math.exp(log_ratio + half))

    def to_dict(self) -> dict[str, Any]:
        ci, rci = self.confidence_interval(), self.ratio_confidence_interval()
        return {
            "method": "normal approximation from the group CIs",
            "statistic": _finite(self.statistic),
            "pvalue": _finite(self.pvalue),
            "difference": _finite(self.difference),
            "ci_low": _finite(ci.low),
            "ci_high": _finite(ci.high),
            "standard_error": _finite(self.standard_error),
            "current": _finite(self.current),
            "baseline": _finite(self.baseline),
            "relative_change": _finite(self.relative_change),
            "ratio": _finite(self.ratio),
            "ratio_ci_low": _finite(rci.low),
            "ratio_ci_high": _finite(rci.high),
            "heterogeneity": _finite(self.heterogeneity),
            "n_baseline_runs": self.n_baseline_runs,
            "confidence_level": self.confidence_level,
        }


def _finite(x: Any) -> Any:
    return x if not isinstance(x, float) or math.isfinite(x) else None


def _usable(points: Iterable[MetricPoint]) -> list[MetricPoint]:
    return [p for p in points if p.value is not None and math.isfinite(p.standard_error) and p.standard_error > 0]


def _pool(points: Sequence[MetricPoint]) -> tuple[float, float, float]:
    """Random-effects mean, its variance, and τ² (DerSimonian–Laird) of usable points."""
    values = [float(p.value) for p in points]
    variances = [p.standard_error**2 for p in points]
    if len(points) == 1:
        return values[0], variances[0], 0.0
    weights = [1 / v for v in variances]
    total = sum(weights)
    fixed = sum(w * x for w, x in zip(weights, values)) / total
    q = sum(w * (x - fixed) ** 2 for w, x in zip(weights, values))
    scale = total - sum(w * w for w in weights) / total
    tau2 = max(0.0, (q - (len(points) - 1)) / scale) if scale > 0 else 0.0
    random_weights = [1 / (v + tau2) for v in variances]
    total = sum(random_weights)
    return sum(w * x for w, x in zip(random_weights, values)) / total, 1 / total, tau2


def drift_test(current: MetricPoint, baseline: Sequence[MetricPoint], *, confidence_level: float = 0.95) -> DriftTestResult | None:
    """Compare one metric point with its baseline point(s); None when either side lacks a usable CI."""
    if not _usable([current]):
        return None
    usable = _usable(baseline)
    if not usable:
        return None
    mean, var_mean, tau2 = _pool(usable)
    var_current = current.standard_error**2 + tau2  # a new run also varies by τ² around the mean
    se = math.sqrt(var_current + var_mean)
    difference = float(current.value) - mean
    z = difference / se
    return DriftTestResult(
        z,
        _two_sided_p(z),
        difference,
        se,
        float(current.value),
        mean,
        math.sqrt(var_current),
        math.sqrt(var_mean),
        tau2,
        len(usable),
        confidence_level,
    )


@dataclass(frozen=True)
class PromptDriftResult(_Change):
    """Change of one group's metric between a run and its baseline, tested prompt by prompt.

    Paired when the runs share prompts (a scheduled re-run of one prompt set): a one-sample t-test
    on the per-prompt differences current − baseline, a prompt's baseline value being its mean
    over the baseline runs. Otherwise Welch's t-test between the two sets of prompt values. A
    t-test rather than a signed-rank test because groups hold a handful of prompts: with n
    prompts the signed-rank test's smallest p-value is 2/2^n (0.25 at n = 3), which no Holm
    correction lets through, while a per-prompt rate averages many draft steps and is close to
    normal. `current` and `baseline` are prompt means; the ratio's CI is a seeded percentile
    bootstrap over prompts (pairs resampled together when paired).
    """

    statistic: float
    pvalue: float
    difference: float
    ci_low: float
    ci_high: float
    current: float
    baseline: float
    ratio_ci_low: float
    ratio_ci_high: float
    n_current: int
    n_baseline: int
    paired: bool
    n_baseline_runs: int
    confidence_level: float = 0.95

    def confidence_interval(self) -> ConfidenceInterval:
        """CI of the difference current − baseline (t-based)."""
        return ConfidenceInterval(self.ci_low, self.ci_high)

    def ratio_confidence_interval(self) -> ConfidenceInterval:
        return ConfidenceInterval(self.ratio_ci_low, self.ratio_ci_high)

    def to_dict(self) -> dict[str, Any]:
        test = "paired t-test on per-prompt differences" if self.paired else "Welch t-test on per-prompt values"
        return {
            "method": test,
            "statistic": _finite(self.statistic),
            "pvalue": _finite(self.pvalue),
            "difference": _finite(self.difference),
            "ci_low": _finite(self.ci_low),
            "ci_high": _finite(self.ci_high),
            "current": _finite(self.current),
            "baseline": _finite(self.baseline),
            "relative_change": _finite(self.relative_change),
            "ratio": _finite(self.ratio),
            "ratio_ci_low": _finite(self.ratio_ci_low),
            "ratio_ci_high": _finite(self.ratio_ci_high),
            "n_prompts_current": self.n_current,
            "n_prompts_baseline": self.n_baseline,
            "paired": self.paired,
            "n_baseline_runs": self.n_baseline_runs,
            "confidence_level": self.confidence_level,
        }


def prompt_drift_test(
    current: Mapping[str, float],
    baseline: Sequence[Mapping[str, float]],
    *,
    confidence_level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> PromptDriftResult | None:
    """Test one group's per-prompt values (prompt id → value) against the baseline runs' values;
    None when either side has fewer than 2 prompts (or 2 pairs, when paired)."""
    import numpy as np
    from scipy import stats

    pooled: dict[str, list[float]] = {}
    for run in baseline:
        for prompt, value in run.items():
            pooled.setdefault(prompt, []).append(value)
    base = {prompt: float(np.mean(values)) for prompt, values in pooled.items()}
    shared = sorted(set(current) & set(base))
    paired = len(shared) >= 2
    if paired:
        x = np.array([current[k] for k in shared], float)
        y = np.array([base[k] for k in shared], float)
    else:
        x, y = np.array(list(current.values()), float), np.array(list(base.values()), float)
        if len(x) < 2 or len(y) < 2:
            return None
    if paired:
        d = x - y
        result = stats.ttest_1samp(d, 0.0) if np.ptp(d) > 0 else None
        ci = result.confidence_interval(confidence_level) if result is not None else (float(d[0]), float(d[0]))
    else:
        result = stats.ttest_ind(x, y, equal_var=False) if np.ptp(np.r_[x, y]) > 0 else None
        ci = result.confidence_interval(confidence_level) if result is not None else (0.0, 0.0)
    statistic = float(result.statistic) if result is not None else (0.0 if not paired or d[0] == 0 else math.copysign(math.inf, d[0]))
    pvalue = float(result.pvalue) if result is not None else (1.0 if statistic == 0 else 0.0)

    rng = np.random.default_rng(seed)
    if paired:
        picks = rng.integers(0, len(x), (n_boot, len(x)))
        num, den = x[picks].mean(axis=1), y[picks].mean(axis=1)
    else:
        num = x[rng.integers(0, len(x), (n_boot, len(x)))].mean(axis=1)
        den = y[rng.integers(0, len(y), (n_boot, len(y)))].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = num / den
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - confidence_level) / 2
    r_low, r_high = np.quantile(ratios, [tail, 1 - tail]) if len(ratios) else (math.nan, math.nan)
    return PromptDriftResult(
        statistic,
        pvalue,
        float(x.mean() - y.mean()),
        float(ci[0]),
        float(ci[1]),
        float(x.mean()),
        float(y.mean()),
        float(r_low),
        float(r_high),
        len(x),
        len(y),
        paired,
        len(baseline),
        confidence_level,
    )


@dataclass(frozen=True)
class CusumResult:
    """One-sided CUSUM of standardised recursive residuals over a run history.

    `residuals[t]` = (x_t − pooled mean of runs before t) / sd, N(0, 1) under no drift; NaN for
    the first `warmup` runs. `path[t]` = max(0, path[t−1] + (worsening residual) − k).
    `statistic` is the last value; an alarm is `statistic > threshold`.
    """

    statistic: float
    threshold: float
    reference: float
    direction: int
    residuals: tuple[float, ...]
    path: tuple[float, ...]

    @property
    def alarm(self) -> bool:
        return self.statistic > self.threshold

    @property
    def excursion_start(self) -> int | None:
        """Index of the first run of the current excursion above zero, if any."""
        if not self.path or self.path[-1] <= 0:
            return None
        start = len(self.path) - 1
        while start > 0 and self.path[start - 1] > 0:
            start -= 1
        return start

    def to_dict(self) -> dict[str, Any]:
        return {
            "statistic": self.statistic,
            "threshold": self.threshold,
            "reference": self.reference,
            "direction": self.direction,
            "residuals": [_finite(r) for r in self.residuals],
            "path": list(self.path),
        }


def cusum(
    series: Sequence[MetricPoint],
    *,
    direction: int = 1,
    reference: float = 0.5,
    threshold: float = 5.0,
    min_change: float = 0.0,
    warmup: int = 2,
) -> CusumResult:
    """CUSUM for a worsening drift (direction +1: higher is better, −1: lower is better, 0: either way).

    Each step subtracts k_t = max(`reference`, min_change·|mean| / (2 sd_t)) standard deviations:
    the classic "half the shift to detect", so drifts below the practical threshold `min_change`
    (relative) do not accumulate however precise the estimates are.
    """
    residuals: list[float] = []
    slack: list[float] = []
    for t, point in enumerate(series):
        prior = _usable(series[:t])
        if t < warmup or len(prior) < warmup or not _usable([point]):
            residuals.append(math.nan)
            slack.append(reference)
            continue
        mean, var_mean, tau2 = _pool(prior)
        sd = math.sqrt(point.standard_error**2 + tau2 + var_mean)
        residuals.append((float(point.value) - mean) / sd)
        slack.append(max(reference, min_change * abs(mean) / (2 * sd)))

    def run(sign: int) -> list[float]:
        s, path = 0.0, []
        for r, k in zip(residuals, slack):
            s = s if math.isnan(r) else max(0.0, s - sign * r - k)
            path.append(s)
        return path

    sides = [run(direction)] if direction else [run(1), run(-1)]
    path = max(sides, key=lambda p: p[-1] if p else 0.0)
    return CusumResult(path[-1] if path else 0.0, threshold, reference, direction, tuple(residuals), tuple(path))
