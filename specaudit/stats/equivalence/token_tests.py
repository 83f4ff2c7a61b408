"""Per-token tests under the target: PIT, surprisal and draft-affinity z, impossible tokens,
acceptance calibration."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as _st

from specaudit.errors import InputError
from specaudit.stats._results import (
    ImpossibleTokens,
    PITResult,
    StatTestResult,
    ZTestResult,
)
from specaudit.stats.disparity.per_prompt import (
    _reached_positions,  # the one rule for which drafted positions a step reached
)
from specaudit.stats.equivalence._common import _frame
from specaudit.stats.scoring import ATTRIBUTE_PREFIX, BOUNDARY_COLUMN, TokenScores, _audited, _field


# ============================================================================ PIT
def pit_values(scores: TokenScores | pd.DataFrame, seed: int = 0) -> np.ndarray:
    """Randomised PIT u_t = F_t(x_t−) + V_t·p_t(x_t), one per row of the token frame, in order.

    V comes from numpy's Generator seeded with `seed`, drawn for all rows at once in the order of
    (record key, position), so a group's PIT values are the same whether it is tested alone or
    inside the whole run, and do not depend on the order records were written in (a Ray run or a
    concurrent endpoint run writes them as they arrive).
    """
    frame = _frame(scores)
    return np.clip(frame["cdf_below"].to_numpy(float) + _pit_draws(frame, seed) * frame["p"].to_numpy(float), 0.0, 1.0)


def _pit_draws(frame: pd.DataFrame, seed: int) -> np.ndarray:
    """The V ~ U(0, 1) of each row, drawn in (record key, position) order."""
    v = np.random.default_rng(seed).random(len(frame))
    if {"key", "position"} <= set(frame.columns):  # frames built by hand may lack them: then row order
        draws, v = v, np.empty(len(frame))
        v[np.lexsort((frame["position"].to_numpy(), frame["key"].astype(str).to_numpy()))] = draws
    return v


def step_pit_values(frame: pd.DataFrame, records: Iterable[Any], seed: int = 0) -> np.ndarray:
    """u = F(x−) + V·f(x) of each row of the token frame under the law of its role in the
    verification step, from the records' `step_pit` ([F, f] per emitted token, recorded by our
    speculative engine); NaN for rows whose record carries none (vanilla, other engines). V is the
    same draw as in `pit_values`."""
    below, own = step_pit_masses(frame, records)
    return np.clip(below + _pit_draws(frame, seed) * own, 0.0, 1.0)


def step_pit_masses(frame: pd.DataFrame, records: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    """[F(x−), f(x)] of each row of the token frame from the records' `step_pit` (NaN where a
    record carries none). f = 0 is a token its role's law cannot emit: for a correction, one the
    residual max(0, p − q) of the verifier's own p and q gives no mass (`verify.step_laws`)."""
    parts = {}
    for record in _audited(records):
        values = _field(record, "step_pit")
        if values:
            key = str(_field(record, "key"))
            values = np.asarray(values, dtype=float).reshape(-1, 2)
            if len(values) != len(_field(record, "output_token_ids") or []):
                raise InputError(
                    f"record {key!r}: step_pit has {len(values)} entries for {len(_field(record, 'output_token_ids') or [])} "
                    "output tokens; the records file is inconsistent"
                )
            parts[key] = values
    below = np.full(len(frame), np.nan)
    own = np.full(len(frame), np.nan)
    if parts:
        positions = frame["position"].to_numpy(int)
        for key, rows in frame.groupby(frame["key"].astype(str), sort=False).indices.items():
            if key in parts:
                below[rows], own[rows] = parts[key][positions[rows]].T
    return below, own


