"""Group codes, labels and weighted sums shared by the group frame and the drill-down."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from specaudit._validation import did_you_mean
from specaudit.contracts import group_label
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.stats._bootstrap import BootstrapResult


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
        if reference == group or str(reference) == group_label(group):
            return i
    raise InputError(
        f"disparity: reference group {reference!r} is not among the groups "
        f"({', '.join(group_label(g) for g in groups)}); pass 'largest', 'overall' or one of them"
        + did_you_mean(str(reference), [group_label(g) for g in groups])
    )


def _interval_frame(result: BootstrapResult, index: pd.Index) -> pd.DataFrame:
    return pd.DataFrame(
        {"value": np.atleast_1d(result.statistic), "ci_low": np.atleast_1d(result.ci_low), "ci_high": np.atleast_1d(result.ci_high)},
        index=index,
    )
