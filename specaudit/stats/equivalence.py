"""Is the speculative output distributed exactly as the target's? Tests, bounds and verdicts.

Everything here is a pure function of `TokenScores` (see `scoring.py`) and/or records; no
model runs here except through `greedy_exactness(model=...)`, which asks `scoring.logit_gaps`.

White-box conditional goodness-of-fit (exact under H0 for any model, one test over all tokens):
  - randomised PIT  u_t = F_t(x_t−) + V_t·p_t(x_t), V_t ~ U(0,1) seeded; i.i.d. U(0,1) under H0
    (Brockwell 2007). Tested with Anderson–Darling against the fully specified U(0,1) (gated:
    more weight in the tails, where a sharpened or flattened sampler moves the PIT) and
    Kolmogorov–Smirnov (reported alongside: the statistic the power planner speaks in);
  - surprisal martingale z = Σ(s_t − H_t) / sqrt(Σ Var_t) ~ N(0,1), two-sided;
  - draft affinity z = Σ(q_t(x_t) − E_p[q_t]) / sqrt(Σ Var_p(q_t)) ~ N(0,1), two-sided;
  - acceptance calibration z = Σ(a_i − β_i) / sqrt(Σ β_i(1−β_i)) over drafted positions reached,
    β_i the probability a correct verifier accepts: min(1, p/q) of the drafted token where the
    engine recorded it, else Σ min(p, q);
  - step PIT: the randomised PIT of each speculative token under the law its role in the
    verification step implies (accepted draft: min(p, q)/β; correction: the residual
    normalise(max(0, p − q)); bonus: p), from the [F(x−), f(x)] our engine records per token with
    the p and q its verifier was given (`verify.step_pit`). Where the plain PIT sees the mixture
    of the three, this one sees each part: a wrong residual emits tokens the residual gives zero
    mass (u = 1), a wrong acceptance rule bends the accepted tokens' law;
  - impossible tokens (p_t(x_t) = 0): a hard failure, named by record key and position.
  Tokens with p_t(x_t) = 0 are left out of the continuous tests (they are reported, and fail,
  on their own) so the other statistics stay informative.

Family-wise rule: the gate is Holm over the overall tests in GATE_TESTS that could run, at α;
any impossible token fails regardless. Per-prompt and per-group results are diagnostics: their
p-values get Benjamini–Hochberg q-values (scipy.stats.false_discovery_control) across all
groups and tests, and a group is flagged at q < α; flags do not change the gate's verdict.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special as _sp
from scipy import stats as _st

from specaudit.errors import InputError
from specaudit.stats._results import (
    FAIL,
    PASS,
    SKIPPED,
    ConfidenceInterval,
    ImpossibleTokens,
    PITResult,
    StatTestResult,
    ZTestResult,
    bh,
    frame_records,
    holm,
)
from specaudit.stats.disparity import _reached_positions  # the one rule for which drafted positions a step reached
from specaudit.stats.scoring import ATTRIBUTE_PREFIX, TokenScores, _audited, _field

GATE_TESTS = ("pit", "step_pit", "surprisal", "draft_affinity", "acceptance")
TWO_SAMPLE_TESTS = ("first_token", "length", "loglik", "ngram")

# Verdicts of an equivalence bound against a user's margin δ.
EQUIVALENT, NOT_SHOWN, DIFFERENT = "equivalent within delta", "not shown", "different"


# ============================================================================ helpers
def _frame(scores: TokenScores | pd.DataFrame) -> pd.DataFrame:
    frame = scores.tokens if isinstance(scores, TokenScores) else scores
    if not isinstance(frame, pd.DataFrame) or "p" not in frame:
        raise InputError("expected TokenScores from specaudit.stats.score_records (or its .tokens frame)")
    return frame


def _one_engine(frame: pd.DataFrame, engine: str | None) -> tuple[pd.DataFrame, str]:
    engines = sorted(frame["engine"].unique().tolist())
    if engine is None:
        if len(engines) != 1:
            raise InputError(f"scores hold engines {engines}; pass engine= to test one of them")
        engine = engines[0]
    elif engine not in engines:
        raise InputError(f"no scores for engine {engine!r}; scored engines are {engines}")
    return frame[frame["engine"] == engine], engine


def _check_not_greedy(scores: TokenScores | pd.DataFrame) -> None:
    spec = getattr(scores, "spec", None)
    if spec is not None and spec.greedy:
        raise InputError(
            "these records were decoded greedily (temperature 0); goodness-of-fit needs sampling, "
            "use greedy_exactness for greedy runs"
        )


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
    parts = {}
    for record in _audited(records):
        values = _field(record, "step_pit")
        if values:
            key = str(_field(record, "key"))
            values = np.asarray(values, dtype=float).reshape(-1, 2)
            if len(values) != len(_field(record, "output_token_ids") or []):
                raise InputError(f"record {key!r}: step_pit has {len(values)} entries for {len(_field(record, 'output_token_ids') or [])} "
                                 "output tokens; the records file is inconsistent")
            parts[key] = values
    below = np.full(len(frame), np.nan)
    own = np.full(len(frame), np.nan)
    if parts:
        positions = frame["position"].to_numpy(int)
        for key, rows in frame.groupby(frame["key"].astype(str), sort=False).indices.items():
            if key in parts:
                below[rows], own[rows] = parts[key][positions[rows]].T
    return np.clip(below + _pit_draws(frame, seed) * own, 0.0, 1.0)


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


def surprisal_martingale(scores: TokenScores | pd.DataFrame, *, alpha: float = 0.05) -> ZTestResult:
    """z = Σ(−log p_t(x_t) − H_t) / sqrt(Σ Var_t) over possible tokens; negative z = output more
    predictable than the target's (e.g. pulled toward a lower-entropy draft)."""
    frame = _frame(scores)
    frame = frame[frame["p"] > 0]
    return _z_test("surprisal", frame["surprisal"] - frame["entropy"], frame["surprisal_var"], alpha)


