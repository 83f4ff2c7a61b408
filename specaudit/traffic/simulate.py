"""Simulated request logs where the truth is known: for the tests and the benches of `traffic`.

Each request: a group (its language label), a prompt length (log-normal, per group), an output
length, a temperature, an arrival time (Poisson), and a draft acceptance that depends on prompt
length (`length_slope` per doubling, the confound), on the group (`group_effect`, the disparity)
and on a per-request random effect (requests are clusters of tokens). From `change_at` on (a
fraction of the requests), `change_effect` multiplies the acceptance of the groups in
`change_groups` (all groups when empty): the planted change. The lines have the shape `traffic
ingest` reads, with vLLM's per-request `metrics.speculative_decoding`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class TrafficModel:
    groups: Sequence[str] = ("en", "fr", "zh")
    shares: Sequence[float] = (0.5, 0.3, 0.2)
    prompt_median: Mapping[str, float] = field(default_factory=dict)  # per group; default 200 tokens
    group_effect: Mapping[str, float] = field(default_factory=dict)  # acceptance multiplier per group; default 1
    base_acceptance: float = 0.7
    length_slope: float = 0.0  # acceptance change per doubling of the prompt over 200 tokens
    request_spread: float = 20.0  # beta concentration of a request's own acceptance (lower: more spread)
    change_at: float | None = None  # fraction of the requests after which the change holds
    change_effect: float = 1.0
    change_groups: Sequence[str] = ()
    rate_per_s: float = 4.0
    draft_k: int = 4


def _acceptance(model: TrafficModel, group: np.ndarray, prompt: np.ndarray, order: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    effect = np.array([model.group_effect.get(g, 1.0) for g in model.groups])[group]
    mean = model.base_acceptance * effect + model.length_slope * np.log2(prompt / 200.0)
    if model.change_at is not None:
        changed = order >= model.change_at * len(order)
        if model.change_groups:
            changed &= np.isin(np.asarray(model.groups)[group], list(model.change_groups))
        mean = np.where(changed, mean * model.change_effect, mean)
    mean = np.clip(mean, 0.02, 0.98)
    return rng.beta(mean * model.request_spread, (1 - mean) * model.request_spread)


def simulate_arrays(model: TrafficModel, n: int, rng: np.random.Generator, *, start: float = 1.7e9) -> dict[str, np.ndarray]:
    """The columns of `n` simulated requests (time order): group index, prompt and output tokens,
    temperature, arrival (Unix s), proposed and accepted drafts, latency_s."""
    order = np.arange(n)
    shares = np.asarray(model.shares, dtype=float)
    group = rng.choice(len(model.groups), size=n, p=shares / shares.sum())
    median = np.array([model.prompt_median.get(g, 200.0) for g in model.groups])[group]
    prompt = np.maximum(1, np.round(median * np.exp(rng.normal(0, 0.5, n)))).astype(int)
    output = np.maximum(1, np.round(np.exp(rng.normal(np.log(120), 0.6, n)))).astype(int)
    temperature = rng.choice([0.0, 0.7, 1.0], size=n, p=[0.3, 0.4, 0.3])
    arrival = start + np.cumsum(rng.exponential(1.0 / model.rate_per_s, n))
    accept = _acceptance(model, group, prompt, order, rng)
    steps = np.maximum(1, np.ceil(output / (1 + model.draft_k * accept))).astype(int)
    proposed = steps * model.draft_k
    accepted = np.minimum(rng.binomial(proposed, accept), np.maximum(output - 1, 0))
    # Latency: prefill, then one target pass per step (~25 ms) plus the draft's k passes (~3 ms each).
    latency = prompt * 2e-4 + steps * (0.025 + model.draft_k * 0.003) * np.exp(rng.normal(0, 0.1, n))
    return {
        "group": group,
        "prompt": prompt,
        "output": output,
        "temperature": temperature,
        "arrival": arrival,
        "proposed": proposed,
        "accepted": accepted,
        "latency": latency,
    }


def simulate(model: TrafficModel, n: int, *, seed: int = 0, start: float = 1.7e9) -> Iterator[dict]:
    """`n` log lines of simulated traffic (time order)."""
    rng = np.random.default_rng(seed)
    cols = simulate_arrays(model, n, rng, start=start)
    group, prompt, output, temperature = cols["group"], cols["prompt"], cols["output"], cols["temperature"]
    arrival, proposed, accepted, latency = cols["arrival"], cols["proposed"], cols["accepted"], cols["latency"]
    for i in range(n):
        name = model.groups[group[i]]
        yield {
            "time": datetime.fromtimestamp(float(arrival[i]), UTC).isoformat().replace("+00:00", "Z"),
            "request": {"model": "sim", "prompt": f"request {i}", "max_tokens": int(output[i]), "temperature": float(temperature[i])},
            "response": {
                "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                "usage": {"prompt_tokens": int(prompt[i]), "completion_tokens": int(output[i])},
                "metrics": {
                    "speculative_decoding": {
                        "num_draft_tokens": int(proposed[i]),
                        "num_accepted_draft_tokens": int(accepted[i]),
                    }
                },
            },
            "latency_s": round(float(latency[i]), 6),
            "ttft_s": round(float(prompt[i] * 2e-4 + 0.03), 6),
            "labels": {"language": name},
        }


def write_log(path: str | Path, lines: Iterator[dict]) -> Path:
    path = Path(path)
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path
