"""Drill-down: token-level explanations of a group's acceptance."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.errors import InputError
from specaudit.stats._bootstrap import cluster_replicates
from specaudit.stats.disparity._grouping import _as_list, _group_codes, _group_sums
from specaudit.stats.disparity.per_prompt import (
    _check_records,
    _draft_steps,
    _flatten,
    _numeric,
    _reached_positions,
    per_prompt_metrics,
)


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
        prompt=prompt_of_record[pos_record],
        index=pos_index,
        accepted=pos_accepted,
        token=pos_token,
        output_position=pos_in_output,
        record=pos_record,
        tokens=tokens,
        token_offset=token_offset,
        k_max=k_max,
        skipped=int((~good).sum()),
    )


def drilldown(
    records: pd.DataFrame,
    sensitive: str | Sequence[str],
    *,
    engine: str = SPECULATIVE_ENGINE,
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
    return _drilldown(
        positions,
        table,
        _as_list(sensitive),
        token_rank=token_rank,
        rarity_edges=rarity_edges,
        fallback_threshold=fallback_threshold,
        fallback_metric=fallback_metric,
        top_n=top_n,
        decode=decode,
        n_boot=n_boot,
        ci=ci,
        seed=seed,
    )


def _drilldown(
    positions: _Positions,
    table: pd.DataFrame,
    names: list[str],
    *,
    token_rank: np.ndarray | Mapping[int, int] | None,
    rarity_edges: Sequence[float],
    fallback_threshold: float,
    fallback_metric: str,
    top_n: int,
    decode: Callable[[list[int]], str] | None,
    n_boot: int,
    ci: float,
    seed: int,
) -> DrillDown:
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
    rarity_labels = [f"[{int(lo)}, {'inf' if np.isinf(hi) else int(hi)})" for lo, hi in itertools.pairwise(bounds)]
    n_positions = max(pos.k_max, 1)

    def counts(bucket: np.ndarray, n_buckets: int, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cell = pos.prompt[keep] * n_buckets + bucket[keep]
        reached = np.bincount(cell, minlength=n_prompts * n_buckets).reshape(n_prompts, n_buckets)
        accepted = np.bincount(cell, weights=pos.accepted[keep], minlength=n_prompts * n_buckets)
        return accepted.reshape(n_prompts, n_buckets), reached

    rarity_acc, rarity_reached = counts(np.searchsorted(edges, ranks, side="right"), len(rarity_labels), known & (pos.token >= 0))
    position_acc, position_reached = counts(pos.index, n_positions, known)
    rate = table[fallback_metric].to_numpy(dtype=float)
    has_rate = np.isfinite(rate)
    below = has_rate & (rate < fallback_threshold)
    # One bootstrap for all three tables: numerators then denominators, side by side.
    numerators = np.column_stack([rarity_acc, position_acc, below]).astype(float)
    denominators = np.column_stack([rarity_reached, position_reached, has_rate]).astype(float)
    width = numerators.shape[1]
    columns = np.column_stack([numerators, denominators])

    def statistic(weights: np.ndarray) -> np.ndarray:
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
                rows.append(
                    {
                        "group": group,
                        label_name: label,
                        "value": interval.statistic[g, j],
                        "ci_low": interval.ci_low[g, j],
                        "ci_high": interval.ci_high[g, j],
                        "n_positions": int(total_den[g, j]),
                        "n_accepted": int(total_num[g, j]),
                    }
                )
        return pd.DataFrame(rows)

    by_rarity = table_of(0, rarity_labels, "rank_bucket")
    by_position = table_of(len(rarity_labels), list(range(1, n_positions + 1)), "position") if pos.k_max else pd.DataFrame()
    j = width - 1
    below_rows = []
    for g, group in enumerate(group_names):
        members = (codes == g) if g < n_groups else np.ones(n_prompts, bool)
        lowest = np.flatnonzero(members & below)
        lowest = lowest[np.argsort(rate[lowest], kind="stable")][:top_n]
        below_rows.append(
            {
                "group": group,
                "metric": fallback_metric,
                "threshold": fallback_threshold,
                "n_prompts": int(total_den[g, j]),
                "n_below": int(total_num[g, j]),
                "share": interval.statistic[g, j],
                "ci_low": interval.ci_low[g, j],
                "ci_high": interval.ci_high[g, j],
                "lowest_prompts": [(table.index[i], float(rate[i])) for i in lowest],
            }
        )
    corrections = _corrections(pos, codes, groups, table, top_n, decode)
    return DrillDown(by_rarity, by_position, corrections, pd.DataFrame(below_rows), pos.skipped, rank_source)


def _corrections(
    pos: _Positions, codes: np.ndarray, groups: list, table: pd.DataFrame, top_n: int, decode: Callable[[list[int]], str] | None
) -> pd.DataFrame:
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
            row = {
                "group": group,
                "token_id": int(token),
                "n_corrections": int(count),
                "share_of_group_corrections": count / total_corrections,
                "correction_rate": count / seen[int(token)],
                "example_prompt_id": table.index[pos.prompt[first]],
                "example_position": int(pos.output_position[first]),
            }
            if decode is not None:
                start = pos.token_offset[pos.record[first]]
                position = int(pos.output_position[first])
                context = pos.tokens[start + max(0, position - 8) : start + position].tolist()
                row["token"] = decode([int(token)])
                row["example_context"] = decode(context) + "⟦" + decode([int(token)]) + "⟧"
            rows.append(row)
    return pd.DataFrame(rows)
