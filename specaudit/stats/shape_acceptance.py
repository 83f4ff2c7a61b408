"""Acceptance of tree and staged runs per prompt group: tokens per step, the acceptance at each
depth of a tree, and each level of a staged run, from the records alone, with intervals.

A tree step offers a path of up to its depth D; the accepted path's length a says that depths
1..a accepted and depth a + 1 (if a < D) rejected. So the acceptance at depth d is
#{steps with a >= d} / #{steps with a >= d − 1 and D >= d}: the chance that a step which reached
depth d found a child to accept there (for a chain, position d of its k). A staged record
carries both levels' totals (`levels`): small → medium and medium → target, proposed and
accepted. Tokens per step is the output's length over the verification steps. A screen record
beside the tree engine carries the same sums in expectation along its target path
(`tree_expected`, stats.shape_screen), read as they are.

Every figure is a ratio of two sums over the group's records. The prompt is the unit that is
sampled (a prompt's steps are correlated), so the intervals come from the cluster bootstrap over
prompts (stats._bootstrap, percentile, seeded), as for the other group metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from specaudit.contracts.engines import BEYOND_CHAINS
from specaudit.contracts.run import SPECULATIVE_ENGINE
from specaudit.stats._bootstrap import cluster_replicates

__all__ = ["SHAPE_ENGINES", "shape_acceptance"]

SHAPE_ENGINES = (*BEYOND_CHAINS, SPECULATIVE_ENGINE)
"""The engines whose steps have a shape to count: a tree, a staged chain, a chain."""


def _field(record: Any, name: str) -> Any:
    if isinstance(record, dict):
        return record.get(name)
    value = getattr(record, name, None)
    return value if value is not None else getattr(record, "extra", {}).get(name)


def _tally(record: Any) -> dict[str, float]:
    """One record's numerators and denominators: `<metric>:n` over `<metric>:d`."""
    counts: dict[str, float] = {}

    def add(metric: str, n: float, d: float) -> None:
        counts[f"{metric}:n"] = counts.get(f"{metric}:n", 0.0) + n
        counts[f"{metric}:d"] = counts.get(f"{metric}:d", 0.0) + d

    expected = _field(record, "tree_expected")
    if expected:  # the screen's expectation for the tree along its path: the same sums, in expectation
        for metric, (n, d) in expected.items():
            add(metric, n, d)
        return counts
    accepted, offered = _field(record, "accepted_per_step") or [], _field(record, "proposed_per_step") or []
    add("tokens_per_step", len(_field(record, "output_token_ids") or []), len(accepted))
    for a, depth in zip(accepted, offered):
        for d in range(1, min(a + 1, depth) + 1):  # depths reached: 1..a accepted, a + 1 tried
            add(f"depth_{d}", float(d <= a), 1.0)
    for level in _field(record, "levels") or []:
        add(level["level"].replace(" -> ", "_to_"), level["accepted"], level["proposed"])
    return counts


def _metric_order(name: str) -> tuple[int, int, str]:
    if name == "tokens_per_step":
        return (0, 0, name)
    if name.startswith("depth_"):
        return (1, int(name.removeprefix("depth_")), name)
    return (2, 0, name)


def shape_acceptance(
    records: Iterable[Any],
    dimension: str,
    engines: tuple[str, ...] = SHAPE_ENGINES,
    *,
    n_boot: int = 0,
    seed: int = 0,
    confidence_level: float = 0.95,
) -> pd.DataFrame:
    """One row per (engine, group of `dimension`): `n_prompts`, `steps`, `tokens_per_step`, the
    acceptance per depth (`depth_1`, `depth_2`, ...: chain positions for speculative and staged
    records) and, for staged records, each level's accepted / proposed (`small_to_medium`,
    `medium_to_target`). With `n_boot` > 0 every figure also gets `<figure>_ci_low` and
    `<figure>_ci_high`: the percentile interval of the cluster bootstrap over the group's prompts.
    Timing-only records are left out."""
    prompts: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    steps: dict[tuple[str, str], float] = {}  # expected steps for the screen
    for index, record in enumerate(records):
        engine = _field(record, "engine")
        if engine not in engines or _field(record, "timing_only"):
            continue
        group = str((_field(record, "attributes") or {}).get(dimension, "?"))
        prompt = _field(record, "prompt_id")
        totals = prompts.setdefault((engine, group), {}).setdefault(str(index if prompt is None else prompt), {})
        for key, value in _tally(record).items():
            totals[key] = totals.get(key, 0.0) + value
        counted = (_field(record, "tree_expected") or {}).get("tokens_per_step", [0, len(_field(record, "accepted_per_step") or [])])[1]
        steps[(engine, group)] = steps.get((engine, group), 0) + counted
    out = []
    for (engine, group), per_prompt in sorted(prompts.items()):
        table = pd.DataFrame(list(per_prompt.values())).fillna(0.0)
        metrics = sorted({c.rpartition(":")[0] for c in table.columns}, key=_metric_order)
        numerators = table[[f"{m}:n" for m in metrics]].to_numpy(float)
        denominators = table[[f"{m}:d" for m in metrics]].to_numpy(float)

        def ratios(weights: np.ndarray, n: np.ndarray = numerators, d: np.ndarray = denominators) -> np.ndarray:
            with np.errstate(all="ignore"):
                value = (weights @ n) / (weights @ d)
            return np.where(np.isfinite(value), value, np.nan)

        entry: dict[str, Any] = {"engine": engine, dimension: group, "n_prompts": len(table), "steps": steps[(engine, group)]}
        if n_boot > 0:
            result = cluster_replicates(ratios, len(table), n_boot=n_boot, seed=seed).interval(confidence_level)
            values, lows, highs = result.statistic, result.ci_low, result.ci_high
        else:
            values = ratios(np.ones((1, len(table))))[0]
        for j, metric in enumerate(metrics):
            entry[metric] = float(values[j])
            if n_boot > 0:
                entry[f"{metric}_ci_low"], entry[f"{metric}_ci_high"] = float(lows[j]), float(highs[j])
        out.append(entry)
    return pd.DataFrame(out)
