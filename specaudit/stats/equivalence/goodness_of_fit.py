"""Is the speculative output distributed exactly as the target's? Tests, bounds and verdicts.

Everything here is a pure function of `TokenScores` (see `scoring.py`) and/or records; no
model runs here except through `greedy_exactness(model=...)`, which asks `scoring.logit_gaps`.

White-box conditional goodness-of-fit (exact under H0 for any model, one test over all tokens):
  - randomised PIT  u_t = F_t(x_t−) + V_t·p_t(x_t), V_t ~ U(0,1) seeded; i.i.d. U(0,1) under H0
    (Brockwell 2007). Tested with Anderson–Darling against the fully specified U(0,1) (gated:
    more weight in the tails, where a sharpened or flattened sampler moves the PIT) and
    Kolmogorov–Smirnov (reported alongside: the statistic the power planner speaks in);
  - surprisal martingale z = Σ(s_t − H_t) / sqrt(Σ Var_t), two-sided;
  - draft affinity z = Σ(q_t(x_t) − E_p[q_t]) / sqrt(Σ Var_p(q_t)), two-sided;
    both with p-values from their exact Monte Carlo null where the scores carry one (tokens
    redrawn from the scored p_t, `scoring.monte_carlo_null_draws`), else from N(0, 1);
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specaudit.errors import InputError
from specaudit.stats._results import (
    FAIL,
    PASS,
    SKIPPED,
    ImpossibleTokens,
    StatTestResult,
    ZTestResult,
    bh,
    frame_records,
    holm,
)
from specaudit.stats.equivalence._common import (
    GATE_TESTS,
    HolmBattery,
    _check_not_greedy,
    _frame,
    _one_engine,
)
from specaudit.stats.equivalence.token_tests import (
    _pit_test,
    acceptance_calibration,
    acceptance_indicators,
    draft_affinity,
    impossible_tokens,
    pit_values,
    step_pit_masses,
    step_pit_test,
    step_pit_values,
    surprisal_martingale,
)
from specaudit.stats.scoring import ATTRIBUTE_PREFIX, TokenScores, _audited, _field


# ============================================================================ the battery
@dataclass(frozen=True)
class GoodnessOfFit(HolmBattery):
    """The conditional goodness-of-fit battery for one engine.

    `tests` holds the overall results by name (see GATE_TESTS; absent when not applicable),
    `gate` the Holm-adjusted decision table, `by_group` the per-prompt / per-group diagnostics
    with BH q-values. `pvalue` is the smallest Holm-adjusted p-value (the battery's family-wise
    p-value); `verdict` is FAIL on any impossible token or any Holm rejection.
    """

    engine: str
    alpha: float
    n_tokens: int
    tests: Mapping[str, StatTestResult]
    impossible: ImpossibleTokens
    gate: pd.DataFrame
    by_group: pd.DataFrame = field(repr=False)

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
    null = (scores.monte_carlo_null or {}) if isinstance(scores, TokenScores) else {}
    frame, engine = _one_engine(_frame(scores), engine)
    frame = frame.reset_index(drop=True)
    u = pit_values(frame, seed)
    possible = frame["p"].to_numpy(float) > 0
    has_draft = "q" in frame and frame["q"].notna().any()
    # Scores from a server's top-N logprobs have no entropy (it needs all of p_t): the
    # martingale is then not applicable and left out, like draft affinity without a draft.
    has_entropy = bool(frame["surprisal_var"].notna().any())
    table = None
    step_u = step_f = np.full(len(frame), np.nan)
    if records is not None:
        own = [r for r in _audited(records) if str(_field(r, "engine")) == engine]
        table = acceptance_indicators(own, frame)
        step_u = step_pit_values(frame, own, seed)
        step_f = step_pit_masses(frame, own)[1]
    has_step = ~np.isnan(step_u)

    def battery(mask: np.ndarray, accept_rows: pd.DataFrame | None) -> dict[str, StatTestResult]:
        sub = frame[mask & possible]
        out: dict[str, StatTestResult] = {"pit": _pit_test(u[mask & possible], alpha, bins)}
        if has_step.any():  # every token of the engine's records, impossible ones included (u = 1)
            out["step_pit"] = step_pit_test(step_u[mask & has_step], step_f[mask & has_step], alpha, bins)
        if has_entropy:
            out["surprisal"] = surprisal_martingale(sub, alpha=alpha, null=null.get("surprisal"))
        if has_draft:
            out["draft_affinity"] = (
                draft_affinity(sub, alpha=alpha, null=null.get("draft_affinity"))
                if sub["q"].notna().any()
                else ZTestResult("draft_affinity", math.nan, math.nan, 0, alpha)
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
    return GoodnessOfFit(engine, alpha, len(frame), tests, impossible_tokens(frame), gate, by_group)
