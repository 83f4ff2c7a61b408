"""Calibration and power of the auditor itself, measured on the mutant samplers.

The unit part runs `audit_sampler` over many seeds: on the correct sampler the rejection rate
must sit at the nominal alpha (a binomial 95% interval that contains alpha), on every mutant
the detection rate must be >= 99%. Those two numbers are the auditor's own quality figures.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd
from scipy import stats as _scipy_stats

from specaudit.contracts.status import CheckStatus
from specaudit.decoding.verify import VerifyFn
from specaudit.errors import InputError
from specaudit.selftest.mutants import MUTANTS
from specaudit.stats.sampler_audit import audit_sampler

if TYPE_CHECKING:
    from typing import Any

    from specaudit.config import RunConfig
    from specaudit.decoding import SamplingSpec

__all__ = ["RejectionRate", "calibrate_unit", "power_unit", "selftest_config", "unit_selftest"]

# Seeds used when a quick self-test is asked for: a smoke test, too few for calibration claims.
# Its mutant target is "detected above chance" (Clopper-Pearson lower bound > alpha, >= 3 of 10),
# which a mutant at the full run's >= 99% meets with probability > 0.999; asking 10/10 of it
# would fail a 0.99 mutant one run in ten.
_QUICK_SEEDS = 10
_DETECTION_TARGET = 0.99


@dataclass(frozen=True)
class RejectionRate:
    """How often `audit_sampler` rejected one sampler over a set of seeds.

    statistic is the rejection rate (false-alarm rate for the correct sampler, detection rate
    for a mutant); the interval is the exact (Clopper–Pearson) binomial 95% interval.
    """

    sampler: str
    seeds: int
    rejections: int
    statistic: float
    ci_low: float
    ci_high: float
    samples_per_audit: float
    trials_per_audit: float
    seconds_per_audit: float
    alpha: float

    def confidence_interval(self) -> tuple[float, float]:
        return (self.ci_low, self.ci_high)

    @property
    def calibrated(self) -> bool:
        """The nominal alpha lies inside the 95% interval of the rejection rate."""
        return self.ci_low <= self.alpha <= self.ci_high


def selftest_config(spec: SamplingSpec, *, samples: int, **fields: Any) -> RunConfig:
    """The run config of one self-test run at `spec` (its whole sampling setting, request features
    included): one sample per prompt where greedy (one output is all there is), no warm-up."""
    from specaudit.config import RunConfig

    return RunConfig(samples=1 if spec.greedy else samples, warmup=0, **fields).with_setting(spec)


def _name_of(verify: VerifyFn | str) -> tuple[str, VerifyFn]:
    if isinstance(verify, str):
        if verify not in MUTANTS:
            raise InputError(f"unknown sampler {verify!r}; choose from {', '.join(MUTANTS)}")
        return verify, MUTANTS[verify]
    if not callable(verify):
        raise InputError(f"expected a verify function or a mutant name, got {type(verify).__name__}")
    return getattr(verify, "__name__", "sampler"), verify


def _rejection_rate(verify: VerifyFn | str, seeds: Iterable[int], audit_kwargs: dict) -> RejectionRate:
    name, function = _name_of(verify)
    seeds = list(seeds)
    if not seeds:
        raise InputError("seeds is empty; pass at least one seed (>= 200 for a calibration claim)")
    alpha = audit_kwargs.get("alpha", 0.05)
    rejections = 0
    samples = trials = 0
    started = time.perf_counter()
    for seed in seeds:
        result = audit_sampler(function, seed=seed, **audit_kwargs)
        rejections += result.verdict == CheckStatus.FAIL
        samples += result.samples
        trials += result.trials
    elapsed = time.perf_counter() - started
    interval = _scipy_stats.binomtest(rejections, len(seeds)).proportion_ci(confidence_level=0.95)
    return RejectionRate(
        sampler=name,
        seeds=len(seeds),
        rejections=rejections,
        statistic=rejections / len(seeds),
        ci_low=float(interval.low),
        ci_high=float(interval.high),
        samples_per_audit=samples / len(seeds),
        trials_per_audit=trials / len(seeds),
        seconds_per_audit=elapsed / len(seeds),
        alpha=alpha,
    )


def calibrate_unit(verify: VerifyFn | str = "correct", seeds: Iterable[int] = range(200), **audit_kwargs: Any) -> RejectionRate:
    """False-alarm rate of `audit_sampler` on a correct sampler over `seeds`, with its binomial
    95% interval; `RejectionRate.calibrated` says whether alpha lies inside it."""
    return _rejection_rate(verify, seeds, audit_kwargs)


def power_unit(mutant: VerifyFn | str, seeds: Iterable[int] = range(200), **audit_kwargs: Any) -> RejectionRate:
    """Detection rate of `audit_sampler` on a buggy sampler (a name in `MUTANTS` or a function)."""
    return _rejection_rate(mutant, seeds, audit_kwargs)


def unit_selftest(
    seeds: Iterable[int] | None = None, quick: bool = False, samplers: Iterable[str] | None = None, **audit_kwargs: Any
) -> pd.DataFrame:
    """Calibration of the correct sampler and detection rate of every mutant, one row each.

    Columns: sampler, seeds, rejections, rejection_rate, ci_low, ci_high, target, ok,
    samples_per_audit, trials_per_audit, seconds_per_audit. `target` is "alpha in CI" for the
    correct sampler and ">= 0.99" for mutants; with `quick` a mutant's is "> alpha" (its 95%
    interval above alpha). Default seeds: 200 (10 with `quick`).
    """
    if seeds is None:
        seeds = range(_QUICK_SEEDS if quick else 200)
    seeds = list(seeds)
    names = list(MUTANTS) if samplers is None else list(samplers)
    rows = []
    for name in names:
        rate = _rejection_rate(name, seeds, audit_kwargs)
        is_correct = MUTANTS.get(name) is MUTANTS["correct"]
        if is_correct:
            target, ok = "alpha in CI", rate.calibrated
        elif quick:
            target, ok = "> alpha", rate.ci_low > rate.alpha
        else:
            target, ok = f">= {_DETECTION_TARGET:g}", rate.statistic >= _DETECTION_TARGET
        rows.append(
            dict(
                sampler=name,
                seeds=rate.seeds,
                rejections=rate.rejections,
                rejection_rate=rate.statistic,
                ci_low=rate.ci_low,
                ci_high=rate.ci_high,
                target=target,
                ok=ok,
                samples_per_audit=rate.samples_per_audit,
                trials_per_audit=rate.trials_per_audit,
                seconds_per_audit=rate.seconds_per_audit,
            )
        )
    return pd.DataFrame(rows)
