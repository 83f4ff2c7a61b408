"""Synthetic records with a known acceptance structure (calibration, power and demos)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError


def simulate_records(
    group_acceptance: Mapping[Any, float],
    *,
    n_prompts: int | Mapping[Any, int] = 30,
    dimension: str = "group",
    k: int = 4,
    steps: tuple[int, int] = (15, 30),
    spread: float = 0.8,
    shared: float = 0.0,
    cost_ratio: float = 0.3,
    target_step_s: float = 0.02,
    timing_noise: float = 0.05,
    vanilla: bool = True,
    vocab_size: int = 32_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Records with a known acceptance structure, in the records.jsonl schema.

    Prompt p of group g has per-position acceptance expit(logit(μ_g) + spread·z_p), so tokens of
    a prompt are correlated through z_p; with ``shared`` > 0 prompts of the same index across
    groups are parallel (same ``pair_id``) and share that part of z. Each step accepts the run of
    leading successes among k Bernoulli draws. Timings follow the speed-up model: a speculative
    step costs (k·c + 1) target steps, a vanilla token one target step, with log-normal noise.
    """
    rng = np.random.default_rng(seed)
    sizes = n_prompts if isinstance(n_prompts, Mapping) else {g: n_prompts for g in group_acceptance}
    n_pairs = max(sizes.values()) if sizes else 0
    pair_effect = rng.standard_normal(n_pairs)
    rows = []
    for group, mean in group_acceptance.items():
        if not 0 < mean < 1:
            raise InputError(f"simulate_records: acceptance for group {group!r} must lie strictly between 0 and 1.")
        for j in range(sizes[group]):
            z = math.sqrt(shared) * pair_effect[j] + math.sqrt(1 - shared) * rng.standard_normal()
            alpha = special.expit(special.logit(mean) + spread * z)
            n_steps = int(rng.integers(steps[0], steps[1] + 1))
            per_step = np.cumprod(rng.random((n_steps, k)) < alpha, axis=1).sum(axis=1)
            n_out = int((per_step + 1).sum())
            beta = np.clip(alpha + 0.05 * rng.standard_normal((n_steps, k)), 0, 1)
            step_s = target_step_s * rng.lognormal(0.0, 0.1)  # the prompt's own speed, shared by both engines
            prompt_id = f"{group}-{j}"
            common = {
                "prompt_id": prompt_id,
                "pair_id": f"pair-{j}" if shared > 0 else None,
                "attributes": {dimension: group},
                "sample": 0,
                "seed": seed,
                "sampling": {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
                "prompt_token_ids": [1, 2, 3],
                "text": "",
                "finish_reason": "length",
                "timing_only": False,
            }
            rows.append(
                {
                    **common,
                    "key": f"{prompt_id}|speculative|0",
                    "engine": SPECULATIVE_ENGINE,
                    "k": k,
                    "output_token_ids": rng.integers(0, vocab_size, n_out).tolist(),
                    "wall_s": n_steps * step_s * (k * cost_ratio + 1) * rng.lognormal(0.0, timing_noise),
                    "ttft_s": step_s * (k * cost_ratio + 1),
                    "draft_s": n_steps * k * cost_ratio * step_s,
                    "verify_s": n_steps * step_s,
                    "steps": n_steps,
                    "proposed": n_steps * k,
                    "accepted": int(per_step.sum()),
                    "accepted_per_step": per_step.tolist(),
                    "proposed_per_step": [k] * n_steps,
                    "beta": beta.tolist(),
                }
            )
            if vanilla:
                rows.append(
                    {
                        **common,
                        "key": f"{prompt_id}|vanilla|0",
                        "engine": CONTROL_ENGINE,
                        "k": 0,
                        "output_token_ids": rng.integers(0, vocab_size, n_out).tolist(),
                        "wall_s": n_out * step_s * rng.lognormal(0.0, timing_noise),
                        "ttft_s": step_s,
                        "draft_s": 0.0,
                        "verify_s": 0.0,
                        "steps": n_out,
                        "proposed": 0,
                        "accepted": 0,
                        "accepted_per_step": [],
                        "proposed_per_step": [],
                        "beta": [],
                    }
                )
    return pd.DataFrame(rows)
