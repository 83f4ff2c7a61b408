"""Serving policies from measured acceptance: a draft length k per group, and which groups to
route to plain decoding. Both come from the speed-up model of specaudit.stats.advice,
speed-up(α, k, c) = (1 − α^(k+1)) / ((1 − α)(k·c + 1)), fed with each group's measured
per-position acceptance α and a cost ratio c measured on this machine."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from specaudit.models import Stopwatch, forward_cached
from specaudit.stats.advice import best_draft_length, expected_speedup

POLICY_SCHEMA_VERSION = 1
K_MAX = 8


@torch.inference_mode()
def measure_cost_ratio(target: torch.nn.Module, draft: torch.nn.Module, prompt_ids: list[int], steps: int = 12, rounds: int = 3) -> dict:
    """c = (one cached decode step of the draft) / (one of the target), medians over `rounds`
    interleaved rounds of `steps` single-token steps after the prompt."""
    from transformers import DynamicCache

    device = next(target.parameters()).device
    clock = Stopwatch(device)

    def per_step(model: torch.nn.Module) -> float:
        cache = DynamicCache(config=model.config)
        forward_cached(model, torch.tensor([prompt_ids], device=device), cache)
        token = torch.tensor([[prompt_ids[-1]]], device=device)
        start = clock.now()
        for _ in range(steps):
            forward_cached(model, token, cache)
        return (clock.now() - start) / steps

    per_step(target), per_step(draft)  # warm-up
    target_s, draft_s = [], []
    for _ in range(rounds):
        target_s.append(per_step(target))
        draft_s.append(per_step(draft))
    target_median, draft_median = statistics.median(target_s), statistics.median(draft_s)
    return {
        "cost_ratio": draft_median / target_median,
        "target_step_s": target_median,
        "draft_step_s": draft_median,
        "steps": steps,
        "rounds": rounds,
    }


def group_policy(alpha: float, cost_ratio: float, run_k: int, measured: dict | None = None, verify_cost: float = 1.0) -> dict:
    """The k maximising a group's expected speed-up, whether to route it to plain decoding, and
    the expected speed-up under the run's k, the best k, and the policy. `cost_ratio` (c) and
    `verify_cost` (v) are in units of one plain decoding step; v = 1 where verifying k + 1 tokens
    costs what one does (a GPU), more on a CPU (measured at the run's k, taken for every k).

    `measured` is the group's speed-up at the run's k on the fitting prompts ({value, ci_low,
    ci_high}); it overrides the model where its interval excludes 1: a group measured slower
    than plain decoding is never sent to speculation, and one measured faster is never routed
    away from it on the model's word alone. Without a model (no α or no c) an undecided group
    follows its measured point estimate; with nothing measured it is routed."""
    known = bool(np.isfinite(alpha) and np.isfinite(cost_ratio))
    missing = " or ".join(name for name, value in (("acceptance", alpha), ("cost ratio", cost_ratio)) if not np.isfinite(value))
    best_k, _ = best_draft_length(alpha, cost_ratio, K_MAX, verify_cost) if known else (0, float("nan"))
    speedups = {k: float(expected_speedup(alpha, k, cost_ratio, verify_cost)) if known else float("nan") for k in range(1, K_MAX + 1)}
    argmax_k = max(speedups, key=lambda k: speedups[k] if np.isfinite(speedups[k]) else -1.0) if known else run_k
    low, high = ((measured or {}).get(key) for key in ("ci_low", "ci_high"))
    if high is not None and np.isfinite(high) and high < 1.0:
        route, reason = True, "measured slower than plain decoding (speed-up interval below 1)"
    elif low is not None and np.isfinite(low) and low > 1.0:
        route, reason = False, "measured faster than plain decoding (speed-up interval above 1)"
        argmax_k = argmax_k if best_k else run_k  # the model's k where it pays, else the k that was measured
    elif known and best_k > 0:
        route, reason = False, f"the model expects k = {best_k} to pay (measurement undecided)"
    elif known:
        route, reason = True, "no draft length pays under the model (measurement undecided)"
    elif (value := (measured or {}).get("value")) is not None and np.isfinite(value):
        # no model to ask (no α or no cost): the measured point estimate is the best guess there is,
        # as the model's is where there is one; routing every undecided group gives up measured gains
        route = value < 1.0
        reason = f"no {missing} for the model; measured {value:.2f}x at k = {run_k} (interval across 1)"
    else:
        route, reason = True, f"no {missing} for the model, no speed measured"
    expected = speedups.get(argmax_k, float("nan"))
    return {
        "alpha": alpha,
        "k": argmax_k,
        "route_to_vanilla": route,
        "reason": reason,
        "measured_speedup_fit": measured,
        "expected_speedup_run_k": speedups.get(
            run_k, float(expected_speedup(alpha, run_k, cost_ratio, verify_cost)) if known else float("nan")
        ),
        "expected_speedup_best_k": expected,
        "expected_speedup_policy": 1.0 if route else expected,
    }


def policy_document(dimension: str, policies: dict[str, dict], *, default_k: int, cost_ratio: float, draft: str, source_run: str) -> dict:
    """The file a serving layer reads (schema in docs/mitigate.md): per group of one prompt
    attribute, decode with speculation at draft length k, or without it (k = 0)."""
    return {
        "schema_version": POLICY_SCHEMA_VERSION,
        "kind": "specaudit.speculation_policy",
        "dimension": dimension,
        "draft": draft,
        "cost_ratio": cost_ratio,
        "default": {"speculate": True, "k": default_k},
        "groups": {
            group: {
                "speculate": not entry["route_to_vanilla"],
                "k": 0 if entry["route_to_vanilla"] else entry["k"],
                "expected_speedup": entry["expected_speedup_policy"],
                "alpha": entry["alpha"],
            }
            for group, entry in policies.items()
        },
        "source_run": source_run,
    }


def write_policy_files(folder: Path, document: dict) -> dict[str, Path]:
    """policy.json, and policy.yaml when PyYAML is installed (the same content)."""
    paths = {"json": folder / "policy.json"}
    paths["json"].write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a dependency of the config loader
        print("specaudit: PyYAML missing, policy.yaml not written", file=sys.stderr)
        return paths
    paths["yaml"] = folder / "policy.yaml"
    paths["yaml"].write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return paths