def _adinf_cdf(a2: float) -> float:
    """Asymptotic CDF of the Anderson–Darling statistic for a fully specified distribution
    (Marsaglia & Marsaglia 2004 approximation, absolute error < 2e-6). The asymptotic law is
    accurate to about 1e-3 in p from n ≈ 10 on, and our n is tokens (hundreds and more)."""
    z = float(a2)
    if z <= 0:
        return 0.0
    if z < 2:
        poly = 2.00012 + z * (0.247105 + z * (-0.0649821 + z * (0.0347962 + z * (-0.011672 + z * 0.00168691))))
        return math.exp(-1.2337141 / z) / math.sqrt(z) * poly
    poly = 1.0776 + z * (-2.30695 + z * (0.43424 + z * (-0.082433 + z * (0.008056 - z * 0.0003146))))
    return math.exp(-math.exp(poly))


def anderson_darling_uniform(u: np.ndarray) -> tuple[float, float]:
    """Anderson–Darling A² of `u` against U(0, 1) and its (asymptotic) p-value."""
    u = np.sort(np.clip(np.asarray(u, dtype=float), 1e-300, 1 - 1e-16))
    n = u.size
    if n == 0:
        return math.nan, math.nan
    i = np.arange(1, n + 1)
    a2 = -n - np.sum((2 * i - 1) * (np.log(u) + np.log1p(-u[::-1]))) / n
    return float(a2), float(min(1.0, max(0.0, 1.0 - _adinf_cdf(a2))))


def _pit_test(u: np.ndarray, alpha: float, bins: int, name: str = "pit") -> PITResult:
    n = int(u.size)
    if n == 0:
        return PITResult(name, math.nan, math.nan, 0, alpha, "anderson-darling", None, tuple([0] * bins))
    a2, p_ad = anderson_darling_uniform(u)
    ks = _st.kstest(u, "uniform")
    counts, _ = np.histogram(u, bins=bins, range=(0.0, 1.0))
    ks_result = StatTestResult(name + "_ks", float(ks.statistic), float(ks.pvalue), n, alpha, "kolmogorov-smirnov")
    return PITResult(name, a2, p_ad, n, alpha, "anderson-darling (asymptotic)", ks_result, tuple(int(c) for c in counts))


def step_pit_test(u: np.ndarray, own: np.ndarray, alpha: float, bins: int) -> PITResult:
    """Anderson–Darling on the step PIT values `u`, unless some token's role gives it no mass
    (`own` = f(x) = 0, e.g. a correction outside the residual's support): a correct verifier
    cannot emit one, so it is proof (p = 0), as an impossible rejection is for acceptance. A q
    other than the one the draft sampled from shows so: the transformers #47932 class puts
    residual mass on tokens with Z·q < p < q (docs/selftest.md)."""
    result = _pit_test(u, alpha, bins, name="step_pit")
    impossible = int(np.count_nonzero(np.asarray(own, dtype=float) <= 0.0))
    if not impossible:
        return result
    return replace(result, statistic=math.inf, pvalue=0.0, method=f"{impossible} token(s) their step role cannot emit (f = 0)")


def pit_uniformity(scores: TokenScores | pd.DataFrame, seed: int = 0, *, alpha: float = 0.05, bins: int = 20) -> PITResult:
    """Test the randomised PIT values of all possible tokens (p_t(x_t) > 0) for U(0, 1)."""
    frame = _frame(scores)
    u = pit_values(frame, seed)
    return _pit_test(u[frame["p"].to_numpy(float) > 0], alpha, bins)


# ============================================================================ z-tests
def _z_test(name: str, deviations: np.ndarray, variances: np.ndarray, alpha: float) -> ZTestResult:
    deviations = np.asarray(deviations, dtype=float)
    variances = np.asarray(variances, dtype=float)
    informative = variances > 0  # a degenerate p_t (one possible token) carries no evidence
    n = int(informative.sum())
    total_var = float(variances[informative].sum())
    if n == 0 or total_var <= 0:
        return ZTestResult(name, math.nan, math.nan, 0, alpha, "normal (martingale CLT)")
    z = float(deviations[informative].sum()) / math.sqrt(total_var)
    return ZTestResult(name, z, float(2 * _st.norm.sf(abs(z))), n, alpha, "normal (martingale CLT)")


