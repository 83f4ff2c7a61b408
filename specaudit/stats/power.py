"""Power: the smallest effect a budget could detect, and the budget that detects a given effect.

"Not rejected" only means something next to what the test could have seen. Formulas (α' is the
per-test level: α / n_tests, i.e. the first step of Holm over n_tests gated tests, which makes
every figure here conservative for the gate):

- martingale z-tests (surprisal, draft affinity, acceptance calibration). Effect μ = mean
  per-unit shift in units of the null standard deviation, E[d_t] / sqrt(mean Var_t); z is then
  ≈ N(μ√n, 1). Detectable z shift Δ = z_{1−α'/2} + z_{power} (2.80 at α = 0.05, 80%);
  power(n) = Φ(μ√n − z_{1−α'/2}) + Φ(−μ√n − z_{1−α'/2}); MDE μ = Δ/√n; n = ⌈(Δ/μ)²⌉.
- PIT uniformity (Kolmogorov–Smirnov form). Effect δ = sup-distance between the PIT law and
  U(0,1); it equals TV(sampler, target) whenever the sampler's ratio s/p is monotone in p
  (sharpening, flattening, temperature not applied). At the sup point the empirical CDF is
  ≈ N(u* + δ, σ²/n) with σ ≤ 1/2, so P(√n·D > c) ≥ Φ(2(√n·δ − c)) with c the asymptotic
  Kolmogorov quantile (1.358 at α' = 0.05): MDE δ = (c + z_{power}/2)/√n,
  n = ⌈((c + z_{power}/2)/δ)²⌉. A lower bound on power: the planner errs on the side of more.
- first-token χ²/G test over `categories` tokens (one-sample vs the known target, or
  two-sample vs vanilla with `n_reference` samples). Its noncentrality is
  λ = n_eff·Σ(s−p)²/p ≥ 4·n_eff·TV² (Cauchy–Schwarz), n_eff = n (one-sample) or
  n·m/(n+m) (two-sample), summed over `n_prompts` prompts with the same TV (df adds up too).
  Power ≥ P(χ²_df(λ) > χ²_{df,1−α'}) at λ = 4·n_eff·δ²: guaranteed (asymptotically) for every
  alternative with TV ≥ δ.
"""

from __future__ import annotations

import math

from scipy import optimize as _opt
from scipy import stats as _st

from specaudit.errors import InputError

POWER_TESTS = ("martingale", "pit", "first_token")


def _level(alpha: float, n_tests: int) -> float:
    if not (0 < alpha < 1):
        raise InputError(f"alpha must be in (0, 1), got {alpha}")
    if n_tests < 1:
        raise InputError(f"n_tests must be >= 1, got {n_tests}")
    return alpha / n_tests


def _check_power(power: float) -> None:
    if not (0 < power < 1):
        raise InputError(f"power must be in (0, 1), e.g. 0.8 or 0.99; got {power}")


def _check_test(test: str) -> None:
    if test not in POWER_TESTS:
        raise InputError(f"unknown test {test!r} for power planning; choose one of {', '.join(POWER_TESTS)}")


def z_shift(alpha: float = 0.05, power: float = 0.8, n_tests: int = 1) -> float:
    """The mean shift of a N(·, 1) statistic that a two-sided level-α' z-test detects with `power`:
    Δ = z_{1−α'/2} + z_{power}."""
    _check_power(power)
    level = _level(alpha, n_tests)
    return float(_st.norm.ppf(1 - level / 2) + _st.norm.ppf(power))


def _first_token_parts(n: float, n_reference: float | None, n_prompts: int, categories: int) -> tuple[float, int]:
    if categories < 2:
        raise InputError(f"categories must be >= 2 (the tokens the first position can take), got {categories}")
    n_eff = n if n_reference is None else n * n_reference / (n + n_reference)
    return n_eff * n_prompts, n_prompts * (categories - 1)


def _noncentrality_for(power: float, level: float, df: int) -> float:
    critical = _st.chi2.ppf(1 - level, df)
    if _st.chi2.sf(critical, df) >= power:
        return 0.0
    hi = 1.0
    while _st.ncx2.sf(critical, df, hi) < power:
        hi *= 2
    return float(_opt.brentq(lambda lam: _st.ncx2.sf(critical, df, lam) - power, 0.0, hi, xtol=1e-10))


