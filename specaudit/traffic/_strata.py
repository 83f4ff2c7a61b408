"""The strata requests are compared within: what differs between groups besides the group.

Octave bins of prompt and output length (a request of 100 tokens and one of 127 share a bin, one
of 128 does not), the sampling setting (greedy, T <= 0.5, T <= 1, hotter) and the requests in
flight at arrival (octaves of 1 + in flight). A stratum is compared once both sides have
MIN_REQUESTS (10) requests in it (_estimate.py): with fewer, its variance is too noisy for the
normal bound the alerts use, which the false-alarm bench showed with a minimum of 2. A comparison of two groups weighs each stratum
by the first group's share of it, so a group that only sends long prompts is compared with what
the other groups get on long prompts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

MISSING_BIN = -1


def octave(values: pd.Series) -> np.ndarray:
    """floor(log2(v)) for v >= 1 (0 and 1 share bin 0); MISSING_BIN where unknown."""
    v = values.to_numpy(dtype=float, na_value=np.nan)
    bins = np.full(v.shape, MISSING_BIN, dtype=np.int64)
    known = ~np.isnan(v)
    bins[known] = np.floor(np.log2(np.maximum(v[known], 1.0))).astype(np.int64)
    return bins


def sampling_bin(temperature: pd.Series) -> np.ndarray:
    t = temperature.to_numpy(dtype=float)
    return np.select([t <= 0, t <= 0.5, t <= 1.0], [0, 1, 2], default=3).astype(np.int64)


def in_flight_at_arrival(start: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """For each request, how many others had arrived and not yet finished when it arrived."""
    end = start + latency
    started = np.searchsorted(np.sort(start), start, side="right")  # requests arrived by then, itself included
    ended = np.searchsorted(np.sort(end), start, side="right")
    return np.maximum(started - ended - 1, 0)


def add_strata(frame: pd.DataFrame) -> pd.DataFrame:
    frame["prompt_bin"] = octave(frame["prompt_tokens"])
    frame["output_bin"] = octave(frame["output_tokens"])
    frame["sampling_bin"] = sampling_bin(frame["temperature"])
    frame["load_bin"] = octave(frame["in_flight"] + 1)
    return frame
