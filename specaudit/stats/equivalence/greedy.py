"""Greedy exactness: token-for-token agreement with vanilla, divergences classified."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from scipy import stats as _st

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError
from specaudit.stats._results import (
    FAIL,
    PASS,
    SKIPPED,
    ConfidenceInterval,
    frame_records,
)
from specaudit.stats.scoring import _audited, _field

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
    Verdict: PASS iff every divergence is a near-tie.
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
    engine: str = SPECULATIVE_ENGINE,
    reference: str = CONTROL_ENGINE,
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
        from specaudit.stats.scoring import (
            logit_gaps,  # keep the import local: scoring pulls in torch models
        )

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
    columns = [
        "key",
        "reference_key",
        "prompt_id",
        "position",
        "token",
        "reference_token",
        "logit_gap",
        "top2_gap",
        "scale",
        "tolerance",
        "classification",
    ]
    divergences = pd.DataFrame(rows, columns=columns)
    return GreedyExactness(engine, reference, len(pairs), n_matches, divergences)