def _monte_carlo_null(
    scores: TokenScores | pd.DataFrame, name: str, null: Mapping[str, np.ndarray] | None
) -> Mapping[str, np.ndarray] | None:
    """The null draws of test `name` per record key: `null` as given, else the TokenScores' own."""
    if null is None and isinstance(scores, TokenScores) and scores.monte_carlo_null is not None:
        return scores.monte_carlo_null.get(name)
    return null


def _with_monte_carlo_pvalue(result: ZTestResult, frame: pd.DataFrame, variance: str, null: Mapping[str, np.ndarray] | None) -> ZTestResult:
    """`result` with its two-sided p-value from the Monte Carlo null of every record in `frame`
    (draws of the z numerator per record key, summed over the records, scaled like z):
    (1 + #{|z_b| ≥ |z|}) / (1 + B), exact for that null. Unchanged (the normal approximation)
    where there is no null or some record of the frame has none."""
    if null is None or result.n == 0 or "key" not in frame:
        return result
    keys = frame["key"].unique()
    if any(key not in null for key in keys):
        return result
    draws = np.sum([np.asarray(null[key], dtype=float) for key in keys], axis=0)
    total_var = float(frame[variance][frame[variance] > 0].sum())
    null_z = draws / math.sqrt(total_var)
    tolerance = 1e-9 * max(1.0, abs(result.statistic))
    pvalue = float((1 + np.sum(np.abs(null_z) >= abs(result.statistic) - tolerance)) / (1 + null_z.size))
    return ZTestResult(result.name, result.statistic, pvalue, result.n, result.alpha, f"Monte Carlo null ({null_z.size} draws per token)")


def surprisal_martingale(
    scores: TokenScores | pd.DataFrame,
    *,
    alpha: float = 0.05,
    null: Mapping[str, np.ndarray] | None = None,
) -> ZTestResult:
    """z = Σ(−log p_t(x_t) − H_t) / sqrt(Σ Var_t) over possible tokens; negative z = output more
    predictable than the target's (e.g. pulled toward a lower-entropy draft).

    The p-value is two-sided. With the Monte Carlo null of every record in the frame (``null``:
    record key → draws, or the TokenScores' own ``monte_carlo_null["surprisal"]``: draws of the
    same sum with each token drawn afresh from its p_t) it is (1 + #{|z_b| ≥ |z|}) / (1 + B):
    exact for that null and faithful to the heavy right tail that tokens of p ≈ 1e-6 give the
    sum. Without it, the normal approximation of the martingale CLT, which such tails break at
    audit sizes (docs/statistics.md).
    """
    null = _monte_carlo_null(scores, "surprisal", null)
    frame = _frame(scores)
    frame = frame[frame["p"] > 0]
    result = _z_test("surprisal", frame["surprisal"] - frame["entropy"], frame["surprisal_var"], alpha)
    return _with_monte_carlo_pvalue(result, frame, "surprisal_var", null)


def draft_affinity(
    scores: TokenScores | pd.DataFrame,
    *,
    alpha: float = 0.05,
    null: Mapping[str, np.ndarray] | None = None,
) -> ZTestResult:
    """z = Σ(q_t(x_t) − E_{p_t}[q_t]) / sqrt(Σ Var_{p_t}(q_t)); positive z = output pulled toward
    the draft. Needs scores computed with `draft_model=`.

    The p-value is two-sided, from the Monte Carlo null where every record has one (``null``, or
    the TokenScores' own ``monte_carlo_null["draft_affinity"]``), as for `surprisal_martingale`:
    q_t(X_t) is heavy-tailed too (a near-certain position whose rare token the draft gives q ≈ 0
    moves the sum by about −1 against a variance of about 1e-3). Else the normal approximation.
    """
    null = _monte_carlo_null(scores, "draft_affinity", null)
    frame = _frame(scores)
    if "q" not in frame or frame["q"].isna().all():
        raise InputError("draft affinity needs draft scores; call score_records(..., draft_model=draft)")
    frame = frame[(frame["p"] > 0) & frame["q"].notna()]
    result = _z_test("draft_affinity", frame["q"] - frame["q_mean"], frame["q_var"], alpha)
    return _with_monte_carlo_pvalue(result, frame, "q_var", null)


