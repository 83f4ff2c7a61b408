"""What a recommended rerun costs, from the audit's own fitted cost model (specaudit.stats.cost_model).

The snapshot holds, for every screened prompt, the cost model's predicted speculative time per
output token (`tokens_per_s`) and its predicted speed-up over vanilla; one sample of a prompt
therefore costs n_tokens / tokens_per_s seconds speculative and `speedup` times that vanilla.
The engines decode the cost model's timed subset (`speed.cost_model.n_prompts` prompts) with
`samples` samples each, so their part of an audit is predicted as samples x that many prompts x
the mean per-sample time over the screened prompts. The screen and the analysis are not in the
model and come on top.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specaudit.report.view.format import finite, get


def engine_seconds_per_sample(snapshot: Mapping[str, Any], speedup: float | None = None) -> float | None:
    """Predicted seconds of one vanilla + one speculative sample of the engines' prompts, summed
    over those prompts; None when the snapshot has no cost model. With `speedup`, the speculative
    engine runs at that speed-up over vanilla instead of each prompt's predicted one (the cost
    model's expected speed-up at another draft length k)."""
    prompts = get(snapshot, "prompts", default=[]) or []
    n_engine = get(snapshot, "speed", "cost_model", "n_prompts")
    if get(snapshot, "speed", "source") != "cost model" or not finite(n_engine) or not prompts:
        return None
    per_prompt = []
    for row in prompts:
        tokens, rate, predicted = (get(row, key) for key in ("n_tokens", "tokens_per_s", "speedup"))
        if finite(tokens) and finite(rate) and finite(predicted) and rate > 0:
            vanilla = tokens / rate * predicted  # speculative seconds x speed-up
            per_prompt.append(vanilla * (1.0 + 1.0 / (speedup if finite(speedup) and speedup > 0 else predicted)))
    if not per_prompt:
        return None
    return float(n_engine) * sum(per_prompt) / len(per_prompt)


def duration(seconds: float) -> str:
    """3 min, 1.4 h, 2.1 days: a rerun's cost at the precision a prediction has."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def samples_cost(snapshot: Mapping[str, Any], samples: int, *, prompts: int | None = None) -> str | None:
    """' Predicted cost: ...' for a rerun with `samples` samples per prompt (on `prompts` of the
    engines' prompts, default all), or None without a cost model."""
    per_sample = engine_seconds_per_sample(snapshot)
    if per_sample is None or not math.isfinite(per_sample):
        return None
    current = get(snapshot, "run", "config", "samples", default=1) or 1
    n_engine = int(get(snapshot, "speed", "cost_model", "n_prompts"))
    share = min(prompts, n_engine) / n_engine if prompts else 1.0  # the mean prompt's cost, on fewer of them
    seconds = samples * per_sample * share
    return (
        f"Predicted cost on this hardware (the audit's cost model): about {duration(seconds)} of engine decoding "
        f"({samples:,} samples on each of {prompts or n_engine} prompts, "
        f"{seconds / (current * per_sample):,.0f}× this audit's {duration(current * per_sample)}), plus the screen and the analysis."
    )


def rerun_cost(snapshot: Mapping[str, Any], *, speedup: float | None = None, why: str = "") -> str | None:
    """' Predicted cost: ...' for rerunning this audit at its own budget (another seed, a fixed
    setup, more prompts per group: the engines decode one prompt per group either way), with the
    speculative engine at `speedup` when given; None without a cost model."""
    per_sample = engine_seconds_per_sample(snapshot, speedup)
    if per_sample is None or not math.isfinite(per_sample):
        return None
    samples = get(snapshot, "run", "config", "samples", default=1) or 1
    n_engine = int(get(snapshot, "speed", "cost_model", "n_prompts"))
    return (
        f"Predicted cost on this hardware (the audit's cost model): about {duration(samples * per_sample)} of engine decoding "
        f"({samples} sample(s) on each of {n_engine} prompts{why}), plus the screen and the analysis."
    )


def best_k_speedup(snapshot: Mapping[str, Any], k: int) -> float | None:
    """The cost model's expected speed-up at draft length `k`, averaged over the groups whose
    best k it is (snapshot recommendations); None if no group recommends it."""
    values = []
    for part in (get(snapshot, "recommendations", default={}) or {}).values():
        for row in (get(part, "by_group", default={}) or {}).values():
            if get(row, "best_k") == k and finite(get(row, "best_k_expected_speedup")):
                values.append(float(get(row, "best_k_expected_speedup")))
    return sum(values) / len(values) if values else None
