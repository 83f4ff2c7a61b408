"""The report's "Shapes" section: for a run with the tree or staged engine, each engine's tokens
per step, acceptance per depth (tree) or position (chain, staged), each staged level's
acceptance and the speed-up, overall and per group, with intervals (snapshot.shapes, written by
specaudit.analysis.shapes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specaudit.contracts.engines import step_shape
from specaudit.contracts.run import SCREEN_ENGINE
from specaudit.report.view.format import MISSING, finite, integer, num, triple

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import ShapeEngine, ShapeFigures, ShapesSection

LEVEL_LABELS = {"small_to_medium": "small → medium", "medium_to_target": "medium → target"}


def _row(dimension: str, group: str, figures: ShapeFigures, depth: int, levels: list[str]) -> dict[str, Any]:
    depths = figures.depths
    return {
        "dimension": dimension,
        "group": group,
        "prompts": integer(figures.n_prompts),
        "steps": integer(figures.steps),
        "tokens_per_step": triple(figures.tokens_per_step),
        "depths": [triple(depths[d]) if d < len(depths) else MISSING for d in range(depth)],
        "levels": [triple(figures.levels.get(name)) for name in levels],
        "speedup": triple(figures.speedup, suffix="×"),
        "predicted": triple(figures.predicted_speedup, suffix="×"),
    }


def _costs(engine: ShapeEngine) -> str:
    """One line: what a step cost, in plain decoding steps (empty where nothing was timed)."""
    if not finite(engine.verify_cost):
        return ""
    text = (
        f"a step costs c·D + v = {num(engine.cost_ratio)} × {num(engine.offered_per_step)} + {num(engine.verify_cost)} plain decoding steps"
    )
    if finite(engine.nodes_per_step):
        text += f" (v for {num(engine.nodes_per_step)} tree tokens verified per step)"
    return text


def shapes_view(part: ShapesSection | None) -> dict[str, Any]:
    if part is None:
        return {"ran": False, "reason": "no tree or staged engine in this run"}
    engines = []
    for name, engine in part.engines.items():
        every = [f for f in [engine.overall] if f is not None] + [f for groups in engine.groups.values() for f in groups.values()]
        depth = max((len(f.depths) for f in every), default=0)
        levels = [n for n in LEVEL_LABELS if any(n in f.levels for f in every)]
        rows = [_row("all prompts", "", engine.overall, depth, levels)] if engine.overall is not None else []
        for dimension, groups in engine.groups.items():
            rows += [_row(dimension, group, figures, depth, levels) for group, figures in groups.items()]
        engines.append(
            {
                "name": name,
                "shape": engine.shape,
                "depth_labels": [
                    f"{'depth' if name == SCREEN_ENGINE or step_shape(name) == 'branching' else 'position'} {d + 1}" for d in range(depth)
                ],
                "level_labels": [LEVEL_LABELS[n] for n in levels],
                "rows": rows,
                "costs": _costs(engine),
            }
        )
    return {"ran": bool(engines), "method": part.method, "engines": engines}


def shapes_markdown(view: Mapping[str, Any]) -> list[str]:
    """summary.md lines for the section (none for a run without the tree or staged engine)."""
    part = view["shapes"]
    if not part["ran"]:  # not run, or the guard's note
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