def impossible_tokens(scores: TokenScores | pd.DataFrame) -> ImpossibleTokens:
    """Emitted tokens with warped target probability exactly 0 (outside top-k/top-p, or masked),
    apart from those the scoring marked near a truncation boundary (scoring.BOUNDARY_COLUMN: the
    engine's and the scorer's numbers differ there), which are counted but prove nothing."""
    frame = _frame(scores)
    zero = frame["p"].to_numpy(float) <= 0
    near = frame[BOUNDARY_COLUMN].fillna(False).to_numpy(bool) if BOUNDARY_COLUMN in frame else np.zeros(len(frame), dtype=bool)

    def listed(mask: np.ndarray) -> tuple[tuple[str, int, int], ...]:
        rows = frame[mask]
        return tuple((str(k), int(t), int(x)) for k, t, x in zip(rows["key"], rows["position"], rows["token"]))

    return ImpossibleTokens(listed(zero & ~near), len(frame), listed(zero & near))


def _draft_lengths(record: Any, accepted: list[int], betas: list[Any], key: str) -> list[int]:
    """Tokens drafted in each step of a record: its `proposed_per_step` (fewer than k near the
    length budget, or wherever the engine drafts less); for older records without that field,
    the length of the step's β list, else k."""
    drafted = _field(record, "proposed_per_step")
    if not isinstance(drafted, (list, tuple, np.ndarray)):
        k_record = int(_field(record, "k", 0) or 0)
        return [len(betas[j]) if j < len(betas) and betas[j] else k_record for j in range(len(accepted))]
    drafted = [int(d) for d in drafted]
    proposed = _field(record, "proposed")
    if (
        len(drafted) != len(accepted)
        or any(a > d for a, d in zip(accepted, drafted))
        or (isinstance(proposed, (int, np.integer)) and sum(drafted) != proposed)
    ):
        raise InputError(
            f"record {key!r}: proposed_per_step {drafted} does not fit accepted_per_step {accepted} "
            f"(one entry per step, none accepting more than it drafted) or does not sum to proposed; "
            "the engine's step counters disagree"
        )
    return drafted


