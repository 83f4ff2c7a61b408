"""The sums a check reads, from request rows: per key (hour and stratum at ingest; group and period
at a check), n and per metric the count, Σx, Σy, Σx², Σy², Σxy of the requests that count for it.

One definition for the three places that sum rows: ingest adding new requests to the roll-up
table, a rebuild of that table, and the rows of the hour a baseline ends in. A request counts
for a metric when it succeeded (status < 400), its x is > 0 and its y is known: acceptance is
accepted over proposed drafts, latency per token is latency over output tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# The strata every comparison is adjusted over (see _strata.py).
STRATA = ("prompt_bin", "output_bin", "sampling_bin", "load_bin")
# Per-request columns summed per group and stratum: (x, y) pairs for the two ratio metrics.
METRIC_COLUMNS = {"acceptance": ("proposed", "accepted"), "latency_per_token": ("output_tokens", "latency_s")}
SUM_FIELDS = ("n", "x", "y", "xx", "yy", "xy")
SUM_COLUMNS = ["n", *(f"{metric}_{field}" for metric in METRIC_COLUMNS for field in SUM_FIELDS)]
# The request columns the sums (and the groups) are made from.
ROW_COLUMNS = ["time", "status", "language", "labels", *STRATA, *dict.fromkeys(c for pair in METRIC_COLUMNS.values() for c in pair)]


# The roll-up's time step. An hour, not a minute: at a few requests a second a minute holds about as
# many requests as there are strata, and its roll-up would be nearly as long as the requests.
HOUR_S = 3600.0


def hour_of(time: np.ndarray | float) -> np.ndarray:
    """The roll-up's hour of an arrival time in Unix seconds: floor(time / 3600)."""
    return np.floor(np.asarray(time, dtype=float) / HOUR_S).astype(np.int64)


def rollup_sums(rows: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per distinct `keys`: SUM_COLUMNS over `rows` (request rows with ROW_COLUMNS besides the keys)."""
    status = rows["status"].to_numpy(dtype=float)
    parts = {"n": np.ones(len(rows), dtype=np.int64)}
    for metric, (x_name, y_name) in METRIC_COLUMNS.items():
        x = rows[x_name].to_numpy(dtype=float, na_value=np.nan)
        y = rows[y_name].to_numpy(dtype=float, na_value=np.nan)
        ok = (status < 400) & (x > 0) & ~np.isnan(y)
        x, y = np.where(ok, x, 0.0), np.where(ok, y, 0.0)
        parts.update({f"{metric}_n": ok.astype(np.int64), f"{metric}_x": x, f"{metric}_y": y})
        parts.update({f"{metric}_xx": x * x, f"{metric}_yy": y * y, f"{metric}_xy": x * y})
    frame = pd.DataFrame({**{k: rows[k].to_numpy() for k in keys}, **parts})
    return frame.groupby(list(keys), as_index=False, sort=False)[SUM_COLUMNS].sum()