def draft_affinity(scores: TokenScores | pd.DataFrame, *, alpha: float = 0.05) -> ZTestResult:
    """z = Σ(q_t(x_t) − E_{p_t}[q_t]) / sqrt(Σ Var_{p_t}(q_t)); positive z = output pulled toward
    the draft. Needs scores computed with `draft_model=`."""
    frame = _frame(scores)
    if "q" not in frame or frame["q"].isna().all():
        raise InputError("draft affinity needs draft scores; call score_records(..., draft_model=draft)")
    frame = frame[(frame["p"] > 0) & frame["q"].notna()]
    return _z_test("draft_affinity", frame["q"] - frame["q_mean"], frame["q_var"], alpha)


def impossible_tokens(scores: TokenScores | pd.DataFrame) -> ImpossibleTokens:
    """Emitted tokens with warped target probability exactly 0 (outside top-k/top-p, or masked)."""
    frame = _frame(scores)
    bad = frame[frame["p"] <= 0]
    offenders = tuple((str(k), int(t), int(x)) for k, t, x in zip(bad["key"], bad["position"], bad["token"]))
    return ImpossibleTokens(offenders, len(frame))


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
        return ZTestResult("acceptance", sign * math.inf, 0.0, len(table), alpha,
                           f"{int(impossible.sum())} impossible accept/reject decision(s)")
    return _z_test("acceptance", accepted - beta, beta * (1 - beta), alpha)


# ============================================================================ the battery
@dataclass(frozen=True)
class GoodnessOfFit:
    """The conditional goodness-of-fit battery for one engine.

    `tests` holds the overall results by name (see GATE_TESTS; absent when not applicable),
    `gate` the Holm-adjusted decision table, `by_group` the per-prompt / per-group diagnostics
    with BH q-values. `pvalue` is the smallest Holm-adjusted p-value (the battery's family-wise
    p-value); `verdict` is "fail" on any impossible token or any Holm rejection.
    """

    engine: str
    alpha: float
    n_tokens: int
    tests: Mapping[str, StatTestResult]
    impossible: ImpossibleTokens
    gate: pd.DataFrame
    by_group: pd.DataFrame = field(repr=False)

    @property
    def pvalue(self) -> float:
        adjusted = self.gate["holm_pvalue"].to_numpy(float) if len(self.gate) else np.array([])
        return float(np.nanmin(adjusted)) if np.isfinite(adjusted).any() else math.nan

    @property
    def statistic(self) -> int:
        return int(self.gate["reject"].sum()) if len(self.gate) else 0

    @property
    def verdict(self) -> str:
        if self.impossible.verdict == FAIL:
            return FAIL
        if self.n_tokens == 0 or not np.isfinite(self.pvalue):
            return SKIPPED
        return FAIL if self.statistic > 0 else PASS

    @property
    def flagged(self) -> pd.DataFrame:
        return self.by_group[self.by_group["flagged"]] if len(self.by_group) else self.by_group

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "alpha": self.alpha,
            "n_tokens": self.n_tokens,
            "verdict": self.verdict,
            "pvalue": None if not np.isfinite(self.pvalue) else self.pvalue,
            "tests": {name: result.to_dict() for name, result in self.tests.items()},
            "impossible_tokens": self.impossible.to_dict(),
            "gate": frame_records(self.gate),
            "flagged_groups": frame_records(self.flagged),
        }


def _gate_table(results: Mapping[str, Any], names: Sequence[str], alpha: float) -> pd.DataFrame:
    present = [n for n in names if n in results and np.isfinite(results[n].pvalue)]
    p = np.array([results[n].pvalue for n in present], dtype=float)
    adjusted = holm(p)
    return pd.DataFrame(
        {
            "test": present,
            "statistic": [float(results[n].statistic) for n in present],
            "pvalue": p,
            "holm_pvalue": adjusted,
            "reject": adjusted < alpha,
        }
    )


def _dimensions(frame: pd.DataFrame, by: Sequence[str] | None) -> list[str]:
    if by is None:
        return ["prompt_id"] + sorted(c for c in frame.columns if c.startswith(ATTRIBUTE_PREFIX))
    out = []
    for name in by:
        column = name if name in frame.columns or name == "prompt_id" else ATTRIBUTE_PREFIX + name
        if column not in frame.columns:
            raise InputError(f"cannot group by {name!r}: no such column or prompt attribute in the scores")
        out.append(column)
    return out