def acceptance_indicators(records: Iterable[Any], scores: TokenScores | pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per drafted position reached in each verification step of each record.

    Step j of a record accepted a_j of its k_j drafted tokens (k_j from `proposed_per_step`; for
    older records without it, the step's β list or k), so positions i = 0..min(a_j, k_j − 1) were
    reached (none when k_j = 0) and `accepted` = 1 for i < a_j, 0 at i = a_j. `beta` is the
    probability that a correct verifier accepts there: min(1, p/q) of the drafted token where the
    engine recorded it (`accept_prob`, ours does: conditioning on the drafted token takes the draft's
    sampling noise out of the test), else β = Σ min(p, q) from `scores` (teacher-forced target
    and draft, independent of the engine) where the position lies inside the output, else from the
    record's own `beta` list. Rows without any of these are left out.
    Columns: key, prompt_id, engine, step, draft_position, position, accepted, beta, beta_source,
    attr.<dim>.
    """
    scored: dict[tuple[str, int], float] = {}
    if scores is not None:
        frame = _frame(scores)
        if "beta" in frame and frame["beta"].notna().any():
            ok = frame[frame["beta"].notna()]
            scored = dict(zip(zip(ok["key"], ok["position"]), ok["beta"]))
    rows = []
    for record in _audited(records):
        steps = [int(a) for a in (_field(record, "accepted_per_step") or [])]
        k_record = int(_field(record, "k", 0) or 0)
        if not steps or (k_record == 0 and not _field(record, "beta")):
            continue  # vanilla: nothing drafted
        key = str(_field(record, "key"))
        betas = list(_field(record, "beta") or [])
        token_probs = list(_field(record, "accept_prob") or [])
        n_out = len(_field(record, "output_token_ids") or [])
        if sum(a + 1 for a in steps) < n_out:
            raise InputError(
                f"record {key!r}: accepted_per_step emits {sum(a + 1 for a in steps)} tokens but the output "
                f"has {n_out}; the engine's step counters do not match its output"
            )
        drafted = _draft_lengths(record, steps, betas, key)
        attributes = _field(record, "attributes") or {}
        step_start = np.cumsum([0] + [a + 1 for a in steps])  # every step emits a_j + 1 tokens
        for j, i, accepted in zip(*_reached_positions(steps, drafted)):
            j, i = int(j), int(i)
            position = int(step_start[j]) + i
            step_beta = betas[j] if j < len(betas) else None
            step_probs = token_probs[j] if j < len(token_probs) else None
            if step_probs is not None and i < len(step_probs):
                beta, source = float(step_probs[i]), "drafted token"
            elif (key, position) in scored:
                beta, source = scored[(key, position)], "scores"
            elif step_beta is not None and i < len(step_beta):
                beta, source = float(step_beta[i]), "record"
            else:
                continue
            row = {
                "key": key,
                "prompt_id": str(_field(record, "prompt_id")),
                "engine": str(_field(record, "engine")),
                "step": j,
                "draft_position": i,
                "position": position,
                "accepted": int(accepted),
                "beta": float(beta),
                "beta_source": source,
            }
            row.update({ATTRIBUTE_PREFIX + d: g for d, g in attributes.items()})
            rows.append(row)
    columns = ["key", "prompt_id", "engine", "step", "draft_position", "position", "accepted", "beta", "beta_source"]
    return pd.DataFrame(rows) if rows else pd.DataFrame({c: [] for c in columns})


def acceptance_calibration(
    records: Iterable[Any] | pd.DataFrame,
    scores: TokenScores | pd.DataFrame | None = None,
    *,
    alpha: float = 0.05,
) -> ZTestResult:
    """z = Σ(accept − β) / sqrt(Σ β(1 − β)) over drafted positions reached: a wrong acceptance
    rule shows as accepts more (z > 0) or less (z < 0) often than a correct one would (β: the
    drafted token's min(1, p/q) where recorded, else Σ min(p, q); see `acceptance_indicators`).
    `records` may also be the frame from `acceptance_indicators`."""
    table = records if isinstance(records, pd.DataFrame) else acceptance_indicators(records, scores)
    if len(table) == 0:
        return ZTestResult("acceptance", math.nan, math.nan, 0, alpha, "normal (martingale CLT)")
    beta = table["beta"].to_numpy(float).clip(0.0, 1.0)
    accepted = table["accepted"].to_numpy(float)
    # A rejection where acceptance was certain (p ≥ q) or an acceptance where it was impossible
    # cannot happen under a correct verifier: proof, not evidence (the z-sum would ignore them).
    impossible = ((beta >= 1.0) & (accepted == 0)) | ((beta <= 0.0) & (accepted == 1))
    if impossible.any():
        sign = 1.0 if (accepted - beta)[impossible].sum() > 0 else -1.0
        return ZTestResult(
            "acceptance", sign * math.inf, 0.0, len(table), alpha, f"{int(impossible.sum())} impossible accept/reject decision(s)"
        )
    return _z_test("acceptance", accepted - beta, beta * (1 - beta), alpha)
