"""Re-measuring on the held-out prompts: before/after acceptance with bootstrap intervals, the
equivalence check with the real speculative engine and the distilled draft (the policies' timed
re-audit is specaudit.mitigate._routing)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import specaudit.mitigate._acceptance as acc
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.mitigate._run_folder import Prompt

if TYPE_CHECKING:
    from collections.abc import Callable

    from specaudit.models import ModelPair

REAUDIT_FOLDER = "reaudit-run"  # the real-engine run with the mitigated draft, inside the output folder


# ------------------------------------------------------------------ statistics
def _bootstrap(statistic: Callable[[np.ndarray], np.ndarray], n: int, seed: int, n_boot: int = 1000) -> dict:
    """A statistic of prompt weights w (w @ column sums each prompt's column) with its 95% prompt bootstrap interval."""
    from specaudit.stats._bootstrap import cluster_bootstrap

    result = cluster_bootstrap(statistic, n, n_boot=n_boot, seed=seed)
    return {"value": float(result.statistic), "ci_low": float(result.ci_low), "ci_high": float(result.ci_high)}


def _ratio(numerator: np.ndarray, denominator: np.ndarray, seed: int) -> dict:
    """Σ numerator / Σ denominator over prompts, prompt bootstrap interval (None where nothing was measured)."""
    if denominator.sum() == 0:
        return {"value": None, "ci_low": None, "ci_high": None, "n_prompts": int(len(numerator))}
    entry = _bootstrap(lambda w: (w @ numerator) / np.maximum(w @ denominator, 1e-12), len(numerator), seed)
    return {**entry, "n_prompts": int(len(numerator))}


def compare_groups(groups: dict[str, list[str]], before: dict, after: dict, reference: str | None, seed: int, cost_ratio: float) -> dict:
    """Per group: acceptance (mean β) before and after with intervals, the paired change, the
    ratio to the reference group; the predicted speed-up at the run's k before and after (the
    same cost ratio c for both drafts, which share their architecture); then the worst group's
    ratio and the overall row."""
    rows: dict[str, Any] = {}
    everyone = sorted({p for ids in groups.values() for p in ids})
    for label, ids in [*groups.items(), ("(overall)", everyone)]:
        beta_before, positions = acc.acceptance_arrays(before, ids)
        beta_after, _ = acc.acceptance_arrays(after, ids)
        cost_before, cost_after = acc.cost_arrays(before, ids, cost_ratio), acc.cost_arrays(after, ids, cost_ratio)
        measured = positions.sum() > 0
        row = {
            "before": {**_ratio(beta_before, positions, seed), "n_tokens": int(positions.sum())},
            "after": {**_ratio(beta_after, positions, seed), "n_tokens": int(positions.sum())},
            # same prompts, samples and positions on both sides, so prompt difficulty cancels
            "change": _bootstrap(lambda w: (w @ (beta_after - beta_before)) / np.maximum(w @ positions, 1e-12), len(ids), seed)
            if measured
            else None,
            "speedup": {
                "before": _ratio(positions, cost_before, seed),
                "after": _ratio(positions, cost_after, seed),
                "change": _bootstrap(
                    lambda w: (w @ positions) / np.maximum(w @ cost_after, 1e-12) - (w @ positions) / np.maximum(w @ cost_before, 1e-12),
                    len(ids),
                    seed,
                )
                if measured
                else None,
            },
        }
        if row["before"]["value"]:
            row["relative_change"] = row["after"]["value"] / row["before"]["value"] - 1.0
        rows[label] = row
    named = {g: r for g, r in rows.items() if g != "(overall)"}
    anchor = reference if reference in named else max(named, key=lambda g: len(groups[g]))
    for when in ("before", "after"):
        base = named[anchor][when]["value"]
        for row in named.values():
            row.setdefault("ratio_to_reference", {})[when] = row[when]["value"] / base if base and row[when]["value"] is not None else None
    worst_before = min(named, key=lambda g: named[g]["before"]["value"] if named[g]["before"]["value"] is not None else 1.0)
    return {
        "reference": anchor,
        "cost_ratio": cost_ratio,
        "groups": rows,
        "worst_group_before": worst_before,
        "worst_ratio": {
            when: min((r["ratio_to_reference"][when] for r in named.values() if r["ratio_to_reference"][when] is not None), default=None)
            for when in ("before", "after")
        },
    }


# ------------------------------------------------------------------ re-audit with the real engine
def equivalence_check(pair: ModelPair, draft_folder: Path, prompts: list[Prompt], config: dict, work: Path, progress: bool) -> dict:
    """Decode a few held-out prompts with the real speculative engine and the distilled draft,
    then `analyze` the run: the equivalence battery decides whether sampling is still exact."""
    from specaudit.analysis import analyze
    from specaudit.config import run_config_from
    from specaudit.engines import run
    from specaudit.models import load_pair
    from specaudit.prompts._model import Prompt, PromptSet, rows_checksum

    chosen = [p for p in prompts if p.text is not None]
    if not chosen:
        return {"status": "not run", "reason": "no held-out prompt text available (the run's prompt set could not be read)"}
    items = [Prompt(id=p.id, text=p.text, attributes=p.attributes, pair_id=p.pair) for p in chosen]
    prompt_set = PromptSet(
        name="mitigate-held-out", version=1, checksum=rows_checksum(items), source="memory", dimensions={}, prompts=items
    )
    options = {
        key: config[key]
        for key in ("target", "k", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "chat_template")
        if key in config
    }
    cfg = run_config_from(
        {
            **options,
            "draft": str(draft_folder),
            "engines": [CONTROL_ENGINE, SPECULATIVE_ENGINE],
            "samples": 2,
            "device": str(pair.device),
            "warmup": 0,
        },
        "mitigate",
    )
    new_pair = load_pair(cfg.target, str(draft_folder), device=str(pair.device))
    run_dir = work / REAUDIT_FOLDER
    run(cfg, run_dir, pair=new_pair, prompt_set=prompt_set, progress=progress, command="specaudit mitigate (equivalence re-audit)")
    snapshot = analyze(run_dir, pair=new_pair, dimensions=[])
    section = snapshot.equivalence
    engine = section.engines.get(SPECULATIVE_ENGINE)
    return {
        "status": section.status,
        "verdict": engine.verdict if engine is not None else None,
        "prompts": [p.id for p in chosen],
        "records": snapshot.run.n_records,
        "tokens": snapshot.run.n_output_tokens,
        "goodness_of_fit_p": engine.goodness_of_fit.pvalue if engine is not None and engine.goodness_of_fit is not None else None,
        "tv_bound": engine.tv_bound.upper if engine is not None and engine.tv_bound is not None else None,
        "run_dir": REAUDIT_FOLDER,
    }
