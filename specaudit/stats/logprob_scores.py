"""White-box scores from the logprobs a server returned with its output: no local model needed.

An endpoint run (`specaudit.engines.endpoint.client`) stores per emitted token x_t its logprob and the
top-N `[token_id, logprob]` of the distribution p_t the server sampled from. That is enough for
an exact randomised PIT:

  - x_t inside the top-N: p = p_t(x_t), F_t(x_t−) = mass of the top-N entries ranked above it
    (descending p, ties by ascending id: an order that does not depend on x_t);
  - x_t outside: under H0 its PIT is uniform on [S_N, 1], S_N the top-N mass (whatever the
    order of the tail), so the row gets cdf_below = S_N and `p` = 1 − S_N, the width of that
    interval. `surprisal` keeps the real −log p_t(x_t) (the two-sample log-likelihood uses it).
    The server's logprobs are of its full distribution: nothing is renormalised.

Entropy and surprisal variance need the whole p_t; they are NaN (so the surprisal martingale is
not applicable) except where the top-N carries all the mass (top-k ≤ N). A zero-probability
emitted token (logprob null) keeps p = 0: an impossible token, as with local scoring.

`logprobs_mode` of a record says what the logprobs describe: "processed" = the sampling
distribution (vLLM `--logprobs-mode processed_logprobs`, the reference server); "raw" = the
model's unwarped distribution (vLLM's default). Raw logprobs give the sampling distribution
exactly when the warp is the identity (T = 1, no top-k/top-p) or when 1 ≤ top_k ≤ N (warp the
top-N as logits: temperature, top-k and top-p then see every token that can survive).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.errors import InputError
from specaudit.stats.scoring import TokenScores, _audited, _field, _resolve_spec, _spec_of, _token_frame

# Below this tail mass the top-N is taken to hold the whole distribution (float32 logprobs of a
# server sum to 1 only to ~1e-6).
FULL_MASS_TOLERANCE = 1e-5


def _identity(spec: SamplingSpec) -> bool:
    return spec.temperature == 1.0 and spec.top_k == 0 and spec.top_p == 1.0 and not _reshaping_features(spec)


def _reshaping_features(spec: SamplingSpec) -> list[str]:
    """Request features that change the distribution at a position (stop strings only cut the output)."""
    return [name for name in spec.features if name != "stop"]


def _convertible(record: Any) -> bool:
    """Whether a record's logprobs give its sampling distribution at every position."""
    logprobs = _field(record, "target_logprobs")
    output = _field(record, "output_token_ids") or []
    if not isinstance(logprobs, list) or len(logprobs) != len(output):
        return False
    if any(not isinstance(entry, dict) or not isinstance(entry.get("top"), list) for entry in logprobs):
        return False
    if _field(record, "logprobs_mode", "processed") != "raw":
        return True
    spec = _spec_of(record)
    if _identity(spec):
        return True
    if _reshaping_features(spec):  # penalties, min-p, a bias: raw top-N logprobs cannot be processed into them
        return False
    return spec.top_k >= 1 and all(len(entry["top"]) >= spec.top_k for entry in logprobs)


def carries_sampling_logprobs(records: Iterable[Any]) -> bool:
    """True when every output record carries returned logprobs that describe the distribution it
    was sampled from (see the module docstring), so scores need no local model."""
    rows = _audited(records)
    return bool(rows) and all(_convertible(r) for r in rows)


