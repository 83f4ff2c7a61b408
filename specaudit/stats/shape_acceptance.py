"""Acceptance of tree and staged runs per prompt group: tokens per step, the acceptance at each
depth of a tree, and each level of a staged run, from the records alone.

A tree step offers a path of up to its depth D; the accepted path's length a says that depths
1..a accepted and depth a + 1 (if a < D) rejected. So the acceptance at depth d is
#{steps with a >= d} / #{steps with a >= d − 1 and D >= d}: the chance that a step which reached
depth d found a child to accept there. A staged record carries both levels' totals
(`extra.levels`): small → medium and medium → target, proposed and accepted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

__all__ = ["shape_acceptance"]


def _field(record: Any, name: str) -> Any:
    if isinstance(record, dict):
        return record.get(name)
    value = getattr(record, name, None)
    return value if value is not None else getattr(record, "extra", {}).get(name)


def shape_acceptance(records: Iterable[Any], dimension: str, engines: tuple[str, ...] = ("tree", "staged", "speculative")) -> pd.DataFrame:
    """One row per (engine, group of `dimension`): steps, tokens per step (emitted / steps),
    acceptance per depth (`depth_1`, `depth_2`, ...: chain positions for speculative and staged
    records too) and, for staged records, each level's accepted / proposed (`small_to_medium`,
    `medium_to_target`). Timing-only records are left out."""
    rows: dict[tuple[str, str], dict] = {}
    for record in records:
        engine = _field(record, "engine")
        if engine not in engines or _field(record, "timing_only"):
            continue
        group = str((_field(record, "attributes") or {}).get(dimension, "?"))
        row = rows.setdefault((engine, group), {"steps": 0, "tokens": 0, "reached": {}, "accepted": {}, "levels": {}})
        accepted, offered = _field(record, "accepted_per_step") or [], _field(record, "proposed_per_step") or []
        row["steps"] += len(accepted)
        row["tokens"] += len(_field(record, "output_token_ids") or [])
        for a, depth in zip(accepted, offered):
            for d in range(1, min(a + 1, depth) + 1):  # depths reached: 1..a accepted, a + 1 tried
                row["reached"][d] = row["reached"].get(d, 0) + 1
                row["accepted"][d] = row["accepted"].get(d, 0) + (d <= a)
        for level in _field(record, "levels") or []:
            name = level["level"].replace(" -> ", "_to_")
            proposed, kept = row["levels"].get(name, (0, 0))
            row["levels"][name] = (proposed + level["proposed"], kept + level["accepted"])
    out = []
    for (engine, group), row in sorted(rows.items()):
        entry = {"engine": engine, dimension: group, "steps": row["steps"]}
        entry["tokens_per_step"] = row["tokens"] / row["steps"] if row["steps"] else float("nan")
        for d in sorted(row["reached"]):
            entry[f"depth_{d}"] = row["accepted"][d] / row["reached"][d]
        for name, (proposed, kept) in row["levels"].items():
            entry[name] = kept / proposed if proposed else float("nan")
        out.append(entry)
    return pd.DataFrame(out)
