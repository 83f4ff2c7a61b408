"""The report's "Shapes" section: for a run with the tree or staged engine, each engine's tokens
per step, acceptance per depth (tree) or position (chain, staged), each staged level's
acceptance and the speed-up, overall and per group, with intervals (snapshot.shapes, written by
specaudit.analysis.shapes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specaudit.report.view.format import MISSING, finite, get, integer, num, triple

LEVEL_LABELS = {"small_to_medium": "small → medium", "medium_to_target": "medium → target"}


def _row(dimension: str, group: str, figures: Mapping[str, Any], depth: int, levels: list[str]) -> dict[str, Any]:
    depths = figures.get("depths") or []
    return {
        "dimension": dimension,
        "group": group,
        "prompts": integer(figures.get("n_prompts")),
        "steps": integer(figures.get("steps")),
        "tokens_per_step": triple(figures.get("tokens_per_step")),
        "depths": [triple(depths[d]) if d < len(depths) else MISSING for d in range(depth)],
        "levels": [triple(get(figures, "levels", name)) for name in levels],
        "speedup": triple(figures.get("speedup"), suffix="×"),
        "predicted": triple(figures.get("predicted_speedup"), suffix="×"),
    }


def _costs(engine: Mapping[str, Any]) -> str:
    """One line: what a step cost, in plain decoding steps (empty where nothing was timed)."""
    if not finite(engine.get("verify_cost")):
        return ""
    text = (
        f"a step costs c·D + v = {num(engine.get('cost_ratio'))} × {num(engine.get('offered_per_step'))} + "
        f"{num(engine.get('verify_cost'))} plain decoding steps"
    )
    if finite(engine.get("nodes_per_step")):
        text += f" (v for {num(engine['nodes_per_step'])} tree tokens verified per step)"
    return text


def shapes_view(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    part = snapshot.get("shapes")
    if not isinstance(part, Mapping):
        return {"ran": False, "reason": "no tree or staged engine in this run"}
    engines = []
    for name, engine in (part.get("engines") or {}).items():
        every = [engine.get("overall") or {}] + [f for groups in (engine.get("groups") or {}).values() for f in groups.values()]
        depth = max((len(f.get("depths") or []) for f in every), default=0)
        levels = [n for n in LEVEL_LABELS if any(n in (f.get("levels") or {}) for f in every)]
        rows = [_row("all prompts", "", engine["overall"], depth, levels)] if engine.get("overall") else []
        for dimension, groups in (engine.get("groups") or {}).items():
            rows += [_row(dimension, group, figures, depth, levels) for group, figures in groups.items()]
        engines.append(
            {
                "name": name,
                "shape": engine.get("shape", MISSING),
                "depth_labels": [f"{'depth' if name in ('tree', 'screen') else 'position'} {d + 1}" for d in range(depth)],
                "level_labels": [LEVEL_LABELS[n] for n in levels],
                "rows": rows,
                "costs": _costs(engine),
            }
        )
    return {"ran": bool(engines), "method": part.get("method", ""), "engines": engines}


def shapes_markdown(view: Mapping[str, Any]) -> list[str]:
    """summary.md lines for the section (none for a run without the tree or staged engine)."""
    part = view.get("shapes") or {}
    if not part.get("ran") or part.get("broken"):
        return []
    lines = ["", "## Shapes: tokens per step and acceptance per depth and level", "", f"{part['method']}."]
    for engine in part["engines"]:
        head = ["dimension", "group", "prompts", "steps", "tokens per step", *engine["depth_labels"], *engine["level_labels"]]
        head += ["speed-up", "predicted speed-up"]
        costs = f"; {engine['costs']}" if engine["costs"] else ""
        lines += ["", f"**{engine['name']}** ({engine['shape']}{costs})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in engine["rows"]:
            cells = [r["dimension"], r["group"], r["prompts"], r["steps"], r["tokens_per_step"], *r["depths"], *r["levels"]]
            cells += [r["speedup"], r["predicted"]]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines
