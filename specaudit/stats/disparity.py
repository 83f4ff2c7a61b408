"""Who gets the speed-up: acceptance, speed-up and latency per prompt group, with uncertainty.

Input is the record table (one row per record of records.jsonl, attributes either expanded to
columns or left in an ``attributes`` dict column). Everything is computed per prompt first, then
per group, because the prompt is the unit that is sampled: tokens of one prompt are correlated,
so intervals come from the cluster bootstrap over prompts (``_bootstrap``) and tests use one
value per prompt.

Definitions (per prompt, summing the prompt's records of one engine):

- ``acceptance_rate`` α = Σ accepted / Σ proposed (vLLM's "draft acceptance rate").
- ``per_position_acceptance`` = Σ accepted / Σ drafted positions reached, a position being
  reached when every earlier position of its step was accepted. It is the maximum-likelihood
  estimate of the per-position acceptance probability of the i.i.d. model, which is the α that
  the speed-up formula (1 − α^(k+1)) / ((1 − α)(kc + 1)) expects; accepted / proposed is smaller
  because positions after a rejection count as proposed but were never tried.
- ``mean_accepted_tokens`` τ = (Σ accepted + Σ steps) / Σ steps, tokens emitted per verification
  step (Spec-Bench's MAT; vanilla = 1.00).
- ``mean_beta`` = mean of β = Σ_x min(p, q) over all drafted positions (white-box).
- ``speedup``: per prompt, vanilla time per output token / speculative time per output token.
  Time per token rather than wall time per request because output lengths differ between the
  two engines under sampling. A group's speed-up is the ratio of the group means of the two
  per-token times over prompts run by both engines (paired; every prompt weighs the same).
- ``tokens_per_s`` / ``vanilla_tokens_per_s``: Σ output tokens / Σ wall time.
- ``ttft_s``: mean time to first token; ``latency_per_token_p50_s`` / ``_p95_s``: quantiles over
  the group's prompts of the per-prompt time per output token (inverted-CDF definition).
- ``cost_ratio`` c = (Σ draft_s / Σ proposed) / (Σ verify_s / Σ steps): one draft forward
  against one target verification pass.

Records with ``timing_only`` true feed only the latency metrics. When an engine has timing-only
records (the runner's interleaved latency protocol), its latency metrics use those alone;
otherwise they use all its records.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import special, stats

from specaudit.errors import InputError
from specaudit.stats._bootstrap import Method, Replicates, cluster_replicates
from specaudit.stats._results import holm
from specaudit.stats.power import z_shift

__all__ = [
    "METRICS",
    "MetricSpec",
    "GroupFrame",
    "KruskalResult",
    "PairwiseResult",
    "DrillDown",
    "per_prompt_metrics",
    "kruskal_test",
    "pairwise_test",
    "minimum_detectable_difference",
    "drilldown",
    "disparity_section",
    "simulate_records",
]

INTERSECTION = "×"

# Record fields; every other column of the record table is read as a prompt attribute.
_RECORD_FIELDS = frozenset(
    "key prompt_id pair_id attributes engine sample seed sampling k prompt_token_ids output_token_ids "
    "text finish_reason wall_s ttft_s draft_s verify_s step_s steps proposed accepted accepted_per_step "
    "proposed_per_step beta accept_prob step_pit timing_only n_output_tokens".split()
)
_REQUIRED = ("prompt_id", "engine", "accepted", "proposed", "steps", "wall_s")


# --------------------------------------------------------------------------------------------
# Per-prompt table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricSpec:
    """How a group metric is formed from per-prompt columns.

    Ratio metrics: ``combine`` of the group sums of ``sums`` (columns of the per-prompt table,
    taken only over prompts where ``value_column`` is defined). Quantile metrics: the
    ``quantile`` of ``value_column`` over the group's prompts. ``value_column`` is also the
    per-prompt value that rank tests compare.
    """

    name: str
    description: str
    value_column: str
    token_column: str
    sums: tuple[str, ...] = ()
    combine: Callable[..., np.ndarray] | None = None
    quantile: float | None = None
    higher_is_better: bool = True


def _ratio(a, b):
    return a / b


METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in [
        MetricSpec("acceptance_rate", "accepted / proposed draft tokens", "acceptance_rate", "n_tokens",
                   ("accepted", "proposed"), _ratio),
        MetricSpec("per_position_acceptance", "accepted / drafted positions reached (the formula's α)",
                   "per_position_acceptance", "n_tokens", ("accepted", "reached"), _ratio),
        MetricSpec("mean_accepted_tokens", "tokens emitted per verification step (Spec-Bench MAT)",
                   "mean_accepted_tokens", "n_tokens", ("accepted", "steps"), lambda a, s: (a + s) / s),
        MetricSpec("mean_beta", "mean β = Σ min(p, q) per drafted position", "mean_beta", "n_tokens",
                   ("beta_sum", "beta_n"), _ratio),
        MetricSpec("speedup", "vanilla / speculative time per output token, paired per prompt", "speedup",
                   "latency_tokens", ("vanilla_latency_per_token_s", "latency_per_token_s"), _ratio),
        MetricSpec("tokens_per_s", "output tokens per second of the audited engine", "tokens_per_s",
                   "latency_tokens", ("latency_tokens", "latency_wall_s"), _ratio),
        MetricSpec("vanilla_tokens_per_s", "output tokens per second of vanilla decoding",
                   "vanilla_tokens_per_s", "vanilla_tokens", ("vanilla_tokens", "vanilla_wall_s"), _ratio),
        MetricSpec("ttft_s", "mean time to first token", "ttft_s", "latency_tokens", ("ttft_s", "one"), _ratio,
                   higher_is_better=False),
        MetricSpec("latency_per_token_p50_s", "median over prompts of time per output token",
                   "latency_per_token_s", "latency_tokens", quantile=0.5, higher_is_better=False),
        MetricSpec("latency_per_token_p95_s", "95th percentile over prompts of time per output token",
                   "latency_per_token_s", "latency_tokens", quantile=0.95, higher_is_better=False),
        MetricSpec("cost_ratio", "draft forward time / target verification time (c)", "cost_ratio",
                   "latency_tokens", ("draft_s", "latency_proposed", "verify_s", "latency_steps"),
                   lambda d, p, v, s: (d / p) / (v / s), higher_is_better=False),
    ]
}


def _flatten(series: pd.Series, depth: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate list cells (lists of lists for depth 2) into one float array, with the
    row position of every element. Missing cells count as empty."""
    cells = [c if isinstance(c, (list, tuple, np.ndarray)) else () for c in series]
    if depth == 2:
        cells = [list(itertools.chain.from_iterable(c)) for c in cells]
    lengths = np.fromiter((len(c) for c in cells), dtype=np.int64, count=len(cells))
    values = np.fromiter(itertools.chain.from_iterable(cells), dtype=float, count=int(lengths.sum()))
    return values, np.repeat(np.arange(len(cells)), lengths)


def _numeric(df: pd.DataFrame, column: str) -> np.ndarray:
    if column not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _n_reached(accepted: np.ndarray, drafted: np.ndarray) -> np.ndarray:
    """Drafted positions reached by a verification step that accepted a of its k drafted tokens:
    min(a + 1, k). A position is tried only when every earlier one was accepted, so the step
    reaches 0..a (the rejection at a included) unless it accepted all k; with k = 0, none."""
    return np.maximum(np.minimum(accepted + 1, drafted), 0)