def _record_columns(record: Any, spec: SamplingSpec) -> tuple[dict[str, np.ndarray], dict[int, float]]:
    """TARGET_COLUMNS arrays of one record, and the first position's probabilities it reveals."""
    logprobs = _field(record, "target_logprobs")
    tokens = np.asarray(_field(record, "output_token_ids"), dtype=np.int64)
    length = len(tokens)
    width = max([len(e["top"]) for e in logprobs] + [1])
    top_lp = np.full((length, width), -np.inf)
    top_id = np.full((length, width), -1, dtype=np.int64)
    for t, entry in enumerate(logprobs):
        ordered = sorted(((int(i), float(lp)) for i, lp in entry["top"]), key=lambda e: (-e[1], e[0]))
        for j, (token_id, lp) in enumerate(ordered):
            top_id[t, j], top_lp[t, j] = token_id, lp
    own = np.array([-np.inf if e.get("token_logprob") is None else float(e["token_logprob"]) for e in logprobs])
    raw = _field(record, "logprobs_mode", "processed") == "raw" and not _identity(spec)
    if raw:  # warp the top-N as logits: exact when 1 <= top_k <= N (checked by _convertible)
        import torch

        top_prob = warp(torch.as_tensor(top_lp, dtype=torch.float64), spec).numpy()
        top_prob[top_id < 0] = 0.0
    else:
        top_prob = np.exp(top_lp)
    inside = top_id == tokens[:, None]
    in_top = inside.any(axis=1)
    column = inside.argmax(axis=1)
    rows = np.arange(length)
    mass = np.minimum(top_prob.sum(axis=1), 1.0)
    if raw:
        p_real = np.where(in_top, top_prob[rows, column], 0.0)
        mass = np.ones(length)
    else:
        p_real = np.exp(own)
    above = np.cumsum(top_prob, axis=1) - top_prob
    # Outside the top-N the PIT is uniform on [S_N, 1]. The real p can only exceed 1 − S_N by
    # rounding (x lies in the tail), so the width is at least p: an emitted token is never
    # made impossible by float error.
    p = np.where(in_top, p_real, np.maximum(1.0 - mass, p_real))
    p = np.where(p_real > 0, p, 0.0)
    cdf_below = np.where(in_top, above[rows, column], np.minimum(mass, 1.0 - p))
    with np.errstate(divide="ignore"):
        surprisal = -np.log(p_real)
    entropy = np.full(length, np.nan)
    variance = np.full(length, np.nan)
    p_min = np.full(length, np.nan)
    full = (1.0 - mass <= FULL_MASS_TOLERANCE) & (top_prob.sum(axis=1) > 0)
    if full.any():  # the top-N is the whole distribution: entropy and its variance are known
        q = top_prob[full] / top_prob[full].sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_q = np.where(q > 0, np.log(q), 0.0)
        entropy[full] = -(q * log_q).sum(axis=1)
        variance[full] = (q * np.square(-log_q - entropy[full][:, None]) * (q > 0)).sum(axis=1)
        p_min[full] = np.where(q > 0, q, np.inf).min(axis=1)
    revealed = {int(i): float(v) for i, v in zip(top_id[0], top_prob[0]) if i >= 0}  # p_0 where this record shows it
    revealed.setdefault(int(tokens[0]), float(p_real[0]))
    columns = {
        "p": p,
        "cdf_below": np.clip(cdf_below, 0.0, 1.0),
        "surprisal": surprisal,
        "entropy": entropy,
        "surprisal_var": variance,
        "p_min": p_min,
    }
    return columns, revealed


def _first_position_mass(rows: Sequence[Any], revealed: dict[int, dict[int, float]]) -> pd.DataFrame:
    """position_mass at position 0 (the prefix is the prompt, so every record of a prompt saw the
    same p_0: its value at a token is averaged over the records that reveal it)."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(str(_field(r, "prompt_id")), str(_field(r, "engine")))].append(i)
    entries = []
    for (pid, engine), members in sorted(groups.items()):
        reached = [i for i in members if revealed.get(i)]
        counts: dict[int, int] = defaultdict(int)
        values: dict[int, list[float]] = defaultdict(list)
        for i in reached:
            counts[int(_field(rows[i], "output_token_ids")[0])] += 1
            for token, value in revealed[i].items():
                values[token].append(value)
        for token in sorted(counts):
            entries.append((pid, engine, 0, token, counts[token], len(reached) * float(np.mean(values[token])), len(reached), len(members)))
    return pd.DataFrame(entries, columns=["prompt_id", "engine", "position", "token", "count", "target_mass", "n_reached", "n_records"])


def scores_from_logprobs(records: Iterable[Any], spec: SamplingSpec | None = None) -> TokenScores:
    """TokenScores of every output record from its returned logprobs (see the module docstring).

    `position_mass` covers position 0 only (later prefixes differ between records, and a
    record reveals p_t only at its top-N), which is what `tv_bound(position=0)` reads.
    """
    rows = _audited(records)
    if not rows:
        raise InputError("no records to score (all missing or timing_only); run the audit first")
    spec = _resolve_spec(spec, rows)
    if spec.greedy:
        raise InputError("these records were decoded greedily (temperature 0); score them with a local target for greedy_exactness")
    bad = next((r for r in rows if not _convertible(r)), None)
    if bad is not None:
        raise InputError(
            f"record {_field(bad, 'key')!r} has no target_logprobs that describe its sampling distribution "
            "(missing, or raw logprobs with temperature/top-p but no top-k <= N); score it with the local target instead"
        )
    outputs = [list(_field(r, "output_token_ids") or []) for r in rows]
    columns: dict[int, dict[str, np.ndarray]] = {}
    revealed: dict[int, dict[int, float]] = {}
    for i, r in enumerate(rows):
        if outputs[i]:
            columns[i], revealed[i] = _record_columns(r, spec)
    frame = _token_frame(rows, outputs, columns, has_draft=False)
    return TokenScores(frame, _first_position_mass(rows, revealed), spec)


__all__ = ["carries_sampling_logprobs", "scores_from_logprobs"]