def goodness_of_fit(
    scores: TokenScores | pd.DataFrame,
    records: Iterable[Any] | None = None,
    *,
    engine: str | None = None,
    by: Sequence[str] | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    bins: int = 20,
) -> GoodnessOfFit:
    """Run the white-box battery on one engine's scores, overall and per group.

    `records` (optional) supply accepted_per_step/beta for acceptance calibration. `by` lists
    grouping columns ("prompt_id" or attribute names); default: prompt_id and every attribute.
    """
    _check_not_greedy(scores)
    frame, engine = _one_engine(_frame(scores), engine)
    frame = frame.reset_index(drop=True)
    u = pit_values(frame, seed)
    possible = frame["p"].to_numpy(float) > 0
    has_draft = "q" in frame and frame["q"].notna().any()
    # Scores from a server's top-N logprobs have no entropy (it needs all of p_t): the
    # martingale is then not applicable and left out, like draft affinity without a draft.
    has_entropy = bool(frame["surprisal_var"].notna().any())
    table = None
    step_u = np.full(len(frame), np.nan)
    if records is not None:
        own = [r for r in _audited(records) if str(_field(r, "engine")) == engine]
        table = acceptance_indicators(own, frame)
        step_u = step_pit_values(frame, own, seed)
    has_step = ~np.isnan(step_u)

    def battery(mask: np.ndarray, accept_rows: pd.DataFrame | None) -> dict[str, StatTestResult]:
        sub = frame[mask & possible]
        out: dict[str, StatTestResult] = {"pit": _pit_test(u[mask & possible], alpha, bins)}
        if has_step.any():  # every token of the engine's records, impossible ones included (u = 1)
            out["step_pit"] = _pit_test(step_u[mask & has_step], alpha, bins, name="step_pit")
        if has_entropy:
            out["surprisal"] = surprisal_martingale(sub, alpha=alpha)
        if has_draft:
            out["draft_affinity"] = draft_affinity(sub, alpha=alpha) if sub["q"].notna().any() else ZTestResult(
                "draft_affinity", math.nan, math.nan, 0, alpha
            )
        if accept_rows is not None and len(accept_rows):
            out["acceptance"] = acceptance_calibration(accept_rows, alpha=alpha)
        return out

    everything = np.ones(len(frame), dtype=bool)
    tests = battery(everything, table)
    gate = _gate_table(tests, GATE_TESTS, alpha)

    group_rows = []
    for column in _dimensions(frame, by):
        for level, index in frame.groupby(column, sort=True, dropna=True).groups.items():
            mask = np.zeros(len(frame), dtype=bool)
            mask[np.asarray(index)] = True
            accept_rows = None
            if table is not None and len(table) and column in table:
                accept_rows = table[table[column] == level]
            for name, result in battery(mask, accept_rows).items():
                group_rows.append(
                    {
                        "dimension": column.removeprefix(ATTRIBUTE_PREFIX),
                        "group": level,
                        "test": name,
                        "n": result.n,
                        "statistic": float(result.statistic),
                        "pvalue": float(result.pvalue),
                    }
                )
    by_group = pd.DataFrame(group_rows, columns=["dimension", "group", "test", "n", "statistic", "pvalue"])
    by_group["qvalue"] = bh(by_group["pvalue"].to_numpy(float)) if len(by_group) else []
    by_group["flagged"] = by_group["qvalue"] < alpha
    return GoodnessOfFit(engine, alpha, int(len(frame)), tests, impossible_tokens(frame), gate, by_group)