def _reached_positions(accepted: Sequence[int] | np.ndarray, drafted: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every drafted position reached by steps that accepted ``accepted[s]`` of ``drafted[s]``
    tokens: the step it belongs to, its index i in that step, and whether it was accepted
    (i < a_s; position a_s, reached only when a_s < k_s, is the rejection)."""
    a = np.asarray(accepted, dtype=np.int64).reshape(-1)
    n = _n_reached(a, np.asarray(drafted, dtype=np.int64).reshape(-1))
    step = np.repeat(np.arange(a.size), n)
    index = np.arange(step.size) - np.repeat(np.cumsum(n) - n, n)
    return step, index, index < a[step]


@dataclass(frozen=True)
class _Steps:
    """The verification steps of every record of a table, flattened in record order: accepted
    a_s, drafted k_s and the record's row; and per record whether its counts are consistent."""

    accepted: np.ndarray
    drafted: np.ndarray
    row: np.ndarray
    consistent: np.ndarray


def _draft_steps(df: pd.DataFrame) -> _Steps:
    """Draft length of each step: ``proposed_per_step[s]`` where a record has that field (short
    near the length budget, heuristic for some engines); else, for older records, the constant
    ``k``, which is known to hold only when proposed == k·steps. A record is consistent when its
    per-step lists have ``steps`` entries summing to ``accepted`` and ``proposed`` and no step
    accepted more than it drafted; the others cannot be split into positions and are left out."""
    n_rows = len(df)
    k, steps = _numeric(df, "k"), _numeric(df, "steps")
    accepted, proposed = _numeric(df, "accepted"), _numeric(df, "proposed")
    empty = (np.zeros(0), np.zeros(0, np.int64))
    a, row = _flatten(df["accepted_per_step"]) if "accepted_per_step" in df.columns else empty
    n_steps = np.bincount(row, minlength=n_rows)
    accepted_sum = np.bincount(row, weights=a, minlength=n_rows)
    drafted = k[row]
    has = np.zeros(n_rows, bool)
    lists_agree = np.zeros(n_rows, bool)
    if "proposed_per_step" in df.columns:
        has = df["proposed_per_step"].map(lambda c: isinstance(c, (list, tuple, np.ndarray))).to_numpy(dtype=bool)
        k_s, row_of_k = _flatten(df["proposed_per_step"])
        proposed_sum = np.bincount(row_of_k, weights=k_s, minlength=n_rows)
        lists_agree = has & (np.bincount(row_of_k, minlength=n_rows) == n_steps) & (proposed_sum == proposed)
        # Both lists are flattened record by record, so where their lengths agree they align.
        drafted[lists_agree[row]] = k_s[lists_agree[row_of_k]]
    constant_k = ~has & (proposed == k * steps) & (k > 0)
    overrun = np.bincount(row, weights=((a > drafted) | (a < 0) | (drafted < 0)).astype(float), minlength=n_rows) > 0
    consistent = (n_steps == steps) & (accepted_sum == accepted) & (lists_agree | constant_k) & ~overrun
    return _Steps(accepted=a, drafted=drafted, row=row, consistent=consistent)


def _check_records(records: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(records, pd.DataFrame):
        raise InputError(f"disparity: expected the records as a pandas DataFrame, got {type(records).__name__}.")
    missing = [c for c in _REQUIRED if c not in records.columns]
    if "output_token_ids" not in records.columns and "n_output_tokens" not in records.columns:
        missing.append("output_token_ids")
    if missing:
        raise InputError(
            f"disparity: the records lack the field(s) {', '.join(missing)}; pass the records.jsonl table "
            "as written by the runner."
        )
    if len(records) == 0:
        raise InputError("disparity: the records table is empty; run the audit first.")
    return records.reset_index(drop=True)


def _attribute_names(records: pd.DataFrame) -> list[str]:
    names = [c for c in records.columns if c not in _RECORD_FIELDS]
    if "attributes" in records.columns:
        for cell in records["attributes"]:
            if isinstance(cell, Mapping):
                names.extend(k for k in cell if k not in names)
    return names


def _attribute_values(records: pd.DataFrame, name: str) -> pd.Series:
    if name in records.columns:
        return records[name]
    cells = records["attributes"] if "attributes" in records.columns else pd.Series([None] * len(records))
    return pd.Series([c.get(name) if isinstance(c, Mapping) else None for c in cells], index=records.index, dtype=object)


def per_prompt_metrics(
    records: pd.DataFrame,
    *,
    engine: str = "speculative",
    baseline: str = "vanilla",
) -> pd.DataFrame:
    """One row per prompt: the sums behind every metric, the per-prompt metric values, pair_id
    and every prompt attribute (columns not among the record fields, and keys of ``attributes``).
    """
    df = _check_records(records)
    n_rows = len(df)
    codes, prompt_ids = pd.factorize(df["prompt_id"], sort=True)
    if (codes < 0).any():
        raise InputError("disparity: some records have no prompt_id; every record needs the id of its prompt.")
    n_prompts = len(prompt_ids)

    def per_prompt(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        values = np.where(mask, values, 0.0)
        return np.bincount(codes, weights=np.nan_to_num(values), minlength=n_prompts)

    if "n_output_tokens" in df.columns:
        n_out = _numeric(df, "n_output_tokens")
    else:
        n_out = df["output_token_ids"].map(lambda c: len(c) if isinstance(c, (list, tuple, np.ndarray)) else np.nan)
        n_out = n_out.to_numpy(dtype=float)
    timing = df["timing_only"].fillna(False).astype(bool).to_numpy() if "timing_only" in df.columns else np.zeros(n_rows, bool)
    engines = df["engine"].astype(str).to_numpy()
    audited = engines == engine
    vanilla = engines == baseline
    if not audited.any():
        known = ", ".join(sorted(set(engines)))
        raise InputError(f"disparity: no records of engine '{engine}' (engines present: {known}); pass engine=... to choose one.")
    sampled = audited & ~timing
    latency = audited & timing if (audited & timing).any() else audited
    vanilla_latency = vanilla & timing if (vanilla & timing).any() else vanilla

    accepted, proposed, steps = _numeric(df, "accepted"), _numeric(df, "proposed"), _numeric(df, "steps")
    k = _numeric(df, "k")
    wall, ttft = _numeric(df, "wall_s"), _numeric(df, "ttft_s")
    draft_s, verify_s = _numeric(df, "draft_s"), _numeric(df, "verify_s")

    # Positions reached per record: Σ_s min(a_s + 1, k_s), defined only where the per-step
    # counts agree with the record's totals (see _draft_steps).
    reached = np.full(n_rows, np.nan)
    if "accepted_per_step" in df.columns:
        steps_of = _draft_steps(df)
        reached_sum = np.bincount(steps_of.row, weights=_n_reached(steps_of.accepted, steps_of.drafted), minlength=n_rows)
        reached = np.where(steps_of.consistent, reached_sum, np.nan)
    beta_sum = beta_n = np.zeros(n_rows)
    if "beta" in df.columns:
        beta_values, row_of_beta = _flatten(df["beta"], depth=2)
        beta_sum = np.bincount(row_of_beta, weights=beta_values, minlength=n_rows)
        beta_n = np.bincount(row_of_beta, minlength=n_rows).astype(float)

    ok = sampled & (proposed > 0)
    # Columns are built as arrays and framed once: inserting pandas columns one by one costs
    # more than all the arithmetic here.
    col: dict[str, np.ndarray] = {}
    col["n_records"] = np.bincount(codes, weights=sampled.astype(float), minlength=n_prompts)
    col["n_tokens"] = per_prompt(n_out, sampled)
    col["accepted"] = per_prompt(accepted, ok)
    col["proposed"] = per_prompt(proposed, ok)
    col["steps"] = per_prompt(steps, ok)
    reached_missing = np.bincount(codes, weights=(ok & np.isnan(reached)).astype(float), minlength=n_prompts)
    col["reached"] = np.where(reached_missing > 0, np.nan, per_prompt(reached, ok))
    col["beta_sum"] = per_prompt(beta_sum, sampled)
    col["beta_n"] = per_prompt(beta_n, sampled)
    drafted = ok & (k > 0)
    timed = latency & (n_out > 0) & (wall > 0)
    col["latency_records"] = np.bincount(codes, weights=timed.astype(float), minlength=n_prompts)
    col["latency_tokens"] = per_prompt(n_out, timed)
    col["latency_wall_s"] = per_prompt(wall, timed)
    ttft_ok = timed & np.isfinite(ttft)
    costed = timed & np.isfinite(draft_s) & np.isfinite(verify_s) & (proposed > 0) & (steps > 0)
    col["draft_s"] = per_prompt(draft_s, costed)
    col["verify_s"] = per_prompt(verify_s, costed)
    col["latency_proposed"] = per_prompt(proposed, costed)
    col["latency_steps"] = per_prompt(steps, costed)
    vanilla_timed = vanilla_latency & (n_out > 0) & (wall > 0)
    col["vanilla_tokens"] = per_prompt(n_out, vanilla_timed)
    col["vanilla_wall_s"] = per_prompt(wall, vanilla_timed)
    col["one"] = np.ones(n_prompts)

    def ratio(a, b):
        with np.errstate(all="ignore"):
            return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)

    col["k"] = ratio(per_prompt(k, drafted), np.bincount(codes, weights=drafted.astype(float), minlength=n_prompts))
    col["acceptance_rate"] = ratio(col["accepted"], col["proposed"])
    col["per_position_acceptance"] = ratio(col["accepted"], col["reached"])
    col["mean_accepted_tokens"] = ratio(col["accepted"] + col["steps"], col["steps"])
    col["mean_beta"] = ratio(col["beta_sum"], col["beta_n"])
    col["tokens_per_s"] = ratio(col["latency_tokens"], col["latency_wall_s"])
    col["vanilla_tokens_per_s"] = ratio(col["vanilla_tokens"], col["vanilla_wall_s"])
    col["latency_per_token_s"] = ratio(col["latency_wall_s"], col["latency_tokens"])
    col["vanilla_latency_per_token_s"] = ratio(col["vanilla_wall_s"], col["vanilla_tokens"])
    col["speedup"] = ratio(col["vanilla_latency_per_token_s"], col["latency_per_token_s"])
    col["ttft_s"] = ratio(per_prompt(ttft, ttft_ok), np.bincount(codes, weights=ttft_ok.astype(float), minlength=n_prompts))
    col["cost_ratio"] = ratio(ratio(col["draft_s"], col["latency_proposed"]), ratio(col["verify_s"], col["latency_steps"]))

    first = pd.DataFrame({"code": codes})
    if "pair_id" in df.columns:
        first["pair_id"] = df["pair_id"].to_numpy()
    names = _attribute_names(df)
    for name in names:
        first[name] = _attribute_values(df, name).to_numpy()
    clashes = [n for n in names if n in col]
    if clashes:
        raise InputError(f"disparity: the prompt attribute(s) {', '.join(clashes)} clash with metric column names; rename them in the prompt set.")
    firsts = first.groupby("code", sort=True).first()
    col["pair_id"] = firsts["pair_id"].to_numpy(dtype=object) if "pair_id" in firsts else np.full(n_prompts, None, dtype=object)
    for name in names:
        col[name] = firsts[name].to_numpy(dtype=object)
    out = pd.DataFrame(col, index=pd.Index(prompt_ids, name="prompt_id"))
    out.attrs["attributes"] = names
    out.attrs["engine"] = engine
    out.attrs["baseline"] = baseline
    return out


# --------------------------------------------------------------------------------------------
# Grouping and bootstrap plumbing
# --------------------------------------------------------------------------------------------


def _as_list(sensitive: str | Sequence[str]) -> list[str]:
    names = [sensitive] if isinstance(sensitive, str) else list(sensitive)
    if not names:
        raise InputError("disparity: name at least one prompt attribute to group by (sensitive=...).")
    return names


def _group_codes(table: pd.DataFrame, names: list[str]) -> tuple[np.ndarray, list[Any]]:
    """Group code per prompt (-1 when an attribute is missing) and the sorted group labels
    (tuples for intersections)."""
    absent = [n for n in names if n not in table.columns]
    if absent:
        available = ", ".join(table.attrs.get("attributes", [])) or "none"
        raise InputError(f"disparity: no prompt attribute named {', '.join(absent)} in the records (available: {available}).")
    columns = [table[n].to_numpy(dtype=object) for n in names]
    missing = np.zeros(len(table), bool)
    for column in columns:
        missing |= pd.isna(column)
    keys = list(zip(*columns)) if len(names) > 1 else list(columns[0])
    present = sorted({key for key, gone in zip(keys, missing) if not gone}, key=lambda x: str(x))
    index = {label: i for i, label in enumerate(present)}
    codes = np.array([-1 if gone else index[key] for key, gone in zip(keys, missing)], dtype=np.int64)
    return codes, present


def _label(group: Any) -> str:
    return INTERSECTION.join(str(g) for g in group) if isinstance(group, tuple) else str(group)


def _group_sums(weights: np.ndarray, onehot: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Weighted sums per group and overall: (m, G + 1, c) from weights (m, n), one-hot (n, G)
    and per-prompt columns (n, c). Index G is the overall population."""
    n, c = columns.shape
    n_groups = onehot.shape[1]
    by_group = weights @ (onehot[:, :, None] * columns[:, None, :]).reshape(n, n_groups * c)
    overall = weights @ columns
    return np.concatenate([by_group.reshape(len(weights), n_groups, c), overall[:, None, :]], axis=1)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """Inverted-CDF quantile of sorted ``values`` under each row of ``weights``: the smallest value
    whose cumulative weight reaches q of the total. NaN where a row has no weight."""
    if values.size == 0:
        return np.full(len(weights), np.nan)
    cumulative = np.cumsum(weights, axis=1)
    total = cumulative[:, -1]
    position = (cumulative >= q * total[:, None] - 1e-9).argmax(axis=1)
    return np.where(total > 0, values[position], np.nan)


def _resolve_reference(reference: Any, groups: list[Any], sizes: np.ndarray) -> int | None:
    """Index of the reference group, or None for the overall population."""
    if reference in ("overall", None):
        return None
    if reference == "largest":
        if not len(groups):
            return None
        return int(np.argmax(sizes))  # ties: the first group in sorted order
    for i, group in enumerate(groups):
        if reference == group or str(reference) == _label(group):
            return i
    raise InputError(
        f"disparity: reference group {reference!r} is not among the groups "
        f"({', '.join(_label(g) for g in groups)}); pass 'largest', 'overall' or one of them."
    )


def _interval_frame(result, index) -> pd.DataFrame:
    return pd.DataFrame(
        {"value": np.atleast_1d(result.statistic), "ci_low": np.atleast_1d(result.ci_low),
         "ci_high": np.atleast_1d(result.ci_high)},
        index=index,
    )


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KruskalResult:
    """Kruskal–Wallis H test across groups on per-prompt values."""

    statistic: float
    pvalue: float
    n_groups: int
    n_prompts: int


@dataclass(frozen=True)
class PairwiseResult:
    """One group against the reference group on per-prompt values.

    ``effect_size`` is the rank-biserial correlation, positive when the group is higher: for
    Mann–Whitney it equals Cliff's δ = P(X > Y) − P(X < Y); for Wilcoxon it is the matched-pairs
    rank-biserial (R+ − R−) / (R+ + R−)."""

    test: str
    statistic: float
    pvalue: float
    effect_size: float
    effect_size_name: str
    n_group: int
    n_reference: int
    n_pairs: int


def kruskal_test(samples: Sequence[np.ndarray]) -> KruskalResult:
    """Kruskal–Wallis across the non-empty samples (p = 1 when fewer than two, or all equal)."""
    samples = [np.asarray(s, dtype=float)[np.isfinite(np.asarray(s, dtype=float))] for s in samples]
    samples = [s for s in samples if s.size]
    total = int(sum(s.size for s in samples))
    if len(samples) < 2:
        return KruskalResult(np.nan, np.nan, len(samples), total)
    try:
        result = stats.kruskal(*samples)
    except ValueError:  # every value identical: no evidence of any difference
        return KruskalResult(0.0, 1.0, len(samples), total)
    pvalue = float(result.pvalue) if np.isfinite(result.pvalue) else 1.0
    return KruskalResult(float(result.statistic), pvalue, len(samples), total)


def pairwise_test(
    group: np.ndarray,
    reference: np.ndarray,
    *,
    group_pairs: np.ndarray | None = None,
    reference_pairs: np.ndarray | None = None,
    min_pairs: int = 6,
) -> PairwiseResult:
    """Mann–Whitney U of ``group`` against ``reference``, or the Wilcoxon signed-rank test on
    parallel prompts when pair ids are given and at least ``min_pairs`` pairs are shared and they
    cover at least half of the smaller sample. Several prompts of one pair id in a group are
    averaged."""
    group = np.asarray(group, dtype=float)
    reference = np.asarray(reference, dtype=float)
    keep_g, keep_r = np.isfinite(group), np.isfinite(reference)
    n_g, n_r = int(keep_g.sum()), int(keep_r.sum())
    if group_pairs is not None and reference_pairs is not None:
        g = _mean_by_pair(group[keep_g], np.asarray(group_pairs, dtype=object)[keep_g])
        r = _mean_by_pair(reference[keep_r], np.asarray(reference_pairs, dtype=object)[keep_r])
        shared = [p for p in g if p in r]
        if len(shared) >= min_pairs and len(shared) >= 0.5 * min(n_g, n_r):
            return _wilcoxon(np.array([g[p] - r[p] for p in shared]), n_g, n_r)
    x, y = group[keep_g], reference[keep_r]
    if x.size == 0 or y.size == 0:
        return PairwiseResult("mannwhitneyu", np.nan, np.nan, np.nan, "rank_biserial", n_g, n_r, 0)
    result = stats.mannwhitneyu(x, y, alternative="two-sided")
    # U counts pairs with x > y plus half the ties, so 2U/(nm) − 1 = P(X>Y) − P(X<Y).
    delta = 2.0 * float(result.statistic) / (x.size * y.size) - 1.0
    pvalue = float(result.pvalue) if np.isfinite(result.pvalue) else 1.0
    return PairwiseResult("mannwhitneyu", float(result.statistic), pvalue, delta, "rank_biserial", n_g, n_r, 0)


def _mean_by_pair(values: np.ndarray, pairs: np.ndarray) -> dict[Any, float]:
    """Mean value per pair id (prompts without a pair id are left out)."""
    sums: dict[Any, list[float]] = {}
    for value, pair in zip(values, pairs):
        if pair is None or (isinstance(pair, float) and math.isnan(pair)):
            continue
        entry = sums.setdefault(pair, [0.0, 0.0])
        entry[0] += value
        entry[1] += 1.0
    return {pair: total / count for pair, (total, count) in sums.items()}


def _wilcoxon(differences: np.ndarray, n_g: int, n_r: int) -> PairwiseResult:
    nonzero = differences[differences != 0]
    if nonzero.size == 0:
        return PairwiseResult("wilcoxon", 0.0, 1.0, 0.0, "matched_pairs_rank_biserial", n_g, n_r, differences.size)
    ranks = stats.rankdata(np.abs(nonzero))
    plus, minus = ranks[nonzero > 0].sum(), ranks[nonzero < 0].sum()
    result = stats.wilcoxon(nonzero, alternative="two-sided")
    pvalue = float(result.pvalue) if np.isfinite(result.pvalue) else 1.0
    return PairwiseResult("wilcoxon", float(result.statistic), pvalue, float((plus - minus) / (plus + minus)),
                          "matched_pairs_rank_biserial", n_g, n_r, differences.size)


# Asymptotic relative efficiency of the rank tests to the t-test: 0.864 is the minimum over all
# continuous distributions (Hodges & Lehmann 1956), so dividing the sample size by it is safe.
RANK_TEST_EFFICIENCY = 0.864


def minimum_detectable_difference(
    sd: float,
    n_group: int,
    n_reference: int | None = None,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    n_comparisons: int = 1,
    efficiency: float = RANK_TEST_EFFICIENCY,
) -> float:
    """Smallest difference in mean per-prompt value a two-sided rank test detects with ``power``.

    Normal approximation for a difference of means, (z_{1−α'/2} + z_power)·sd·√(1/n₁ + 1/n₂),
    with α' = α / n_comparisons (the first, strictest step of Holm) and sample sizes scaled by the
    rank test's efficiency against the t-test. With ``n_reference=None`` it is the paired
    version: ``sd`` of the differences over ``n_group`` pairs. An approximation for planning and
    for saying what a null result rules out, not an exact power calculation."""
    z = z_shift(alpha, power, max(1, n_comparisons))
    if n_group < 1 or (n_reference is not None and n_reference < 1) or not np.isfinite(sd):
        return float("nan")
    spread = 1.0 / n_group if n_reference is None else 1.0 / n_group + 1.0 / n_reference
    return float(z * sd * math.sqrt(spread / efficiency))


# --------------------------------------------------------------------------------------------
# GroupFrame
# --------------------------------------------------------------------------------------------


class GroupFrame:
    """Metrics per prompt group, fairlearn-MetricFrame style, with cluster-bootstrap intervals.

    ``GroupFrame(records, sensitive="dialect")`` or ``sensitive=["domain", "dialect"]`` for the
    intersection. Intervals resample prompts within each group (stratified cluster bootstrap,
    seeded); every derived quantity (differences, ratios, minima) uses the same replicates.

    Attributes: ``overall``, ``by_group``, ``per_prompt``, ``groups``; methods ``difference``,
    ``ratio``, ``group_min``, ``group_max``, ``to_reference``, ``kruskal``, ``pairwise``,
    ``flags``, ``warnings``.
    """

    def __init__(
        self,
        records: pd.DataFrame,
        sensitive: str | Sequence[str],
        metrics: Sequence[str] | None = None,
        *,
        engine: str = "speculative",
        baseline: str = "vanilla",
        n_boot: int = 1000,
        ci: float = 0.95,
        seed: int = 0,
        method: Method = "percentile",
    ):
        table = per_prompt_metrics(records, engine=engine, baseline=baseline)
        self._setup(table, sensitive, metrics, n_boot=n_boot, ci=ci, seed=seed, method=method)

    @classmethod
    def from_prompts(
        cls,
        per_prompt: pd.DataFrame,
        sensitive: str | Sequence[str],
        metrics: Sequence[str] | None = None,
        *,
        n_boot: int = 1000,
        ci: float = 0.95,
        seed: int = 0,
        method: Method = "percentile",
    ) -> "GroupFrame":
        """Build from a ``per_prompt_metrics`` table (saves re-reading records per dimension)."""
        frame = cls.__new__(cls)
        frame._setup(per_prompt, sensitive, metrics, n_boot=n_boot, ci=ci, seed=seed, method=method)
        return frame

    def _setup(self, table, sensitive, metrics, *, n_boot, ci, seed, method) -> None:
        self.sensitive = _as_list(sensitive)
        codes, groups = _group_codes(table, self.sensitive)
        if (codes < 0).any():  # prompts outside this dimension do not belong in its overall figures
            table = table[codes >= 0].reset_index(drop=True)
            codes, groups = _group_codes(table, self.sensitive)
        self.per_prompt = table
        self.confidence_level = ci
        self.method = method
        self.groups = groups
        self._codes = codes
        if metrics is None:
            metrics = [m for m, spec in METRICS.items() if table[spec.value_column].notna().any()]
        unknown = [m for m in metrics if m not in METRICS]
        if unknown:
            raise InputError(f"GroupFrame: unknown metric(s) {', '.join(unknown)}; choose from {', '.join(METRICS)}.")
        if not metrics:
            raise InputError("GroupFrame: no metric has data in these records (no accepted/proposed counts or timings).")
        self.metrics = list(metrics)
        n_groups = len(groups)
        onehot = np.zeros((len(table), n_groups))
        onehot[codes >= 0, codes[codes >= 0]] = 1.0
        self._onehot = onehot

        # Per metric: which prompts count, and the (n, c) columns whose weighted sums combine.
        specs = [METRICS[m] for m in self.metrics]
        valid = np.column_stack([table[s.value_column].notna().to_numpy() for s in specs])
        self._valid = valid
        ratio_cols, slices = [], []
        for j, spec in enumerate(specs):
            start = sum(len(c) for c in ratio_cols)
            if spec.quantile is None:
                block = [np.where(valid[:, j], table[c].to_numpy(dtype=float), 0.0) for c in spec.sums]
                ratio_cols.append(block)
                slices.append(slice(start, start + len(block)))
            else:
                slices.append(None)
        columns = np.column_stack([c for block in ratio_cols for c in block]) if ratio_cols else np.zeros((len(table), 0))
        quantile_values = {}
        for j, spec in enumerate(specs):
            if spec.quantile is not None:
                per_group = []
                for g in range(n_groups + 1):
                    members = valid[:, j] & ((codes == g) if g < n_groups else True)
                    idx = np.flatnonzero(members)
                    values = table[spec.value_column].to_numpy(dtype=float)[idx]
                    order = np.argsort(values, kind="stable")
                    per_group.append((idx[order], values[order]))
                quantile_values[j] = per_group

        def statistic(weights: np.ndarray) -> np.ndarray:
            out = np.full((len(weights), n_groups + 1, len(specs)), np.nan)
            sums = _group_sums(weights, onehot, columns) if columns.shape[1] else None
            with np.errstate(all="ignore"):
                for j, spec in enumerate(specs):
                    if spec.quantile is None:
                        parts = [sums[:, :, i] for i in range(slices[j].start, slices[j].stop)]
                        value = spec.combine(*parts)
                        # An empty group (zero weight) gives 0/0; keep it NaN, never inf.
                        out[:, :, j] = np.where(np.isfinite(value), value, np.nan)
                    else:
                        for g, (idx, values) in enumerate(quantile_values[j]):
                            out[:, g, j] = _weighted_quantile(values, weights[:, idx], spec.quantile)
            return out

        strata = np.where(codes >= 0, codes, n_groups)
        self._replicates: Replicates = cluster_replicates(
            statistic, len(table), strata=strata, n_boot=n_boot, seed=seed, jackknife=(method == "bca")
        )
        self._interval = self._replicates.interval(ci, method)
        token_counts = np.column_stack([table[s.token_column].to_numpy(dtype=float) for s in specs])
        member = np.column_stack([onehot, np.ones(len(table))])  # (n, G + 1)
        self._n_prompts = member.T @ valid.astype(float)  # (G + 1, M)
        self._n_tokens = member.T @ np.where(valid, token_counts, 0.0)

    # ---- tables -------------------------------------------------------------------------------

    def _group_index(self) -> pd.Index:
        if len(self.sensitive) > 1:
            return pd.MultiIndex.from_tuples(self.groups, names=self.sensitive)
        return pd.Index(self.groups, name=self.sensitive[0])

    @property
    def overall(self) -> pd.DataFrame:
        """One row per metric: value, ci_low, ci_high, n_prompts, n_tokens over all prompts."""
        g = len(self.groups)
        return pd.DataFrame(
            {
                "value": self._interval.statistic[g],
                "ci_low": self._interval.ci_low[g],
                "ci_high": self._interval.ci_high[g],
                "n_prompts": self._n_prompts[g].astype(int),
                "n_tokens": self._n_tokens[g].astype(int),
            },
            index=pd.Index(self.metrics, name="metric"),
        )

    @property
    def by_group(self) -> pd.DataFrame:
        """Rows: groups. Columns: (metric, value | ci_low | ci_high | n_prompts | n_tokens)."""
        g = len(self.groups)
        blocks = {}
        for j, metric in enumerate(self.metrics):
            blocks[metric] = pd.DataFrame(
                {
                    "value": self._interval.statistic[:g, j],
                    "ci_low": self._interval.ci_low[:g, j],
                    "ci_high": self._interval.ci_high[:g, j],
                    "n_prompts": self._n_prompts[:g, j].astype(int),
                    "n_tokens": self._n_tokens[:g, j].astype(int),
                },
                index=self._group_index(),
            )
        return pd.concat(blocks, axis=1, names=["metric", "stat"])

    def _derived(self, fn: Callable[[np.ndarray], np.ndarray]) -> pd.DataFrame:
        result = self._replicates.map(fn).interval(self.confidence_level, self.method)
        return _interval_frame(result, pd.Index(self.metrics, name="metric"))

    def _groups_only(self, values: np.ndarray) -> np.ndarray:
        return values[:, : len(self.groups), :]

    def difference(self, method: str = "between_groups") -> pd.DataFrame:
        """Per metric: max − min over groups ("between_groups"), or the largest |group − overall|
        ("to_overall"); with bootstrap intervals."""
        g = len(self.groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if method == "between_groups":
                return self._derived(lambda v: np.nanmax(v[:, :g], axis=1) - np.nanmin(v[:, :g], axis=1))
            if method == "to_overall":
                return self._derived(lambda v: np.nanmax(np.abs(v[:, :g] - v[:, g:g + 1]), axis=1))
        raise InputError(f"GroupFrame.difference: method must be 'between_groups' or 'to_overall', got {method!r}.")

    def ratio(self, method: str = "between_groups") -> pd.DataFrame:
        """Per metric: min / max over groups ("between_groups"), or the smallest of group/overall
        and overall/group ("to_overall"); 1 is parity. With bootstrap intervals."""
        g = len(self.groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if method == "between_groups":
                return self._derived(lambda v: np.nanmin(v[:, :g], axis=1) / np.nanmax(v[:, :g], axis=1))
            if method == "to_overall":
                def fn(v):
                    r = v[:, :g] / v[:, g:g + 1]
                    return np.nanmin(np.minimum(r, 1.0 / r), axis=1)
                return self._derived(fn)
        raise InputError(f"GroupFrame.ratio: method must be 'between_groups' or 'to_overall', got {method!r}.")

    def _extreme(self, pick: Callable) -> pd.DataFrame:
        g = len(self.groups)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            frame = self._derived(lambda v: pick(v[:, :g], axis=1))
        point = self._interval.statistic[:g]
        arg = np.nanargmin if pick is np.nanmin else np.nanargmax
        frame["group"] = [
            self.groups[int(arg(point[:, j]))] if np.isfinite(point[:, j]).any() else None
            for j in range(len(self.metrics))
        ]
        return frame

    def group_min(self) -> pd.DataFrame:
        """Per metric: the smallest group value, its interval, and which group it is."""
        return self._extreme(np.nanmin)

    def group_max(self) -> pd.DataFrame:
        """Per metric: the largest group value, its interval, and which group it is."""
        return self._extreme(np.nanmax)

    def reference_index(self, reference: Any = "largest") -> int | None:
        """Index into ``groups`` of the reference ('largest' = most prompts with acceptance data
        or, failing that, any data; 'overall'; or a group label). None means overall."""
        sizes = self._n_prompts[: len(self.groups)].max(axis=1) if self.metrics else np.zeros(len(self.groups))
        if "acceptance_rate" in self.metrics:
            sizes = self._n_prompts[: len(self.groups), self.metrics.index("acceptance_rate")]
        return _resolve_reference(reference, self.groups, sizes)

    def _row_index(self, rows: list[tuple[str, int]]) -> pd.MultiIndex:
        """(metric, *group levels) index for rows given as (metric, group position)."""
        tuples = [(m, *(self.groups[i] if len(self.sensitive) > 1 else (self.groups[i],))) for m, i in rows]
        return pd.MultiIndex.from_tuples(tuples, names=["metric", *self.sensitive])

    def value(self, metric: str, group: Any = None, stat: str = "value") -> float:
        """One number: ``stat`` (value, ci_low, ci_high, n_prompts, n_tokens) of ``metric`` for a
        group label (a tuple for intersections), or overall when group is None."""
        if metric not in self.metrics:
            raise InputError(f"GroupFrame: metric {metric!r} was not computed; computed: {', '.join(self.metrics)}.")
        j = self.metrics.index(metric)
        i = len(self.groups) if group is None else self._position(group)
        arrays = {"value": self._interval.statistic, "ci_low": self._interval.ci_low, "ci_high": self._interval.ci_high,
                  "n_prompts": self._n_prompts, "n_tokens": self._n_tokens}
        if stat not in arrays:
            raise InputError(f"GroupFrame.value: stat must be one of {', '.join(arrays)}, got {stat!r}.")
        return float(arrays[stat][i, j])

    def _position(self, group: Any) -> int:
        for i, candidate in enumerate(self.groups):
            if group == candidate or str(group) == _label(candidate):
                return i
        raise InputError(f"GroupFrame: no group {group!r}; groups: {', '.join(_label(g) for g in self.groups)}.")

    def _reference_intervals(self, reference: Any):
        g = len(self.groups)
        ref = self.reference_index(reference)
        col = g if ref is None else ref
        with np.errstate(all="ignore"):
            diff = self._replicates.map(lambda v: v[:, :g] - v[:, col:col + 1]).interval(self.confidence_level, self.method)
            rat = self._replicates.map(lambda v: v[:, :g] / v[:, col:col + 1]).interval(self.confidence_level, self.method)
        return ref, col, diff, rat

    def to_reference(self, reference: Any = "largest") -> pd.DataFrame:
        """Per (metric, group): value, reference value, difference and ratio to the reference group
        (or to overall), each difference/ratio with its bootstrap interval."""
        ref, col, diff, rat = self._reference_intervals(reference)
        rows, keys = [], []
        for j, metric in enumerate(self.metrics):
            for i in range(len(self.groups)):
                keys.append((metric, i))
                rows.append({
                    "value": self._interval.statistic[i, j], "reference_value": self._interval.statistic[col, j],
                    "difference": diff.statistic[i, j], "difference_ci_low": diff.ci_low[i, j],
                    "difference_ci_high": diff.ci_high[i, j],
                    "ratio": rat.statistic[i, j], "ratio_ci_low": rat.ci_low[i, j], "ratio_ci_high": rat.ci_high[i, j],
                    "n_prompts": int(self._n_prompts[i, j]),
                })
        frame = pd.DataFrame(rows, index=self._row_index(keys))
        frame.attrs["reference"] = "overall" if ref is None else self.groups[ref]
        return frame

    # ---- tests and flags ----------------------------------------------------------------------

    def _values(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        if metric not in METRICS:
            raise InputError(f"GroupFrame: unknown metric {metric!r}; choose from {', '.join(METRICS)}.")
        values = self.per_prompt[METRICS[metric].value_column].to_numpy(dtype=float)
        pairs = self.per_prompt["pair_id"].to_numpy(dtype=object)
        return values, pairs

    def kruskal(self, metric: str = "acceptance_rate") -> KruskalResult:
        """Kruskal–Wallis across all groups on per-prompt values of ``metric``."""
        values, _ = self._values(metric)
        return kruskal_test([values[self._codes == g] for g in range(len(self.groups))])

    def _pairwise(self, metric: str, ref: int | None, paired: bool) -> list[tuple[int, PairwiseResult, float]]:
        """(group position, result, Holm-adjusted p) for every group but the reference."""
        values, pairs = self._values(metric)
        results = []
        for i in range(len(self.groups)):
            if i == ref:
                continue
            in_group = self._codes == i
            in_ref = (self._codes == ref) if ref is not None else ~in_group
            use_pairs = paired and ref is not None
            results.append((i, pairwise_test(
                values[in_group], values[in_ref],
                group_pairs=pairs[in_group] if use_pairs else None,
                reference_pairs=pairs[in_ref] if use_pairs else None,
            )))
        adjusted = holm([r.pvalue for _, r in results])
        return [(i, r, float(p)) for (i, r), p in zip(results, adjusted)]

    def pairwise(self, metric: str = "acceptance_rate", reference: Any = "largest", *, paired: bool = True) -> pd.DataFrame:
        """Each group against the reference group (Mann–Whitney, or Wilcoxon on parallel prompts),
        Holm-adjusted over the groups of this metric. With reference='overall' each group is
        compared with all other prompts (unpaired)."""
        ref = self.reference_index(reference)
        results = self._pairwise(metric, ref, paired)
        frame = pd.DataFrame(
            [{**r.__dict__, "pvalue_holm": p} for _, r, p in results],
            columns=[*PairwiseResult.__dataclass_fields__, "pvalue_holm"],
            index=self._group_index()[[i for i, _, _ in results]],
        )
        frame.attrs["reference"] = "overall" if ref is None else self.groups[ref]
        return frame

    def _flag_rows(self, metrics, reference, tolerance, alpha, power, min_prompts) -> tuple[list[dict], int | None]:
        low, high = tolerance
        if not 0 < low <= 1 <= high:
            raise InputError(f"disparity: the tolerance band must satisfy 0 < low ≤ 1 ≤ high, got {tolerance!r}.")
        ref, col, diff, rat = self._reference_intervals(reference)
        n_comparisons = max(1, len(self.groups) - (0 if ref is None else 1))
        rows = []
        for metric in [m for m in metrics if m in self.metrics]:
            j = self.metrics.index(metric)
            values, pairs = self._values(metric)
            for i, test, p_holm in self._pairwise(metric, ref, paired=True):
                in_group = self._codes == i
                in_ref = (self._codes == ref) if ref is not None else ~in_group
                mdd = self._minimum_detectable(values, pairs, in_group, in_ref, test, alpha, power, n_comparisons)
                ratio = rat.statistic[i, j]
                ref_value = self._interval.statistic[col, j]
                outside = bool(np.isfinite(ratio) and (ratio < low or ratio > high))
                significant = bool(np.isfinite(p_holm) and p_holm < alpha)
                rows.append({
                    "metric": metric, "position": i, "value": self._interval.statistic[i, j],
                    "reference_value": ref_value,
                    "ratio": ratio, "ratio_ci_low": rat.ci_low[i, j], "ratio_ci_high": rat.ci_high[i, j],
                    "difference": diff.statistic[i, j], "difference_ci_low": diff.ci_low[i, j],
                    "difference_ci_high": diff.ci_high[i, j],
                    "test": test.test, "statistic": test.statistic, "pvalue": test.pvalue, "pvalue_holm": p_holm,
                    "effect_size": test.effect_size, "effect_size_name": test.effect_size_name,
                    "n_prompts": test.n_group, "n_reference_prompts": test.n_reference, "n_pairs": test.n_pairs,
                    "min_detectable_difference": mdd,
                    "min_detectable_ratio_low": 1.0 - mdd / ref_value if ref_value else np.nan,
                    "min_detectable_ratio_high": 1.0 + mdd / ref_value if ref_value else np.nan,
                    "small_group": test.n_group < min_prompts,
                    "outside_band": outside, "significant": significant,
                    "status": "flag" if outside and significant else ("inconclusive" if outside else "ok"),
                })
        return rows, ref

    @staticmethod
    def _minimum_detectable(values, pairs, in_group, in_ref, test, alpha, power, n_comparisons) -> float:
        x, y = values[in_group], values[in_ref]
        if test.test == "wilcoxon":
            fx, fy = np.isfinite(x), np.isfinite(y)
            g = _mean_by_pair(x[fx], pairs[in_group][fx])
            r = _mean_by_pair(y[fy], pairs[in_ref][fy])
            d = np.array([g[p] - r[p] for p in g if p in r])
            sd = np.std(d, ddof=1) if d.size > 1 else np.nan
            return minimum_detectable_difference(sd, d.size, alpha=alpha, power=power, n_comparisons=n_comparisons)
        x, y = x[np.isfinite(x)], y[np.isfinite(y)]
        if x.size < 2 or y.size < 2:
            return float("nan")
        pooled = np.sqrt(((x.size - 1) * np.var(x, ddof=1) + (y.size - 1) * np.var(y, ddof=1)) / (x.size + y.size - 2))
        return minimum_detectable_difference(pooled, x.size, y.size, alpha=alpha, power=power, n_comparisons=n_comparisons)

    def flags(
        self,
        metrics: Sequence[str] | None = None,
        reference: Any = "largest",
        *,
        tolerance: tuple[float, float] = (0.8, 1.25),
        alpha: float = 0.05,
        power: float = 0.8,
        min_prompts: int = 20,
    ) -> pd.DataFrame:
        """Per (metric, group): ratio to the reference with interval, the pairwise test (Holm over
        the groups of the metric), effect size, the minimum detectable ratio and a status:

        - ``flag``: ratio outside the tolerance band and the Holm-adjusted test significant;
        - ``inconclusive``: ratio outside the band but not significant (too few prompts to tell);
        - ``ok``: ratio inside the band (a significant difference inside the band is tolerated).

        The minimum detectable ratio is the ratio to the reference that the test would detect with
        probability ``power`` at the Bonferroni level α / (number of comparisons), from a normal
        approximation (see ``minimum_detectable_difference``).
        """
        rows, ref = self._flag_rows(list(metrics or ["acceptance_rate", "speedup"]), reference, tolerance,
                                    alpha, power, min_prompts)
        index = self._row_index([(r["metric"], r["position"]) for r in rows])
        frame = pd.DataFrame([{k: v for k, v in r.items() if k not in ("metric", "position")} for r in rows], index=index)
        frame.attrs["reference"] = "overall" if ref is None else self.groups[ref]
        frame.attrs["tolerance"] = tolerance
        return frame

    def warnings(self, min_prompts: int = 20) -> list[str]:
        """Plain-language warnings: groups with fewer than ``min_prompts`` prompts (intervals and
        tests are unreliable there), groups without data for a metric, prompts without a group."""
        messages = []
        acceptance = self.metrics.index("acceptance_rate") if "acceptance_rate" in self.metrics else 0
        dimension = INTERSECTION.join(self.sensitive)
        for i, group in enumerate(self.groups):
            n = int(self._n_prompts[i, acceptance])
            if n < min_prompts:
                messages.append(
                    f"{dimension}={_label(group)} has {n} prompts (< {min_prompts}): its intervals and tests "
                    "are unreliable; add prompts or merge groups."
                )
            empty = [m for j, m in enumerate(self.metrics) if self._n_prompts[i, j] == 0]
            if empty:
                messages.append(f"{dimension}={_label(group)} has no data for {', '.join(empty)}.")
        unassigned = int((self._codes < 0).sum())
        if unassigned:
            subject = "1 prompt has" if unassigned == 1 else f"{unassigned} prompts have"
            messages.append(f"{subject} no {dimension} attribute; it counts only in 'overall'." if unassigned == 1
                            else f"{subject} no {dimension} attribute; they count only in 'overall'.")
        return messages


# --------------------------------------------------------------------------------------------
# Drill-down
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrillDown:
    """Token-level explanations of a group's acceptance.

    - ``by_rarity``: acceptance per drafted position, by frequency-rank bucket of the token the
      target emitted there (the accepted draft token, or the verifier's correction);
    - ``by_position``: acceptance at draft position i given that position i was reached;
    - ``corrections``: per group, the tokens the verifier emitted in place of a rejected draft
      token, most frequent first. The rejected draft token itself is not recorded, so these are
      the target's corrections, i.e. where the draft went wrong, not what it proposed;
    - ``below_threshold``: per group, prompts whose acceptance rate is below the fallback threshold.
    """

    by_rarity: pd.DataFrame
    by_position: pd.DataFrame
    corrections: pd.DataFrame
    below_threshold: pd.DataFrame
    skipped_records: int
    rank_source: str


def _rank_lookup(token_rank: np.ndarray | Mapping[int, int] | None, tokens: np.ndarray) -> tuple[np.ndarray, str]:
    if token_rank is None:
        # BPE vocabularies are built by merging frequent pairs first, so a lower id is, roughly, a
        # more frequent token (special and byte tokens at the start are the exception).
        return tokens.astype(float), "token id (BPE merge order as a frequency proxy)"
    if isinstance(token_rank, Mapping):
        ranks = np.array([token_rank.get(int(t), np.inf) for t in tokens], dtype=float)
        return ranks, "given token_id -> rank mapping (unknown tokens: rarest)"
    table = np.asarray(token_rank, dtype=float)
    inside = (tokens >= 0) & (tokens < table.size)
    ranks = np.full(tokens.shape, np.inf)
    ranks[inside] = table[tokens[inside]]
    return ranks, "given rank array (tokens outside it: rarest)"


@dataclass(frozen=True)
class _Positions:
    """Every drafted position reached, reconstructed once from the records (independent of how
    prompts are grouped): its prompt (row of the per-prompt table), index in the step, outcome,
    the token emitted there (-1 past the output) and where that token sits in the output."""

    prompt: np.ndarray
    index: np.ndarray
    accepted: np.ndarray
    token: np.ndarray
    output_position: np.ndarray
    record: np.ndarray
    tokens: np.ndarray
    token_offset: np.ndarray
    k_max: int
    skipped: int


def _reconstruct(records: pd.DataFrame, engine: str, table: pd.DataFrame) -> _Positions:
    df = _check_records(records)
    timing = df["timing_only"].fillna(False).astype(bool).to_numpy() if "timing_only" in df.columns else np.zeros(len(df), bool)
    sub = df.loc[(df["engine"].astype(str).to_numpy() == engine) & ~timing].reset_index(drop=True)
    k = _numeric(sub, "k")
    steps_of = _draft_steps(sub)
    tokens, row_of_token = _flatten(sub["output_token_ids"]) if "output_token_ids" in sub.columns else (np.zeros(0), np.zeros(0, np.int64))
    tokens = tokens.astype(np.int64)
    n_tokens = np.bincount(row_of_token, minlength=len(sub))
    good = steps_of.consistent & (np.bincount(steps_of.row, minlength=len(sub)) > 0)

    step_ok = good[steps_of.row]
    a = steps_of.accepted[step_ok].astype(np.int64)
    drafted = steps_of.drafted[step_ok].astype(np.int64)
    step_row = steps_of.row[step_ok]
    emitted = a + 1  # a step that drafted nothing still emits the verifier's token
    # Start of each step inside its record's output: the running total of emitted tokens, minus
    # that total at the record's first step.
    before = np.cumsum(emitted) - emitted
    first_step = np.r_[True, step_row[1:] != step_row[:-1]] if step_row.size else np.zeros(0, bool)
    step_start = before - before[first_step][np.cumsum(first_step) - 1]
    pos_step, pos_index, pos_accepted = _reached_positions(a, drafted)
    pos_record = step_row[pos_step]
    pos_in_output = step_start[pos_step] + pos_index
    token_offset = np.r_[0, np.cumsum(n_tokens)[:-1]].astype(np.int64)
    inside = pos_in_output < n_tokens[pos_record]
    pos_token = np.full(pos_step.size, -1, np.int64)
    pos_token[inside] = tokens[token_offset[pos_record[inside]] + pos_in_output[inside]]
    prompt_of_record = pd.Index(table.index).get_indexer(sub["prompt_id"])
    # Positions shown: up to the largest k configured or drafted (heuristic lengths may exceed k).
    k_max = int(np.nanmax(np.r_[k[good], drafted, 0]))
    return _Positions(
        prompt=prompt_of_record[pos_record], index=pos_index, accepted=pos_accepted, token=pos_token,
        output_position=pos_in_output, record=pos_record, tokens=tokens, token_offset=token_offset,
        k_max=k_max, skipped=int((~good).sum()),
    )


def drilldown(
    records: pd.DataFrame,
    sensitive: str | Sequence[str],
    *,
    engine: str = "speculative",
    token_rank: np.ndarray | Mapping[int, int] | None = None,
    rarity_edges: Sequence[float] = (100, 1_000, 10_000),
    fallback_threshold: float = 0.5,
    fallback_metric: str = "acceptance_rate",
    top_n: int = 10,
    decode: Callable[[list[int]], str] | None = None,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
) -> DrillDown:
    """Acceptance by token rarity and by draft position, corrections and low-acceptance prompts,
    per group, with cluster-bootstrap intervals.

    Steps are reconstructed from ``accepted_per_step`` and the draft length k_s of each step
    (``proposed_per_step``; the constant ``k`` for older records without it): step s emits a_s + 1
    tokens; its drafted positions 0..min(a_s, k_s − 1) were reached (none when k_s = 0); those
    below a_s were accepted; position a_s (when a_s < k_s) was rejected and the emitted token there
    is the verifier's correction. Records whose per-step counts disagree with their totals, and
    older records whose draft length varied (proposed ≠ k·steps), are skipped.
    When EOS or the length limit cuts the last step short, its positions still count in
    ``by_position`` (the engine reported them) but not where a token is needed.
    ``token_rank``: frequency rank per token id (array, or mapping id -> rank); by default the
    token id itself. ``decode(list_of_ids) -> str`` (a tokenizer's decode) adds readable tokens.
    """
    table = per_prompt_metrics(records, engine=engine)
    positions = _reconstruct(records, engine, table)
    return _drilldown(positions, table, _as_list(sensitive), token_rank=token_rank, rarity_edges=rarity_edges,
                      fallback_threshold=fallback_threshold, fallback_metric=fallback_metric, top_n=top_n,
                      decode=decode, n_boot=n_boot, ci=ci, seed=seed)


def _drilldown(positions: _Positions, table: pd.DataFrame, names: list[str], *, token_rank, rarity_edges,
               fallback_threshold, fallback_metric, top_n, decode, n_boot, ci, seed) -> DrillDown:
    if fallback_metric not in table.columns:
        raise InputError(f"drilldown: fallback_metric {fallback_metric!r} is not a per-prompt metric; use e.g. 'acceptance_rate'.")
    codes, groups = _group_codes(table, names)
    n_groups, n_prompts = len(groups), len(table)
    onehot = np.zeros((n_prompts, n_groups))
    onehot[codes >= 0, codes[codes >= 0]] = 1.0
    pos = positions
    known = pos.prompt >= 0

    ranks, rank_source = _rank_lookup(token_rank, np.where(pos.token >= 0, pos.token, 0))
    edges = np.asarray(sorted(rarity_edges), dtype=float)
    bounds = np.r_[0, edges, np.inf]
    rarity_labels = [f"[{int(lo)}, {'inf' if np.isinf(hi) else int(hi)})" for lo, hi in zip(bounds[:-1], bounds[1:])]
    n_positions = max(pos.k_max, 1)

    def counts(bucket: np.ndarray, n_buckets: int, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cell = pos.prompt[keep] * n_buckets + bucket[keep]
        reached = np.bincount(cell, minlength=n_prompts * n_buckets).reshape(n_prompts, n_buckets)
        accepted = np.bincount(cell, weights=pos.accepted[keep], minlength=n_prompts * n_buckets)
        return accepted.reshape(n_prompts, n_buckets), reached

    rarity_acc, rarity_reached = counts(np.searchsorted(edges, ranks, side="right"), len(rarity_labels),
                                        known & (pos.token >= 0))
    position_acc, position_reached = counts(pos.index, n_positions, known)
    rate = table[fallback_metric].to_numpy(dtype=float)
    has_rate = np.isfinite(rate)
    below = has_rate & (rate < fallback_threshold)
    # One bootstrap for all three tables: numerators then denominators, side by side.
    numerators = np.column_stack([rarity_acc, position_acc, below]).astype(float)
    denominators = np.column_stack([rarity_reached, position_reached, has_rate]).astype(float)
    width = numerators.shape[1]
    columns = np.column_stack([numerators, denominators])

    def statistic(weights):
        sums = _group_sums(weights, onehot, columns)
        with np.errstate(all="ignore"):
            return sums[:, :, :width] / sums[:, :, width:]

    strata = np.where(codes >= 0, codes, n_groups)
    interval = cluster_replicates(statistic, n_prompts, strata=strata, n_boot=n_boot, seed=seed).interval(ci)
    member = np.column_stack([onehot, np.ones(n_prompts)])
    total_num, total_den = member.T @ numerators, member.T @ denominators
    group_names = [*groups, "overall"]

    def table_of(first: int, labels: list, label_name: str) -> pd.DataFrame:
        rows = []
        for g, group in enumerate(group_names):
            for b, label in enumerate(labels):
                j = first + b
                rows.append({
                    "group": group, label_name: label, "value": interval.statistic[g, j],
                    "ci_low": interval.ci_low[g, j], "ci_high": interval.ci_high[g, j],
                    "n_positions": int(total_den[g, j]), "n_accepted": int(total_num[g, j]),
                })
        return pd.DataFrame(rows)

    by_rarity = table_of(0, rarity_labels, "rank_bucket")
    by_position = table_of(len(rarity_labels), list(range(1, n_positions + 1)), "position") if pos.k_max else pd.DataFrame()
    j = width - 1
    below_rows = []
    for g, group in enumerate(group_names):
        members = (codes == g) if g < n_groups else np.ones(n_prompts, bool)
        lowest = np.flatnonzero(members & below)
        lowest = lowest[np.argsort(rate[lowest], kind="stable")][:top_n]
        below_rows.append({
            "group": group, "metric": fallback_metric, "threshold": fallback_threshold,
            "n_prompts": int(total_den[g, j]), "n_below": int(total_num[g, j]),
            "share": interval.statistic[g, j], "ci_low": interval.ci_low[g, j], "ci_high": interval.ci_high[g, j],
            "lowest_prompts": [(table.index[i], float(rate[i])) for i in lowest],
        })
    corrections = _corrections(pos, codes, groups, table, top_n, decode)
    return DrillDown(by_rarity, by_position, corrections, pd.DataFrame(below_rows), pos.skipped, rank_source)


def _corrections(pos: _Positions, codes, groups, table, top_n, decode) -> pd.DataFrame:
    valid = (pos.token >= 0) & (pos.prompt >= 0)
    group_of_pos = np.where(valid, codes[np.where(pos.prompt >= 0, pos.prompt, 0)], -1)
    rows = []
    for g, group in enumerate(groups):
        here = valid & (group_of_pos == g)
        rejected = here & ~pos.accepted
        total_corrections = int(rejected.sum())
        if not total_corrections:
            continue
        ids, counts = np.unique(pos.token[rejected], return_counts=True)
        seen_ids, seen_counts = np.unique(pos.token[here], return_counts=True)
        seen = dict(zip(seen_ids.tolist(), seen_counts.tolist()))
        order = np.lexsort((ids, -counts))[:top_n]  # most corrections first, ties by token id
        for token, count in zip(ids[order], counts[order]):
            first = np.flatnonzero(rejected & (pos.token == token))[0]
            row = {"group": group, "token_id": int(token), "n_corrections": int(count),
                   "share_of_group_corrections": count / total_corrections,
                   "correction_rate": count / seen[int(token)],
                   "example_prompt_id": table.index[pos.prompt[first]],
                   "example_position": int(pos.output_position[first])}
            if decode is not None:
                start = pos.token_offset[pos.record[first]]
                position = int(pos.output_position[first])
                context = pos.tokens[start + max(0, position - 8): start + position].tolist()
                row["token"] = decode([int(token)])
                row["example_context"] = decode(context) + "⟦" + decode([int(token)]) + "⟧"
            rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# snapshot.json section
# --------------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(_jsonable(k)) if not isinstance(k, str) else k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if value is pd.NA or value is None:
        return None
    return value


def _triple(value, low, high) -> dict[str, float | None]:
    return {"value": _jsonable(value), "ci_low": _jsonable(low), "ci_high": _jsonable(high)}


PROMPT_METRICS = ("acceptance_rate", "speedup", "mean_accepted_tokens", "tokens_per_s", "n_tokens")


def _prompt_rows(table: pd.DataFrame, names: Sequence[str]) -> list[dict[str, Any]]:
    """Per-prompt metrics (snapshot `prompts`), so that monitoring can test a later run against
    this one prompt by prompt (paired where the prompts are the same), not only through group CIs."""
    names = [n for n in names if n in table.columns]
    return [{"id": str(prompt_id), "pair_id": row.get("pair_id"),
             "attributes": {n: row[n] for n in names if row[n] is not None},
             **{m: float(row[m]) for m in PROMPT_METRICS}}
            for prompt_id, row in table.iterrows()]


def disparity_section(
    records_df: pd.DataFrame,
    *,
    dimensions: Sequence[str | Sequence[str]],
    reference: Any = "largest",
    engine: str = "speculative",
    baseline: str = "vanilla",
    metrics: Sequence[str] | None = None,
    test_metrics: Sequence[str] = ("acceptance_rate", "speedup"),
    tolerance: tuple[float, float] = (0.8, 1.25),
    alpha: float = 0.05,
    power: float = 0.8,
    min_prompts: int = 20,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    fallback_threshold: float = 0.5,
    fallback_metric: str = "acceptance_rate",
    cost_ratio: float | None = None,
    k_max: int = 8,
    token_rank: np.ndarray | Mapping[int, int] | None = None,
    rarity_edges: Sequence[float] = (100, 1_000, 10_000),
    top_n: int = 10,
    decode: Callable[[list[int]], str] | None = None,
    drill_down: bool = True,
) -> dict[str, Any]:
    """The ``groups``, ``disparities``, ``recommendations`` and ``prompts`` parts of snapshot.json.

    ``dimensions``: attribute names, and lists of names for intersections, e.g.
    ``["domain", "dialect", ["domain", "dialect"]]``. Intersections are keyed "domain×dialect".
    ``reference``: 'largest', 'overall', a group label, or a mapping from dimension key to one of
    those (e.g. ``{"dialect": "en-US"}``; dimensions not in it use 'largest').
    Every metric is ``{value, ci_low, ci_high}`` with ``n_prompts`` and ``n_tokens`` beside it.
    Drill-down results sit under ``disparities[dimension]["drilldown"]``.
    """
    from specaudit.stats import advice  # advice reads this module's results; import late, no cycle

    if not dimensions:
        raise InputError("disparity: name at least one prompt attribute to analyse (dimensions=...).")
    table = per_prompt_metrics(records_df, engine=engine, baseline=baseline)
    # Steps are reconstructed once; each dimension only regroups them.
    positions = _reconstruct(records_df, engine, table) if drill_down and "accepted_per_step" in records_df.columns else None
    groups_part: dict[str, Any] = {}
    disparities_part: dict[str, Any] = {}
    recommendations_part: dict[str, Any] = {}
    for dimension in dimensions:
        names = _as_list(dimension)
        key = INTERSECTION.join(names)
        reference_for = reference.get(key, "largest") if isinstance(reference, Mapping) else reference
        frame = GroupFrame.from_prompts(table, names, metrics, n_boot=n_boot, ci=ci, seed=seed)
        by_group = frame.by_group
        overall = frame.overall
        ref = frame.reference_index(reference_for)
        reference_label = "overall" if ref is None else _label(frame.groups[ref])

        def metric_block(rows: pd.DataFrame) -> dict[str, Any]:
            return {
                metric: {**_triple(r["value"], r["ci_low"], r["ci_high"]),
                         "n_prompts": int(r["n_prompts"]), "n_tokens": int(r["n_tokens"])}
                for metric, r in rows.iterrows()
            }

        entries = {}
        for i, group in enumerate(frame.groups):
            rows = by_group.iloc[i].unstack()  # metric x stat
            entries[_label(group)] = {
                "levels": dict(zip(names, group if isinstance(group, tuple) else (group,))),
                "n_prompts": int(rows["n_prompts"].max()),
                "n_tokens": int(rows["n_tokens"].get("acceptance_rate", rows["n_tokens"].max())),
                "metrics": metric_block(rows.loc[frame.metrics]),
            }
        groups_part[key] = {
            "dimension": names,
            "reference": reference_label,
            "overall": {"n_prompts": int(overall["n_prompts"].max()), "metrics": metric_block(overall)},
            "by_group": entries,
        }

        flag_rows, _ = frame._flag_rows(list(test_metrics), reference_for, tolerance, alpha, power, min_prompts)
        derived = {(kind, method): getattr(frame, kind)(method)
                   for kind in ("difference", "ratio") for method in ("between_groups", "to_overall")}
        per_metric = {}
        for metric in frame.metrics:
            kw = frame.kruskal(metric)
            entry = {
                kind: {method: _triple(*derived[(kind, method)].loc[metric, ["value", "ci_low", "ci_high"]])
                       for method in ("between_groups", "to_overall")}
                for kind in ("difference", "ratio")
            }
            entry["kruskal"] = {"statistic": kw.statistic, "pvalue": kw.pvalue, "n_groups": kw.n_groups,
                                "n_prompts": kw.n_prompts}
            pairwise = {
                _label(frame.groups[r["position"]]): {
                    "ratio": _triple(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"]),
                    "difference": _triple(r["difference"], r["difference_ci_low"], r["difference_ci_high"]),
                    **{c: r[c] for c in (
                        "test", "statistic", "pvalue", "pvalue_holm", "effect_size", "effect_size_name",
                        "n_prompts", "n_reference_prompts", "n_pairs", "min_detectable_ratio_low",
                        "min_detectable_ratio_high", "small_group", "outside_band", "significant", "status")},
                }
                for r in flag_rows if r["metric"] == metric
            }
            if pairwise:
                entry["pairwise"] = pairwise
            per_metric[metric] = entry
        flagged = [
            {"metric": r["metric"], "group": _label(frame.groups[r["position"]]), "status": r["status"],
             "ratio": _triple(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"]), "pvalue_holm": r["pvalue_holm"]}
            for r in flag_rows if r["status"] != "ok"
        ]
        dimension_part = {
            "dimension": names, "reference": reference_label, "tolerance": list(tolerance), "alpha": alpha,
            "correction": "holm (per metric, over the groups compared with the reference)",
            "metrics": per_metric, "flags": flagged, "warnings": frame.warnings(min_prompts),
        }
        if positions is not None:
            dd = _drilldown(positions, table, names, token_rank=token_rank, rarity_edges=rarity_edges,
                            fallback_threshold=fallback_threshold, fallback_metric=fallback_metric, top_n=top_n,
                            decode=decode, n_boot=n_boot, ci=ci, seed=seed)
            dimension_part["drilldown"] = _drilldown_json(dd)
        disparities_part[key] = dimension_part
        recommendations_part[key] = advice.recommendations(
            frame, reference=reference_for, threshold=fallback_threshold, cost_ratio=cost_ratio, k_max=k_max,
            threshold_metric=fallback_metric,
        )
    analysed = sorted({name for dimension in dimensions for name in _as_list(dimension)})
    return _jsonable({"groups": groups_part, "disparities": disparities_part, "recommendations": recommendations_part,
                      "prompts": _prompt_rows(table, analysed)})


def _drilldown_json(dd: DrillDown) -> dict[str, Any]:
    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        out = []
        for row in frame.to_dict(orient="records"):
            row["group"] = _label(row["group"]) if row.get("group") is not None else None
            out.append(row)
        return out

    below = records(dd.below_threshold)
    for row in below:
        row["lowest_prompts"] = [{"prompt_id": str(p), "value": r} for p, r in row["lowest_prompts"]]
    return {
        "rank_source": dd.rank_source,
        "skipped_records": dd.skipped_records,
        "by_rarity": records(dd.by_rarity),
        "by_position": records(dd.by_position),
        "corrections_note": "tokens the verifier emitted in place of a rejected draft token (the rejected draft "
                            "token is not recorded)",
        "corrections": [{**row, "example_prompt_id": str(row["example_prompt_id"])} for row in records(dd.corrections)],
        "below_threshold": below,
    }


# --------------------------------------------------------------------------------------------
# Synthetic records (calibration, power and demos)
# --------------------------------------------------------------------------------------------


def simulate_records(
    group_acceptance: Mapping[Any, float],
    *,
    n_prompts: int | Mapping[Any, int] = 30,
    dimension: str = "group",
    k: int = 4,
    steps: tuple[int, int] = (15, 30),
    spread: float = 0.8,
    shared: float = 0.0,
    cost_ratio: float = 0.3,
    target_step_s: float = 0.02,
    timing_noise: float = 0.05,
    vanilla: bool = True,
    vocab_size: int = 32_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Records with a known acceptance structure, in the records.jsonl schema.

    Prompt p of group g has per-position acceptance expit(logit(μ_g) + spread·z_p), so tokens of
    a prompt are correlated through z_p; with ``shared`` > 0 prompts of the same index across
    groups are parallel (same ``pair_id``) and share that part of z. Each step accepts the run of
    leading successes among k Bernoulli draws. Timings follow the speed-up model: a speculative
    step costs (k·c + 1) target steps, a vanilla token one target step, with log-normal noise.
    """
    rng = np.random.default_rng(seed)
    sizes = n_prompts if isinstance(n_prompts, Mapping) else {g: n_prompts for g in group_acceptance}
    n_pairs = max(sizes.values()) if sizes else 0
    pair_effect = rng.standard_normal(n_pairs)
    rows = []
    for group, mean in group_acceptance.items():
        if not 0 < mean < 1:
            raise InputError(f"simulate_records: acceptance for group {group!r} must lie strictly between 0 and 1.")
        for j in range(sizes[group]):
            z = math.sqrt(shared) * pair_effect[j] + math.sqrt(1 - shared) * rng.standard_normal()
            alpha = special.expit(special.logit(mean) + spread * z)
            n_steps = int(rng.integers(steps[0], steps[1] + 1))
            per_step = np.cumprod(rng.random((n_steps, k)) < alpha, axis=1).sum(axis=1)
            n_out = int((per_step + 1).sum())
            beta = np.clip(alpha + 0.05 * rng.standard_normal((n_steps, k)), 0, 1)
            step_s = target_step_s * rng.lognormal(0.0, 0.1)  # the prompt's own speed, shared by both engines
            prompt_id = f"{group}-{j}"
            common = {
                "prompt_id": prompt_id, "pair_id": f"pair-{j}" if shared > 0 else None,
                "attributes": {dimension: group}, "sample": 0, "seed": seed,
                "sampling": {"temperature": 1.0, "top_k": 0, "top_p": 1.0}, "prompt_token_ids": [1, 2, 3],
                "text": "", "finish_reason": "length", "timing_only": False,
            }
            rows.append({
                **common, "key": f"{prompt_id}|speculative|0", "engine": "speculative", "k": k,
                "output_token_ids": rng.integers(0, vocab_size, n_out).tolist(),
                "wall_s": n_steps * step_s * (k * cost_ratio + 1) * rng.lognormal(0.0, timing_noise),
                "ttft_s": step_s * (k * cost_ratio + 1), "draft_s": n_steps * k * cost_ratio * step_s,
                "verify_s": n_steps * step_s, "steps": n_steps, "proposed": n_steps * k,
                "accepted": int(per_step.sum()), "accepted_per_step": per_step.tolist(),
                "proposed_per_step": [k] * n_steps, "beta": beta.tolist(),
            })
            if vanilla:
                rows.append({
                    **common, "key": f"{prompt_id}|vanilla|0", "engine": "vanilla", "k": 0,
                    "output_token_ids": rng.integers(0, vocab_size, n_out).tolist(),
                    "wall_s": n_out * step_s * rng.lognormal(0.0, timing_noise), "ttft_s": step_s,
                    "draft_s": 0.0, "verify_s": 0.0, "steps": n_out, "proposed": 0, "accepted": 0,
                    "accepted_per_step": [], "proposed_per_step": [], "beta": [],
                })
    return pd.DataFrame(rows)
