"""Helpers shared by the equivalence tests: the token frame, one engine, the sampling mode."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specaudit.contracts import EquivalenceStatus
from specaudit.errors import InputError
from specaudit.stats.scoring import TokenScores

GATE_TESTS = ("pit", "step_pit", "surprisal", "draft_affinity", "acceptance")
TWO_SAMPLE_TESTS = ("first_token", "length", "loglik", "ngram")

# Verdicts of an equivalence bound against a user's margin δ.
EQUIVALENT, NOT_SHOWN, DIFFERENT = "equivalent within delta", "not shown", "different"
# A test that could not reject whatever the data (see TwoSample): never reported as a pass.
NOT_RUN = EquivalenceStatus.NOT_RUN


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
            "these records were decoded greedily (temperature 0); goodness-of-fit needs sampling, use greedy_exactness for greedy runs"
        )


class HolmBattery:
    """What a battery of tests decided together by Holm: its `gate` table has one row per test
    with `holm_pvalue` and `reject`; the battery's p-value is the smallest adjusted one and its
    statistic the number of tests that reject."""

    gate: pd.DataFrame

    @property
    def pvalue(self) -> float:
        adjusted = self.gate["holm_pvalue"].to_numpy(float) if len(self.gate) else np.array([])
        return float(np.nanmin(adjusted)) if np.isfinite(adjusted).any() else math.nan

    @property
    def statistic(self) -> int:
        return int(self.gate["reject"].sum()) if len(self.gate) else 0