# ============================================================================ two-sample
def _permuted_labels(n_engine: int, n_total: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Row 0: the observed labels (engine first); rows 1..B: within-prompt permutations."""
    observed = np.zeros(n_total, dtype=bool)
    observed[:n_engine] = True
    labels = np.tile(observed, (n_resamples + 1, 1))
    labels[1:] = rng.permuted(labels[1:], axis=1)
    return labels


def _one_hot(codes: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((codes.size, width))
    out[np.arange(codes.size), codes] = 1.0
    return out


def _g_statistic(categories: Sequence[Any], labels: np.ndarray) -> np.ndarray:
    """G = 2 Σ O log(O/E) of the 2×m table (engine × category), for every label row."""
    _, codes = np.unique(np.asarray(categories), return_inverse=True)
    onehot = _one_hot(codes.reshape(-1), int(codes.max()) + 1)
    lab = labels.astype(float)
    a = lab @ onehot
    total = onehot.sum(axis=0)
    b = total - a
    n = labels.shape[1]
    n_a = lab.sum(axis=1, keepdims=True)
    e_a, e_b = total * n_a / n, total * (n - n_a) / n
    return 2 * (_sp.xlogy(a, a) - _sp.xlogy(a, e_a) + _sp.xlogy(b, b) - _sp.xlogy(b, e_b)).sum(axis=1)


def _ad_statistic(values: Sequence[float], labels: np.ndarray) -> np.ndarray:
    """Two-sample Anderson–Darling A²_akN (Scholz & Stephens 1987, midrank version for ties),
    for every label row. Constant data give 0."""
    _, codes, ties = np.unique(np.asarray(values, dtype=float), return_inverse=True, return_counts=True)
    n = labels.shape[1]
    onehot = _one_hot(codes.reshape(-1), ties.size)
    lab = labels.astype(float)
    f1 = lab @ onehot
    f2 = ties - f1
    n1 = lab.sum(axis=1, keepdims=True)
    n2 = n - n1
    b_mid = np.cumsum(ties) - ties / 2
    m1 = np.cumsum(f1, axis=1) - f1 / 2
    m2 = np.cumsum(f2, axis=1) - f2 / 2
    denominator = b_mid * (n - b_mid) - n * ties / 4
    ok = denominator > 1e-12
    weight = np.where(ok, ties / n / np.where(ok, denominator, 1.0), 0.0)
    term1 = (weight * (n * m1 - n1 * b_mid) ** 2).sum(axis=1) / n1[:, 0]
    term2 = (weight * (n * m2 - n2 * b_mid) ** 2).sum(axis=1) / n2[:, 0]
    return (n - 1) / n * (term1 + term2)


def _ngrams(tokens: Sequence[int]) -> tuple[Counter, Counter]:
    tokens = [int(t) for t in tokens]
    return Counter(tokens), Counter(zip(tokens, tokens[1:]))


def _ngram_statistic(outputs: Sequence[Sequence[int]], labels: np.ndarray) -> np.ndarray:
    """Σ over n = 1, 2 of the L1 distance between the two engines' normalised n-gram profiles."""
    lab = labels.astype(float)
    total = np.zeros(labels.shape[0])
    profiles = [_ngrams(o) for o in outputs]
    for order in range(2):
        vocabulary: dict[Any, int] = {}
        for profile in profiles:
            for gram in profile[order]:
                vocabulary.setdefault(gram, len(vocabulary))
        if not vocabulary:
            continue
        counts = np.zeros((len(outputs), len(vocabulary)))
        for i, profile in enumerate(profiles):
            for gram, c in profile[order].items():
                counts[i, vocabulary[gram]] = c
        a = lab @ counts
        b = counts.sum(axis=0) - a
        sa, sb = a.sum(axis=1, keepdims=True), b.sum(axis=1, keepdims=True)
        a = np.divide(a, sa, out=np.zeros_like(a), where=sa > 0)
        b = np.divide(b, sb, out=np.zeros_like(b), where=sb > 0)
        total += np.abs(a - b).sum(axis=1)
    return total


def _permutation_pvalue(stats: np.ndarray) -> float:
    """(1 + #{b: T_b ≥ T_obs}) / (1 + B), with a relative tolerance so exact ties count as ≥."""
    observed = stats[0]
    tolerance = 1e-9 * max(1.0, abs(observed))
    return float((1 + np.sum(stats[1:] >= observed - tolerance)) / stats.size)


@dataclass(frozen=True)
class TwoSample:
    """Black-box two-sample comparison of `engine` against `reference` on the same prompts.

    `tests` holds each statistic combined across prompts (sum of per-prompt statistics,
    p-value by permuting engine labels within every prompt at once: a stratified permutation
    test, exact at any sample size). `gate` is Holm over those; `by_prompt` and `by_group`
    carry BH q-values across prompts/groups (diagnostics).
    """

    engine: str
    reference: str
    alpha: float
    n_prompts: int
    tests: Mapping[str, StatTestResult]
    gate: pd.DataFrame
    by_prompt: pd.DataFrame = field(repr=False)
    by_group: pd.DataFrame = field(repr=False)

    @property
    def pvalue(self) -> float:
        adjusted = self.gate["holm_pvalue"].to_numpy(float) if len(self.gate) else np.array([])
        return float(np.nanmin(adjusted)) if np.isfinite(adjusted).any() else math.nan

    @property
    def statistic(self) -> int:
        return int(self.gate["reject"].sum()) if len(self.gate) else 0

    @property
    def verdict(self) -> str:
        if not np.isfinite(self.pvalue):
            return SKIPPED
        return FAIL if self.statistic > 0 else PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "reference": self.reference,
            "alpha": self.alpha,
            "n_prompts": self.n_prompts,
            "verdict": self.verdict,
            "pvalue": None if not np.isfinite(self.pvalue) else self.pvalue,
            "tests": {name: result.to_dict() for name, result in self.tests.items()},
            "gate": frame_records(self.gate),
            "flagged_prompts": frame_records(self.by_prompt[self.by_prompt["flagged"]]),
            "flagged_groups": frame_records(self.by_group[self.by_group["flagged"]]),
        }


def _split_by_prompt(records: Iterable[Any], engine: str, reference: str) -> dict[str, tuple[list[Any], list[Any]]]:
    pairs: dict[str, tuple[list[Any], list[Any]]] = defaultdict(lambda: ([], []))
    for r in _audited(records):
        eng = str(_field(r, "engine"))
        if eng in (engine, reference):
            pairs[str(_field(r, "prompt_id"))][0 if eng == engine else 1].append(r)
    return {pid: sides for pid, sides in sorted(pairs.items()) if sides[0] and sides[1]}


def _first_token_pvalue(categories: list[Any], labels: np.ndarray, stats: np.ndarray, n_resamples: int) -> tuple[float, str]:
    """Asymptotic χ² for G when every expected count is ≥ 5 (Cochran), permutation otherwise."""
    values, counts = np.unique(np.asarray(categories), return_counts=True)
    n, n_a = labels.shape[1], int(labels[0].sum())
    if values.size < 2:
        return 1.0, "degenerate (one category)"
    expected_min = counts.min() * min(n_a, n - n_a) / n
    if expected_min >= 5:
        return float(_st.chi2.sf(stats[0], values.size - 1)), "asymptotic chi2"
    return _permutation_pvalue(stats), f"permutation ({n_resamples})"