def detection_power(
    effect: float,
    n: float,
    *,
    test: str = "martingale",
    alpha: float = 0.05,
    n_tests: int = 1,
    categories: int = 2,
    n_reference: float | None = None,
    n_prompts: int = 1,
) -> float:
    """Approximate power of `test` with n units (tokens; first_token: samples per prompt)
    against an effect of size `effect` (μ for martingale, δ for pit/first_token)."""
    _check_test(test)
    level = _level(alpha, n_tests)
    if n <= 0:
        return 0.0
    if test == "martingale":
        crit = _st.norm.ppf(1 - level / 2)
        shift = effect * math.sqrt(n)
        return float(_st.norm.cdf(shift - crit) + _st.norm.cdf(-shift - crit))
    if test == "pit":
        c = _st.kstwobign.ppf(1 - level)
        return float(max(level, _st.norm.cdf(2 * (math.sqrt(n) * effect - c))))
    n_eff, df = _first_token_parts(n, n_reference, n_prompts, categories)
    return float(_st.ncx2.sf(_st.chi2.ppf(1 - level, df), df, 4 * n_eff * effect**2))


def minimum_detectable_effect(
    n: float,
    *,
    test: str = "martingale",
    alpha: float = 0.05,
    power: float = 0.8,
    n_tests: int = 1,
    categories: int = 2,
    n_reference: float | None = None,
    n_prompts: int = 1,
) -> float:
    """Smallest effect detected with `power` by `test` with n units (see module docstring):
    martingale → μ (per-token standardised shift), pit → δ (PIT sup-distance = TV for monotone
    distortions), first_token → δ (TV of the first-token distribution, per prompt)."""
    _check_test(test)
    _check_power(power)
    if n <= 0:
        raise InputError(f"the budget must be positive, got n = {n}")
    level = _level(alpha, n_tests)
    if test == "martingale":
        return z_shift(alpha, power, n_tests) / math.sqrt(n)
    if test == "pit":
        c = _st.kstwobign.ppf(1 - level)
        return float((c + _st.norm.ppf(power) / 2) / math.sqrt(n))
    n_eff, df = _first_token_parts(n, n_reference, n_prompts, categories)
    return math.sqrt(_noncentrality_for(power, level, df) / (4 * n_eff))


def samples_needed(
    delta: float,
    *,
    test: str = "martingale",
    power: float = 0.8,
    alpha: float = 0.05,
    n_tests: int = 1,
    tokens_per_sample: float = 1.0,
    categories: int = 2,
    equal_reference: bool = False,
    n_prompts: int = 1,
) -> int:
    """Samples needed for `test` to detect an effect `delta` with `power` at level α/n_tests.

    martingale/pit count tokens and divide by `tokens_per_sample` (mean emitted tokens per
    sample); first_token counts samples per prompt (per arm with `equal_reference`: a vanilla
    reference of the same size, two-sample).
    """
    _check_test(test)
    _check_power(power)
    if not (delta > 0):
        raise InputError(f"the effect to detect must be positive, got {delta}")
    if tokens_per_sample <= 0:
        raise InputError(f"tokens_per_sample must be positive, got {tokens_per_sample}")
    level = _level(alpha, n_tests)
    if test == "martingale":
        tokens = (z_shift(alpha, power, n_tests) / delta) ** 2
        return max(1, math.ceil(tokens / tokens_per_sample))
    if test == "pit":
        c = _st.kstwobign.ppf(1 - level)
        tokens = ((c + _st.norm.ppf(power) / 2) / delta) ** 2
        return max(1, math.ceil(tokens / tokens_per_sample))
    _, df = _first_token_parts(1.0, None, n_prompts, categories)
    lam = _noncentrality_for(power, level, df)
    per_prompt_eff = lam / (4 * delta**2 * n_prompts)
    # Two-sample with equal arms: n_eff = n/2.
    return max(1, math.ceil(per_prompt_eff * (2 if equal_reference else 1)))


def minimum_detectable_effects(
    n_tokens: int,
    n_samples_per_prompt: float,
    *,
    n_prompts: int = 1,
    alpha: float = 0.05,
    power: float = 0.8,
    n_tests: int = 1,
    categories: int = 2,
) -> dict[str, float]:
    """What a budget could have detected, for the report: the z shift Δ, the per-token
    standardised shift μ (martingales), the PIT/TV δ over all tokens, and the first-token TV
    against the known target and against a same-size vanilla sample."""
    out = {
        "z_shift": z_shift(alpha, power, n_tests),
        "martingale_mu": minimum_detectable_effect(n_tokens, test="martingale", alpha=alpha, power=power, n_tests=n_tests),
        "pit_tv": minimum_detectable_effect(n_tokens, test="pit", alpha=alpha, power=power, n_tests=n_tests),
    }
    common = dict(test="first_token", alpha=alpha, power=power, n_tests=n_tests, categories=categories, n_prompts=n_prompts)
    out["first_token_tv"] = minimum_detectable_effect(n_samples_per_prompt, **common)
    out["first_token_tv_two_sample"] = minimum_detectable_effect(n_samples_per_prompt, n_reference=n_samples_per_prompt, **common)
    return out


__all__ = [
    "POWER_TESTS",
    "detection_power",
    "minimum_detectable_effect",
    "minimum_detectable_effects",
    "samples_needed",
    "z_shift",
]
