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
  per-token times over prompts run by both engines (paired; every prompt weighs the same). For
  the screen both times are the cost model's predictions for the screened path
  (``predicted_wall_s`` / ``predicted_vanilla_wall_s``, added by analysis; stats.cost_model).
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError

# Record fields; every other column of the record table is read as a prompt attribute.
_RECORD_FIELDS = frozenset(
    [
        "key",
        "prompt_id",
        "pair_id",
        "attributes",
        "engine",
        "sample",
        "seed",
        "sampling",
        "k",
        "prompt_token_ids",
        "output_token_ids",
        "text",
        "finish_reason",
        "wall_s",
        "ttft_s",
        "draft_s",
        "verify_s",
        "step_s",
        "steps",
        "proposed",
        "accepted",
        "accepted_per_step",
        "proposed_per_step",
        "beta",
        "accept_prob",
        "step_pit",
        "timing_only",
        "n_output_tokens",
        "predicted_wall_s",
        "predicted_vanilla_wall_s",
    ]
)
_REQUIRED = ("prompt_id", "engine", "accepted", "proposed", "steps", "wall_s")


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


def _reached_positions(
    accepted: Sequence[int] | np.ndarray, drafted: Sequence[int] | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
            f"disparity: the records lack the field(s) {', '.join(missing)}; pass the records.jsonl table as written by the runner."
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
    engine: str = SPECULATIVE_ENGINE,
    baseline: str = CONTROL_ENGINE,
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
    vanilla_wall = wall
    if engine == SCREEN_ENGINE and "predicted_wall_s" in df.columns:
        # The screen times nothing: its speed columns are the cost model's predictions for each
        # screened path, both sides for the same path (specaudit.stats.cost_model).
        wall, vanilla_wall = _numeric(df, "predicted_wall_s"), _numeric(df, "predicted_vanilla_wall_s")
        vanilla = vanilla_latency = audited
    draft_s, verify_s = _numeric(df, "draft_s"), _numeric(df, "verify_s")

    # Positions reached per record: Σ_s min(a_s + 1, k_s), defined only where the per-step
    # counts agree with the record's totals (see _draft_steps).
    reached = np.full(n_rows, np.nan)
    if "accepted_per_step" in df.columns:
        steps_of = _draft_steps(df)
        reached_sum = np.bincount(steps_of.row, weights=_n_reached(steps_of.accepted, steps_of.drafted), minlength=n_rows)
        reached = np.where(steps_of.consistent, reached_sum, np.nan)
    # The screen's records carry expectations instead of per-step lists: positions reached in
    # expectation, and β at every position of the path.
    reached = np.where(np.isnan(reached), _numeric(df, "expected_reached"), reached)
    beta_sum = beta_n = np.zeros(n_rows)
    for column, depth in (("beta", 2), ("position_beta", 1)):
        if column in df.columns:
            beta_values, row_of_beta = _flatten(df[column], depth=depth)
            beta_sum = beta_sum + np.bincount(row_of_beta, weights=beta_values, minlength=n_rows)
            beta_n = beta_n + np.bincount(row_of_beta, minlength=n_rows).astype(float)

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
    vanilla_timed = vanilla_latency & (n_out > 0) & (vanilla_wall > 0)
    col["vanilla_tokens"] = per_prompt(n_out, vanilla_timed)
    col["vanilla_wall_s"] = per_prompt(vanilla_wall, vanilla_timed)
    col["one"] = np.ones(n_prompts)

    def ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
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
        raise InputError(
            f"disparity: the prompt attribute(s) {', '.join(clashes)} clash with metric column names; rename them in the prompt set."
        )
    firsts = first.groupby("code", sort=True).first()
    col["pair_id"] = firsts["pair_id"].to_numpy(dtype=object) if "pair_id" in firsts else np.full(n_prompts, None, dtype=object)
    for name in names:
        col[name] = firsts[name].to_numpy(dtype=object)
    out = pd.DataFrame(col, index=pd.Index(prompt_ids, name="prompt_id"))
    out.attrs["attributes"] = names
    out.attrs["engine"] = engine
    out.attrs["baseline"] = baseline
    return out