def two_sample(
    records: Iterable[Any],
    scores: TokenScores | pd.DataFrame | None = None,
    *,
    engine: str = "speculative",
    reference: str = "vanilla",
    by: Sequence[str] | None = None,
    alpha: float = 0.05,
    n_resamples: int = 999,
    seed: int = 0,
) -> TwoSample:
    """Compare `engine`'s outputs with `reference`'s on the prompts both decoded.

    Per prompt: first output token (G-test), output length and sequence log-likelihood under
    the warped target (two-sample Anderson–Darling; the latter needs `scores` of both
    engines), unigram+bigram profiles (L1 distance). One set of within-prompt label
    permutations serves all four statistics. `by` lists attribute dimensions for group results.
    """
    records = list(records)
    prompts = _split_by_prompt(records, engine, reference)
    if not prompts:
        raise InputError(
            f"no prompt has records of both {engine!r} and {reference!r}; run both engines on the same prompts"
        )
    loglik: dict[str, float] | None = None
    if scores is not None:
        frame = _frame(scores)
        loglik = (-frame.groupby("key")["surprisal"].sum()).to_dict()
    rng = np.random.default_rng(seed)
    per_prompt: dict[str, dict[str, np.ndarray]] = {}
    rows = []
    attributes: dict[str, Mapping[str, Any]] = {}
    for pid, (mine, theirs) in prompts.items():
        items = mine + theirs
        attributes[pid] = _field(items[0], "attributes") or {}
        labels = _permuted_labels(len(mine), len(items), n_resamples, rng)
        outputs = [list(_field(r, "output_token_ids") or []) for r in items]
        firsts = [o[0] if o else -1 for o in outputs]  # -1: empty output, a category of its own
        stats = {
            "first_token": _g_statistic(firsts, labels),
            "length": _ad_statistic([len(o) for o in outputs], labels),
            "ngram": _ngram_statistic(outputs, labels),
        }
        if loglik is not None:
            keys = [str(_field(r, "key")) for r in items]
            missing = [k for k, o in zip(keys, outputs) if o and k not in loglik]
            if missing:
                raise InputError(
                    f"scores lack record {missing[0]!r} (and {len(missing) - 1} more); score both engines' records"
                )
            stats["loglik"] = _ad_statistic([loglik.get(k, 0.0) for k in keys], labels)
        per_prompt[pid] = stats
        for name, values in stats.items():
            if name == "first_token":
                p, method = _first_token_pvalue(firsts, labels, values, n_resamples)
            else:
                p, method = _permutation_pvalue(values), f"permutation ({n_resamples})"
            rows.append(
                {
                    "prompt_id": pid,
                    "test": name,
                    "statistic": float(values[0]),
                    "pvalue": p,
                    "method": method,
                    "n_engine": len(mine),
                    "n_reference": len(theirs),
                }
            )
    by_prompt = pd.DataFrame(rows)
    by_prompt["qvalue"] = bh(by_prompt["pvalue"].to_numpy(float))
    by_prompt["flagged"] = by_prompt["qvalue"] < alpha

    def combined(pids: Sequence[str]) -> dict[str, StatTestResult]:
        out = {}
        for name in TWO_SAMPLE_TESTS:
            parts = [per_prompt[p][name] for p in pids if name in per_prompt[p]]
            if not parts:
                continue
            total = np.sum(parts, axis=0)
            n = sum(len(prompts[p][0]) + len(prompts[p][1]) for p in pids)
            out[name] = StatTestResult(name, float(total[0]), _permutation_pvalue(total), n, alpha, f"stratified permutation ({n_resamples})")
        return out

    tests = combined(list(prompts))
    gate = _gate_table(tests, TWO_SAMPLE_TESTS, alpha)
    group_rows = []
    for dim in by or ():
        levels: dict[Any, list[str]] = defaultdict(list)
        for pid in prompts:
            if dim in attributes[pid]:
                levels[attributes[pid][dim]].append(pid)
        for level, pids in sorted(levels.items(), key=lambda kv: str(kv[0])):
            for name, result in combined(pids).items():
                group_rows.append(
                    {"dimension": dim, "group": level, "test": name, "n": result.n, "statistic": result.statistic, "pvalue": result.pvalue}
                )
    by_group = pd.DataFrame(group_rows, columns=["dimension", "group", "test", "n", "statistic", "pvalue"])
    by_group["qvalue"] = bh(by_group["pvalue"].to_numpy(float)) if len(by_group) else []
    by_group["flagged"] = by_group["qvalue"] < alpha
    return TwoSample(engine, reference, alpha, len(prompts), tests, gate, by_prompt, by_group)


# ============================================================================ greedy exactness
# Relative tolerance on |logit_a − logit_b| / max|logit| below which a greedy divergence is a
# floating-point near-tie. Batched vs incremental forward passes reorder float sums: in float32
# the logit error is ~1e-6..1e-5 relative (a few hundred ulps through a deep network), so 1e-3
# leaves two orders of margin yet stays far below the gaps a real bug leaves (O(0.1–1) logits).
# bf16/fp16 keep 8/11 mantissa bits (relative rounding 4e-3/5e-4 per operation), so the
# tolerance must be an order larger there.
GREEDY_REL_TOLERANCE = {"float64": 1e-6, "float32": 1e-3, "float16": 2e-2, "bfloat16": 3e-2}


