"""Synthetic snapshots shaped like `specaudit analyze` output, and noisy histories of them.

`base_snapshot()` is a minimal but complete snapshot.json (schema 1): run metadata with models,
prompt set, config and versions; an equivalence section with per-engine verdicts; one `dialect`
dimension with `overall` and `by_group` blocks whose metrics carry {value, ci_low, ci_high,
n_prompts, n_tokens}. `noisy_run()` draws each group's estimate around a true value with the
standard error its CI states, which is exactly the null model the drift test assumes.
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

GROUPS = ("sae", "aave", "indian", "naija", "scottish", "singlish", "jamaican", "appalachian")
# True per-group values of the default pair's kind of run (acceptance ≈ 0.3–0.4, speed-up ≈ 1.1–1.5).
TRUE_ACCEPTANCE = {g: 0.30 + 0.012 * i for i, g in enumerate(GROUPS)}
TRUE_SPEEDUP = {g: 1.20 + 0.03 * i for i, g in enumerate(GROUPS)}
# Standard errors as 95 % bootstrap CIs over ~40 prompts per group give them.
SE = {"acceptance_rate": 0.015, "speedup": 0.04, "mean_accepted_tokens": 0.06, "ttft_s": 0.002}
N_PROMPTS = 40


def _triple(value: float | None, se: float | None, n_prompts: int = N_PROMPTS, n_tokens: int = 1900) -> dict:
    if value is None:
        return {"value": None, "ci_low": None, "ci_high": None, "n_prompts": 0, "n_tokens": 0}
    half = 1.959963984540054 * se
    return {"value": value, "ci_low": value - half, "ci_high": value + half, "n_prompts": n_prompts, "n_tokens": n_tokens}


def _true_values(group: str) -> dict[str, float]:
    acceptance = TRUE_ACCEPTANCE[group]
    return {"acceptance_rate": acceptance, "speedup": TRUE_SPEEDUP[group], "mean_accepted_tokens": 1 + 4 * acceptance, "ttft_s": 0.05}


def base_snapshot(run_id: str = "run-0", created: str = "2026-01-01T00:00:00+00:00") -> dict:
    """A snapshot at the true values (no noise)."""
    by_group = {}
    for g in GROUPS:
        metrics = {m: _triple(v, SE[m]) for m, v in _true_values(g).items()}
        metrics["per_position_acceptance"] = _triple(None, None)  # the analyzer leaves metrics without data as null
        by_group[g] = {"levels": {"dialect": g}, "n_prompts": N_PROMPTS, "n_tokens": 1900, "metrics": metrics}
    overall_values = {m: sum(_true_values(g)[m] for g in GROUPS) / len(GROUPS) for m in SE}
    overall = {
        "n_prompts": N_PROMPTS * len(GROUPS),
        "metrics": {m: _triple(v, SE[m] / math.sqrt(len(GROUPS)), N_PROMPTS * len(GROUPS), 15200) for m, v in overall_values.items()},
    }
    engines = {e: {"verdict": "PASS", "goodness_of_fit": {"verdict": "PASS", "pvalue": 0.5}} for e in ("vanilla", "speculative")}
    return {
        "schema_version": 1,
        "run": {
            "id": run_id,
            "dir": f"/runs/{run_id}",
            "created": created,
            "command": "specaudit run --prompts core --per-group 40",
            "models": {
                "target": {"name": "default", "class": "LlamaForCausalLM", "parameters": 134515008, "sha256": {"model.gguf": "a" * 64}},
                "draft": {"name": "int8", "derived_from": "default", "method": "dynamic int8", "sha256": {"model.gguf": "a" * 64}},
                "device": "cpu",
                "dtype": "float32",
                "vocab_size": 49152,
            },
            "versions": {"python": "3.11.7", "specaudit": "0.1.0", "torch": "2.13.0+cpu", "transformers": "5.24.0"},
            "device": {"type": "cpu", "name": "x86_64", "threads": 2},
            "config": {
                "target": "default",
                "draft": "int8",
                "engines": ["vanilla", "speculative"],
                "k": 4,
                "temperature": 1.0,
                "top_k": 0,
                "top_p": 1.0,
                "samples": 1,
                "max_new_tokens": 48,
                "prompts": "core",
                "per_group": N_PROMPTS,
                "dimensions": ["dialect"],
                "seed": 0,
                "device": "auto",
                "dtype": "auto",
            },
            "prompt_set": {
                "name": "core",
                "version": 1,
                "checksum": "c" * 64,
                "n_prompts": 320,
                "dimensions": {"dialect": {"groups": list(GROUPS), "reference": "sae", "parallel": True}},
            },
            "seeds": {"run": 0},
            "engines": ["speculative", "vanilla"],
            "n_records": 640,
            "n_prompts": 320,
            "n_output_tokens": 30000,
            "dimensions": ["dialect"],
            "disparity_engine": "speculative",
            "analysis": {
                "alpha": 0.05,
                "delta": 0.05,
                "n_boot": 1000,
                "seed": 0,
                "tolerance": [0.8, 1.25],
                "fallback_threshold": 0.5,
                "seconds": 3.2,
            },
        },
        "equivalence": {"mode": "sampling", "alpha": 0.05, "control": "vanilla", "engines": engines, "status": "PASS"},
        "groups": {"dialect": {"dimension": ["dialect"], "reference": "sae", "overall": overall, "by_group": by_group}},
        "disparities": {},
        "recommendations": {},
        "gate": None,
    }


def noisy_run(rng: random.Random, index: int, *, shift: dict[tuple[str, str], float] | None = None, run_id: str | None = None) -> dict:
    """Run number `index` (one day apart): every estimate drawn N(true × (1 + shift), SE), CI ± 1.96 SE.

    `shift`: {(group, metric): relative change of the true value}, e.g. {("aave", "acceptance_rate"): -0.3}.
    """
    shift = shift or {}
    snap = base_snapshot(run_id or f"run-{index}", f"2026-01-{1 + index // 24:02d}T{index % 24:02d}:00:00+00:00")
    block = snap["groups"]["dialect"]
    group_values = {}
    for g, entry in block["by_group"].items():
        for m, triple in entry["metrics"].items():
            if triple["value"] is None:
                continue
            true = _true_values(g)[m] * (1 + shift.get((g, m), 0.0))
            group_values.setdefault(m, []).append(true)
            entry["metrics"][m] = _triple(rng.gauss(true, SE[m]), SE[m])
    for m in block["overall"]["metrics"]:
        se = SE[m] / math.sqrt(len(GROUPS))
        true = sum(group_values[m]) / len(group_values[m])
        block["overall"]["metrics"][m] = _triple(rng.gauss(true, se), se, N_PROMPTS * len(GROUPS), 15200)
    return snap


def history(seed: int, n: int, *, drift_at: int | None = None, shift: dict | None = None) -> list[dict]:
    """n runs; from run `drift_at` on, `shift` applies."""
    rng = random.Random(seed)
    return [noisy_run(rng, i, shift=shift if drift_at is not None and i >= drift_at else None) for i in range(n)]


def edited(snapshot: dict, **changes) -> dict:
    """A deep copy with dotted-path fields replaced, e.g. edited(s, **{"run.config.k": 6})."""
    out = copy.deepcopy(snapshot)
    for path, value in changes.items():
        node = out
        *parents, leaf = path.split(".")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return out


def write(snapshot: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(snapshot), encoding="utf-8")
    return path
