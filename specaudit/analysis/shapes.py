"""The snapshot's `shapes` section: for a run with the tree or staged engine, each shape's tokens
per step, acceptance per depth and per level, and speed-up over plain decoding, per group, with
prompt-bootstrap intervals (stats.shape_acceptance; the speed-up as the group comparisons
measure it, stats.disparity)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from specaudit.contracts.engines import BEYOND_CHAINS
from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import MetricEstimate, ShapeEngine, ShapeFigures, ShapesSection
from specaudit.decoding._shapes import describe_shape
from specaudit.stats.shape_acceptance import SHAPE_ENGINES, shape_acceptance

_ALL = "__all__"  # one group holding every prompt: the engine's overall figures

METHOD = (
    "tokens per step = output tokens / verification steps; acceptance at depth d = steps that accepted at depth d / steps "
    "that reached it; a staged level = accepted / proposed; speed-up = the control's time per output token over the "
    "engine's (paired prompts); the screen's tree figures are the same ratios of sums expected along its target paths "
    "(exact given each path); predicted speed-up = tokens per step / (c·D + v), the step's cost measured on the engine's timed "
    "records in plain decoding steps (c per offered position, v per verification, D offered per step; the interval is "
    "tokens per step's, the cost taken as known); 95% percentile intervals of the cluster bootstrap over prompts"
)


def _estimate(row: pd.Series, name: str) -> MetricEstimate:
    def number(key: str) -> float | None:
        value = row.get(key)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)

    return MetricEstimate(value=number(name), ci_low=number(f"{name}_ci_low"), ci_high=number(f"{name}_ci_high"))


def _speedups(records: list[dict], engine: str, dimension: str | None, n_boot: int, seed: int) -> dict[str, MetricEstimate]:
    """Group -> the engine's speed-up over the control (stats.disparity.GroupFrame); empty without the control's timings."""
    from specaudit.stats.disparity import GroupFrame

    mine = [r for r in records if r["engine"] in (engine, CONTROL_ENGINE)]
    if not any(r["engine"] == CONTROL_ENGINE for r in mine):
        return {}
    frame = pd.DataFrame([{**r, _ALL: _ALL} for r in mine] if dimension is None else mine)
    table = GroupFrame(frame, dimension or _ALL, ["speedup"], engine=engine, n_boot=n_boot, seed=seed).by_group["speedup"]
    return {
        str(group): _estimate(row.rename(lambda c: f"speedup_{c}" if c != "value" else "speedup"), "speedup")
        for group, row in table.iterrows()
    }


@dataclass(frozen=True)
class _StepCost:
    """What one step of an engine costs in plain decoding steps: c per offered position, v per
    verification, D offered positions per step; `predict` turns tokens per step into a speed-up."""

    cost_ratio: float
    verify_cost: float
    offered_per_step: float

    def predict(self, tokens_per_step: MetricEstimate) -> MetricEstimate:
        cost = self.cost_ratio * self.offered_per_step + self.verify_cost
        scaled = [None if v is None else v / cost for v in (tokens_per_step.value, tokens_per_step.ci_low, tokens_per_step.ci_high)]
        return MetricEstimate(value=scaled[0], ci_low=scaled[1], ci_high=scaled[2])


def _step_cost(records: list[dict], engine: str) -> _StepCost | None:
    """The engine's (c, v) as the chain's are measured (stats.cost_model.step_costs: its records
    read as the speculative engine's, against the control's), with its offered positions per step."""
    from specaudit.stats.cost_model import step_costs

    mine = [r for r in records if r["engine"] == engine and not r.get("timing_only")]
    pairs = [
        {**r, "engine": SPECULATIVE_ENGINE} if r["engine"] == engine else r for r in records if r["engine"] in (engine, CONTROL_ENGINE)
    ]
    measured = step_costs(pd.DataFrame(pairs)) if pairs else None
    steps = sum(len(r.get("proposed_per_step") or []) for r in mine)
    if measured is None or not steps:
        return None
    return _StepCost(measured[0], measured[1], sum(sum(r.get("proposed_per_step") or []) for r in mine) / steps)


def _figures(row: pd.Series, speedup: MetricEstimate | None, cost: _StepCost | None = None) -> ShapeFigures:
    depths = sorted((c for c in row.index if c.startswith("depth_") and not c.endswith(("_ci_low", "_ci_high"))), key=lambda c: int(c[6:]))
    levels = [c for c in ("small_to_medium", "medium_to_target") if c in row.index and not pd.isna(row[c])]
    return ShapeFigures(
        n_prompts=int(row["n_prompts"]),
        steps=int(row["steps"]) if float(row["steps"]).is_integer() else round(float(row["steps"]), 2),
        tokens_per_step=_estimate(row, "tokens_per_step"),
        depths=[_estimate(row, d) for d in depths if not pd.isna(row[d])],
        levels={name: _estimate(row, name) for name in levels},
        speedup=speedup,
        predicted_speedup=None if cost is None else cost.predict(_estimate(row, "tokens_per_step")),
    )


def shapes_section(records: list[dict], config: dict[str, Any], dimensions: list[str], *, n_boot: int, seed: int) -> ShapesSection | None:
    """None for a run without the tree or staged engine; otherwise their figures (and the chain's
    where it ran beside them; the screen's expectation for the tree where the screen ran beside
    it), overall and per group of each dimension."""
    present = {r["engine"] for r in records}
    if not present & set(BEYOND_CHAINS):
        return None
    engines: dict[str, ShapeEngine] = {}
    screened = [r for r in records if r["engine"] == SCREEN_ENGINE and r.get("tree_expected")]
    for engine in [e for e in (*SHAPE_ENGINES, SCREEN_ENGINE) if e in present]:
        mine = screened if engine == SCREEN_ENGINE else [r for r in records if r["engine"] == engine]
        if not mine:
            continue
        overall_table = shape_acceptance(mine, _ALL, (engine,), n_boot=n_boot, seed=seed)
        if overall_table.empty:  # timing-only records alone
            continue
        timed = engine != SCREEN_ENGINE  # the screen's speed is the chain's cost model's, not the tree's
        overall_speed = _speedups(records, engine, None, n_boot, seed).get(_ALL) if timed else None
        cost = _step_cost(records, "tree" if engine == SCREEN_ENGINE else engine)  # the screen's tree costs what the tree's steps cost
        groups: dict[str, dict[str, ShapeFigures]] = {}
        for dimension in dimensions:
            table = shape_acceptance(
                [r for r in mine if dimension in (r.get("attributes") or {})], dimension, (engine,), n_boot=n_boot, seed=seed
            )
            if table.empty:
                continue
            in_dimension = [r for r in records if dimension in (r.get("attributes") or {})]
            speed = _speedups(in_dimension, engine, dimension, n_boot, seed) if timed else {}
            groups[dimension] = {str(row[dimension]): _figures(row, speed.get(str(row[dimension])), cost) for _, row in table.iterrows()}
        nodes = [n for r in mine for n in (r.get("tree_nodes_per_step") or [])]
        engines[engine] = ShapeEngine(
            shape=(
                describe_shape("tree", config) + ": the screen's expectation along its target paths (exact given each path)"
                if engine == SCREEN_ENGINE
                else describe_shape(engine, config)
            ),
            overall=_figures(overall_table.iloc[0], overall_speed, cost),
            groups=groups,
            cost_ratio=None if cost is None else cost.cost_ratio,
            verify_cost=None if cost is None else cost.verify_cost,
            offered_per_step=None if cost is None else cost.offered_per_step,
            nodes_per_step=sum(nodes) / len(nodes) if nodes else None,
        )
    return ShapesSection(method=METHOD, engines=engines) if engines else None


__all__ = ["shapes_section"]