@dataclass(frozen=True)
class GreedyExactness:
    """Greedy `engine` vs greedy `reference` outputs of the same prompts.

    `statistic` is the exact-match rate over pairs; `divergences` has one row per mismatching
    pair: position of the first divergence, both tokens, the target's logit gap between them at
    the reference prefix, the top-2 gap, the tolerance, and `classification`: "near-tie"
    (benign, explained by float non-associativity), "clear" (a bug), "length" (one output is a
    strict prefix of the other) or "unexplained" (no model to compute the gap).
    Verdict: "pass" iff every divergence is a near-tie.
    """

    engine: str
    reference: str
    n_pairs: int
    n_matches: int
    divergences: pd.DataFrame = field(repr=False)

    @property
    def statistic(self) -> float:
        return self.n_matches / self.n_pairs if self.n_pairs else math.nan

    @property
    def match_rate(self) -> float:
        return self.statistic

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Clopper–Pearson interval for the exact-match rate."""
        if self.n_pairs == 0:
            return ConfidenceInterval(math.nan, math.nan)
        ci = _st.binomtest(self.n_matches, self.n_pairs).proportion_ci(confidence_level, method="exact")
        return ConfidenceInterval(float(ci.low), float(ci.high))

    @property
    def verdict(self) -> str:
        if self.n_pairs == 0:
            return SKIPPED
        benign = (self.divergences["classification"] == "near-tie").all() if len(self.divergences) else True
        return PASS if benign else FAIL

    def to_dict(self) -> dict[str, Any]:
        ci = self.confidence_interval()
        return {
            "engine": self.engine,
            "reference": self.reference,
            "n_pairs": self.n_pairs,
            "n_matches": self.n_matches,
            "match_rate": None if self.n_pairs == 0 else self.statistic,
            "ci_low": None if math.isnan(ci.low) else ci.low,
            "ci_high": None if math.isnan(ci.high) else ci.high,
            "verdict": self.verdict,
            "divergences": frame_records(self.divergences),
        }


def _default_rel_tolerance(model: Any) -> float:
    try:
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    except (StopIteration, AttributeError):
        dtype = "float32"
    return GREEDY_REL_TOLERANCE.get(dtype, GREEDY_REL_TOLERANCE["float32"])


def greedy_exactness(
    records: Iterable[Any],
    model: Any = None,
    *,
    engine: str = "speculative",
    reference: str = "vanilla",
    rel_tolerance: float | None = None,
    batch_size: int = 8,
    device: Any = None,
) -> GreedyExactness:
    """Compare each `engine` record with the `reference` record of the same prompt (its lowest
    sample index). With `model` (the target), each divergence gets its logit gap, computed by
    teacher-forcing the reference's prefix up to the divergence; near-tie when
    gap ≤ rel_tolerance · max|logit| (default by the model's dtype: GREEDY_REL_TOLERANCE)."""
    records = [r for r in _audited(records) if str(_field(r, "engine")) in (engine, reference)]
    for r in records:
        sampling = _field(r, "sampling")
        temperature = getattr(sampling, "temperature", None) if not isinstance(sampling, Mapping) else sampling.get("temperature")
        if temperature not in (None, 0, 0.0):
            raise InputError(
                f"record {_field(r, 'key')!r} was sampled at temperature {temperature}; greedy exactness "
                "compares greedy runs only (use goodness_of_fit or two_sample for sampled runs)"
            )
    references: dict[str, Any] = {}
    for r in sorted((r for r in records if str(_field(r, "engine")) == reference), key=lambda r: int(_field(r, "sample", 0) or 0)):
        references.setdefault(str(_field(r, "prompt_id")), r)
    pairs = [
        (r, references[str(_field(r, "prompt_id"))])
        for r in records
        if str(_field(r, "engine")) == engine and str(_field(r, "prompt_id")) in references
    ]
    if not pairs:
        raise InputError(f"no prompt has greedy records of both {engine!r} and {reference!r}; run both engines")
    rows, prefixes, firsts, seconds = [], [], [], []
    n_matches = 0
    for mine, theirs in pairs:
        a = list(_field(theirs, "output_token_ids") or [])
        b = list(_field(mine, "output_token_ids") or [])
        if a == b:
            n_matches += 1
            continue
        common = min(len(a), len(b))
        position = next((t for t in range(common) if a[t] != b[t]), common)
        row = {
            "key": str(_field(mine, "key")),
            "reference_key": str(_field(theirs, "key")),
            "prompt_id": str(_field(mine, "prompt_id")),
            "position": position,
            "token": b[position] if position < len(b) else None,
            "reference_token": a[position] if position < len(a) else None,
            "logit_gap": math.nan,
            "top2_gap": math.nan,
            "scale": math.nan,
            "tolerance": math.nan,
            "classification": "length" if position == common else "unexplained",
        }
        if position < common:
            prefixes.append(list(_field(theirs, "prompt_token_ids") or []) + a[:position])
            firsts.append(a[position])
            seconds.append(b[position])
            row["_gap_index"] = len(prefixes) - 1
        rows.append(row)
    if model is not None and prefixes:
        from specaudit.stats.scoring import logit_gaps  # keep the import local: scoring pulls in torch models

        gaps = logit_gaps(model, prefixes, firsts, seconds, batch_size=batch_size, device=device)
        tolerance = _default_rel_tolerance(model) if rel_tolerance is None else float(rel_tolerance)
        for row in rows:
            if "_gap_index" not in row:
                continue
            g = gaps.iloc[row["_gap_index"]]
            allowed = tolerance * max(float(g["scale"]), 1.0)
            row.update(
                logit_gap=float(g["gap"]),
                top2_gap=float(g["top2_gap"]),
                scale=float(g["scale"]),
                tolerance=allowed,
                classification="near-tie" if float(g["gap"]) <= allowed else "clear",
            )
    for row in rows:
        row.pop("_gap_index", None)
    columns = ["key", "reference_key", "prompt_id", "position", "token", "reference_token", "logit_gap", "top2_gap", "scale", "tolerance", "classification"]
    divergences = pd.DataFrame(rows, columns=columns)
    return GreedyExactness(engine, reference, len(pairs), n_matches, divergences)


# ============================================================================ equivalence bounds
@dataclass(frozen=True)
class TVBound:
    """Upper confidence bound on the total-variation distance at one output position.

    The distance is the mean over prompts of TV(engine's distribution of the token at
    `position`, reference distribution): exactly the target's (white-box, from scores) or the
    reference engine's (black-box). `estimate` is the plug-in value, `upper` a 1−α upper bound
    (McDiarmid: valid at any vocabulary size and sample count, conservative because the plug-in
    is biased upward), `kl_upper` a bound on the mean KL(engine ‖ target) (first token,
    white-box only; see `tv_bound`). `pvalue` tests equality at that position. Verdict against
    the margin `delta`: "equivalent within delta" if upper ≤ δ, else "different" if p < α, else
    "not shown".
    """

    reference: str
    position: int
    estimate: float
    upper: float
    kl_upper: float
    pvalue: float
    n_samples: int
    n_prompts: int
    alpha: float
    delta: float | None = None

    @property
    def statistic(self) -> float:
        return self.estimate

    def confidence_interval(self) -> ConfidenceInterval:
        """One-sided 1−α interval [0, upper]."""
        return ConfidenceInterval(0.0, self.upper)

    @property
    def verdict(self) -> str:
        if self.n_samples == 0:
            return SKIPPED
        if self.delta is not None and self.upper <= self.delta:
            return EQUIVALENT
        if np.isfinite(self.pvalue) and self.pvalue < self.alpha:
            return DIFFERENT
        return NOT_SHOWN

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "position": self.position,
            "estimate": self.estimate,
            "upper": self.upper,
            "kl_upper": self.kl_upper if math.isfinite(self.kl_upper) else None,
            "pvalue": self.pvalue if math.isfinite(self.pvalue) else None,
            "n_samples": self.n_samples,
            "n_prompts": self.n_prompts,
            "alpha": self.alpha,
            "delta": self.delta,
            "verdict": self.verdict,
        }


def _mcdiarmid_margin(difference_bound: float, per_prompt_n: Sequence[float], alpha: float) -> float:
    """ε with P(mean_j TV̂_j ≤ E − ε) ≤ α when one sample of prompt j moves TV̂_j by at most
    difference_bound / n_j: ε = (c / P)·sqrt(log(1/α)/2 · Σ_j 1/n_j)."""
    n = np.asarray(per_prompt_n, dtype=float)
    return difference_bound / n.size * math.sqrt(math.log(1 / alpha) / 2 * float(np.sum(1 / n)))


def tv_bound(
    scores: TokenScores,
    *,
    engine: str | None = None,
    position: int = 0,
    delta: float | None = None,
    alpha: float = 0.05,
    seed: int = 0,
) -> TVBound:
    """White-box TV (and KL) upper bound between the engine's token at `position` and the target.

    Per prompt j with n_j records, TV̂_j = ½ Σ_x |#(x)/n_j − (1/n_j) Σ_i p_i(x)| where p_i is
    the warped target at record i's prefix (records that ended earlier contribute to neither
    side). Its expectation is at least the true pooled TV (convexity), and one record moves
    TV̂_j by ≤ 1/n_j at position 0 (the prefix is the prompt) or ≤ 2/n_j later (the prefix moves
    too), so McDiarmid gives the margin. KL (position 0): for s ≪ p on a support whose smallest
    probability is p_min, KL(s‖p) ≤ log(1 + χ²) ≤ log(1 + 2·TV²/p_min); averaged over prompts
    (concavity, TV² ≤ TV) ≤ log(1 + 2·upper/p_min). It is only finite-useful under top-k/top-p,
    where p_min is not astronomically small. `pvalue`: PIT (Anderson–Darling) of the tokens at
    that position, an exact test of equality.
    """
    if not isinstance(scores, TokenScores):
        raise InputError("tv_bound needs the TokenScores object from score_records (it uses position_mass)")
    _check_not_greedy(scores)
    frame, engine = _one_engine(scores.tokens, engine)
    mass = scores.position_mass[scores.position_mass["engine"] == engine]
    if len(mass) == 0 or position < 0:
        raise InputError(f"no per-position mass for engine {engine!r}; rescore with score_records")
    limit = int(mass["position"].max())
    if position > limit:
        raise InputError(f"position {position} is beyond the scored positions (≤ {limit}); rescore with a larger max_mass_position")
    n_records = mass.groupby("prompt_id")["n_records"].first()
    at = mass[mass["position"] == position]
    tv = {}
    for pid, n in n_records.items():
        rows = at[at["prompt_id"] == pid]
        if len(rows) == 0:
            tv[pid] = 0.0
            continue
        count, target_mass = rows["count"].to_numpy(float), rows["target_mass"].to_numpy(float)
        unseen = max(0.0, float(rows["n_reached"].iloc[0]) - target_mass.sum())
        tv[pid] = 0.5 * (np.abs(count - target_mass).sum() + unseen) / n
    estimate = float(np.mean(list(tv.values())))
    upper = min(1.0, estimate + _mcdiarmid_margin(1.0 if position == 0 else 2.0, n_records.to_numpy(), alpha))
    kl_upper = math.nan
    tokens_here = frame[frame["position"] == position]
    if position == 0 and len(tokens_here):
        if (tokens_here["p"] <= 0).any():
            kl_upper = math.inf
        else:
            p_min = float(tokens_here["p_min"].min())
            kl_upper = math.log1p(2 * upper / p_min)
    u = pit_values(frame.reset_index(drop=True), seed)[(frame["position"] == position).to_numpy()]
    pvalue = anderson_darling_uniform(u)[1] if u.size else math.nan
    if len(tokens_here) and (tokens_here["p"] <= 0).any():
        pvalue = 0.0  # an impossible token settles it
    return TVBound("target", position, estimate, upper, kl_upper, pvalue, int(n_records.sum()), len(n_records), alpha, delta)


def tv_bound_two_sample(
    records: Iterable[Any],
    *,
    engine: str = "speculative",
    reference: str = "vanilla",
    position: int = 0,
    delta: float | None = None,
    alpha: float = 0.05,
    n_resamples: int = 999,
    seed: int = 0,
) -> TVBound:
    """Black-box TV upper bound between the engine's and the reference engine's token at
    `position` (records that ended earlier count as the category "ended"), mean over prompts.
    One sample moves TV̂_j by ≤ 1/n_j of its side, so ε = (1/P)·sqrt(log(1/α)/2 · Σ_j
    (1/n_engine,j + 1/n_reference,j)). `pvalue`: stratified permutation G-test at `position`."""
    prompts = _split_by_prompt(records, engine, reference)
    if not prompts:
        raise InputError(f"no prompt has records of both {engine!r} and {reference!r}; run both engines")
    def token_at(record: Any) -> int:
        out = _field(record, "output_token_ids") or []
        return int(out[position]) if position < len(out) else -1  # -1: ended before `position`

    rng = np.random.default_rng(seed)
    tv, inverse_n, g_total = [], 0.0, None
    n_samples = 0
    for mine, theirs in prompts.values():
        a, b = [token_at(r) for r in mine], [token_at(r) for r in theirs]
        ca, cb = Counter(a), Counter(b)
        tv.append(0.5 * sum(abs(ca[x] / len(a) - cb[x] / len(b)) for x in set(ca) | set(cb)))
        inverse_n += 1 / len(a) + 1 / len(b)
        n_samples += len(a)
        labels = _permuted_labels(len(a), len(a) + len(b), n_resamples, rng)
        g = _g_statistic(a + b, labels)
        g_total = g if g_total is None else g_total + g
    estimate = float(np.mean(tv))
    upper = min(1.0, estimate + math.sqrt(math.log(1 / alpha) / 2 * inverse_n) / len(tv))
    return TVBound(reference, position, estimate, upper, math.nan, _permutation_pvalue(g_total), n_samples, len(tv), alpha, delta)


def tv_bound_profile(scores: TokenScores, *, engine: str | None = None, max_position: int | None = None, alpha: float = 0.05, delta: float | None = None, seed: int = 0) -> pd.DataFrame:
    """`tv_bound` at every scored position (0..max_position), one row each."""
    _, engine = _one_engine(scores.tokens, engine)
    mass = scores.position_mass[scores.position_mass["engine"] == engine]
    last = int(mass["position"].max()) if len(mass) else -1
    last = last if max_position is None else min(last, max_position)
    rows = [tv_bound(scores, engine=engine, position=t, alpha=alpha, delta=delta, seed=seed).to_dict() for t in range(last + 1)]
    return pd.DataFrame(rows)


__all__ = [
    "DIFFERENT",
    "EQUIVALENT",
    "GATE_TESTS",
    "GREEDY_REL_TOLERANCE",
    "NOT_SHOWN",
    "TWO_SAMPLE_TESTS",
    "GoodnessOfFit",
    "GreedyExactness",
    "TVBound",
    "TwoSample",
    "acceptance_calibration",
    "acceptance_indicators",
    "anderson_darling_uniform",
    "draft_affinity",
    "goodness_of_fit",
    "greedy_exactness",
    "impossible_tokens",
    "pit_uniformity",
    "pit_values",
    "surprisal_martingale",
    "tv_bound",
    "tv_bound_profile",
    "tv_bound_two_sample",
    "two_sample",
]
