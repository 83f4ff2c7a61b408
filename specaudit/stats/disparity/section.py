"""The disparity parts of snapshot.json: groups, disparities, recommendations, prompts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from specaudit.contracts import DEFAULT_BAND, INTERSECTION, MIN_CHECKED_PROMPTS, DisparityStatus, group_label
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError
from specaudit.stats import advice  # advice imports nothing of disparity: no circle
from specaudit.stats.disparity._grouping import _as_list
from specaudit.stats.disparity.drilldown import DrillDown, _drilldown, _reconstruct
from specaudit.stats.disparity.frame import GroupFrame
from specaudit.stats.disparity.per_prompt import per_prompt_metrics


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(_jsonable(k)) if not isinstance(k, str) else k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if value is pd.NA or value is None:
        return None
    return value


def _triple(value: Any, low: Any, high: Any) -> dict[str, float | None]:
    return {"value": _jsonable(value), "ci_low": _jsonable(low), "ci_high": _jsonable(high)}


PROMPT_METRICS = ("acceptance_rate", "speedup", "mean_accepted_tokens", "tokens_per_s", "n_tokens")


def _prompt_rows(table: pd.DataFrame, names: Sequence[str]) -> list[dict[str, Any]]:
    """Per-prompt metrics (snapshot `prompts`), so that monitoring can test a later run against
    this one prompt by prompt (paired where the prompts are the same), not only through group CIs."""
    names = [n for n in names if n in table.columns]
    return [
        {
            "id": str(prompt_id),
            "pair_id": row.get("pair_id"),
            "attributes": {n: row[n] for n in names if row[n] is not None},
            **{m: float(row[m]) for m in PROMPT_METRICS},
        }
        for prompt_id, row in table.iterrows()
    ]


def disparity_section(
    records_df: pd.DataFrame,
    *,
    dimensions: Sequence[str | Sequence[str]],
    reference: Any = "largest",
    engine: str = SPECULATIVE_ENGINE,
    baseline: str = CONTROL_ENGINE,
    metrics: Sequence[str] | None = None,
    test_metrics: Sequence[str] = ("acceptance_rate", "speedup"),
    gated_metrics: Sequence[str] | None = None,
    tolerance: tuple[float, float] = DEFAULT_BAND,
    alpha: float = 0.05,
    power: float = 0.8,
    min_prompts: int = MIN_CHECKED_PROMPTS,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    fallback_threshold: float = 0.5,
    fallback_metric: str = "acceptance_rate",
    cost_ratio: float | None = None,
    verify_cost: float = 1.0,
    deployment_cost_ratio: float | None = None,
    deployment_verify_cost: float = 1.0,
    acceptance_rule: str | None = None,
    k_max: int = 8,
    token_rank: np.ndarray | Mapping[int, int] | None = None,
    rarity_edges: Sequence[float] = (100, 1_000, 10_000),
    top_n: int = 10,
    decode: Callable[[list[int]], str] | None = None,
    drill_down: bool = True,
) -> dict[str, Any]:
    """The ``groups``, ``disparities``, ``recommendations`` and ``prompts`` parts of snapshot.json.

    ``dimensions``: attribute names, and lists of names for intersections, e.g.
    ``["domain", "dialect", ["domain", "dialect"]]``. Intersections are keyed "domain×dialect".
    ``reference``: 'largest', 'overall', a group label, or a mapping from dimension key to one of
    those (e.g. ``{"dialect": "en-US"}``; dimensions not in it use 'largest').
    Every metric is ``{value, ci_low, ci_high}`` with ``n_prompts`` and ``n_tokens`` beside it.
    Drill-down results sit under ``disparities[dimension]["drilldown"]``.
    """
    if not dimensions:
        raise InputError("disparity: name at least one prompt attribute to analyse (dimensions=...).")
    table = per_prompt_metrics(records_df, engine=engine, baseline=baseline)
    # Steps are reconstructed once; each dimension only regroups them.
    positions = _reconstruct(records_df, engine, table) if drill_down and "accepted_per_step" in records_df.columns else None
    groups_part: dict[str, Any] = {}
    disparities_part: dict[str, Any] = {}
    recommendations_part: dict[str, Any] = {}
    for dimension in dimensions:
        names = _as_list(dimension)
        key = INTERSECTION.join(names)
        reference_for = reference.get(key, "largest") if isinstance(reference, Mapping) else reference
        frame = GroupFrame.from_prompts(table, names, metrics, n_boot=n_boot, ci=ci, seed=seed)
        by_group = frame.by_group
        overall = frame.overall
        ref = frame.reference_index(reference_for)
        reference_label = "overall" if ref is None else group_label(frame.groups[ref])

        def metric_block(rows: pd.DataFrame) -> dict[str, Any]:
            return {
                metric: {**_triple(r["value"], r["ci_low"], r["ci_high"]), "n_prompts": int(r["n_prompts"]), "n_tokens": int(r["n_tokens"])}
                for metric, r in rows.iterrows()
            }

        entries = {}
        for i, group in enumerate(frame.groups):
            rows = by_group.iloc[i].unstack()  # metric x stat
            entries[group_label(group)] = {
                "levels": dict(zip(names, group if isinstance(group, tuple) else (group,))),
                "n_prompts": int(rows["n_prompts"].max()),
                "n_tokens": int(rows["n_tokens"].get("acceptance_rate", rows["n_tokens"].max())),
                "metrics": metric_block(rows.loc[frame.metrics]),
            }
        groups_part[key] = {
            "dimension": names,
            "reference": reference_label,
            "overall": {"n_prompts": int(overall["n_prompts"].max()), "metrics": metric_block(overall)},
            "by_group": entries,
        }

        flag_rows, _ = frame._flag_rows(list(test_metrics), reference_for, tolerance, alpha, power, min_prompts)
        derived = {
            (kind, method): getattr(frame, kind)(method) for kind in ("difference", "ratio") for method in ("between_groups", "to_overall")
        }
        per_metric = {}
        for metric in frame.metrics:
            kw = frame.kruskal(metric)
            entry = {
                kind: {
                    method: _triple(*derived[(kind, method)].loc[metric, ["value", "ci_low", "ci_high"]])
                    for method in ("between_groups", "to_overall")
                }
                for kind in ("difference", "ratio")
            }
            entry["kruskal"] = {"statistic": kw.statistic, "pvalue": kw.pvalue, "n_groups": kw.n_groups, "n_prompts": kw.n_prompts}
            pairwise = {
                group_label(frame.groups[r["position"]]): {
                    "ratio": _triple(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"]),
                    "difference": _triple(r["difference"], r["difference_ci_low"], r["difference_ci_high"]),
                    **{
                        c: r[c]
                        for c in (
                            "test",
                            "statistic",
                            "pvalue",
                            "pvalue_holm",
                            "effect_size",
                            "effect_size_name",
                            "n_prompts",
                            "n_reference_prompts",
                            "n_pairs",
                            "min_detectable_ratio_low",
                            "min_detectable_ratio_high",
                            "small_group",
                            "outside_band",
                            "significant",
                            "status",
                            "status_reason",
                            "interval_method",
                            "confidence_level",
                            "df",
                        )
                    },
                }
                for r in flag_rows
                if r["metric"] == metric
            }
            if pairwise:
                entry["pairwise"] = pairwise
            per_metric[metric] = entry
        flagged = [
            {
                "metric": r["metric"],
                "group": group_label(frame.groups[r["position"]]),
                "status": r["status"],
                "ratio": _triple(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"]),
                "interval_method": r["interval_method"],
                "min_detectable_ratio_low": r["min_detectable_ratio_low"],
                "pvalue_holm": r["pvalue_holm"],
            }
            for r in flag_rows
            if r["status"] != DisparityStatus.WITHIN.value
        ]
        dimension_part = {
            "dimension": names,
            "reference": reference_label,
            "tolerance": list(tolerance),
            "alpha": alpha,
            "compared_metrics": list(test_metrics),
            # those the gate judges by default (all compared ones unless a metric is shown beside, ungated)
            "gated_metrics": list(gated_metrics if gated_metrics is not None else test_metrics),
            "status_rule": "ratio interval at confidence 1 − alpha per comparison against the band: FLAG outside, WITHIN inside, "
            "INCONCLUSIVE across one edge, INSUFFICIENT without an interval or across the whole band",
            "correction": "rank tests (diagnostics only): holm per metric, over the groups compared with the reference",
            "metrics": per_metric,
            "flags": flagged,
            "warnings": frame.warnings(min_prompts),
        }
        if positions is not None:
            dd = _drilldown(
                positions,
                table,
                names,
                token_rank=token_rank,
                rarity_edges=rarity_edges,
                fallback_threshold=fallback_threshold,
                fallback_metric=fallback_metric,
                top_n=top_n,
                decode=decode,
                n_boot=n_boot,
                ci=ci,
                seed=seed,
            )
            dimension_part["drilldown"] = _drilldown_json(dd)
        disparities_part[key] = dimension_part
        recommendations_part[key] = advice.recommendations(
            frame,
            reference=reference_for,
            threshold=fallback_threshold,
            cost_ratio=cost_ratio,
            verify_cost=verify_cost,
            k_max=k_max,
            threshold_metric=fallback_metric,
            deployment_cost_ratio=deployment_cost_ratio,
            deployment_verify_cost=deployment_verify_cost,
            acceptance_rule=acceptance_rule,
        )
    analysed = sorted({name for dimension in dimensions for name in _as_list(dimension)})
    return _jsonable(
        {
            "groups": groups_part,
            "disparities": disparities_part,
            "recommendations": recommendations_part,
            "prompts": _prompt_rows(table, analysed),
        }
    )


def _drilldown_json(dd: DrillDown) -> dict[str, Any]:
    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        out = []
        for row in frame.to_dict(orient="records"):
            row["group"] = group_label(row["group"]) if row.get("group") is not None else None
            out.append(row)
        return out

    below = records(dd.below_threshold)
    for row in below:
        row["lowest_prompts"] = [{"prompt_id": str(p), "value": r} for p, r in row["lowest_prompts"]]
    return {
        "rank_source": dd.rank_source,
        "skipped_records": dd.skipped_records,
        "by_rarity": records(dd.by_rarity),
        "by_position": records(dd.by_position),
        "corrections_note": "tokens the verifier emitted in place of a rejected draft token (the rejected draft token is not recorded)",
        "corrections": [{**row, "example_prompt_id": str(row["example_prompt_id"])} for row in records(dd.corrections)],
        "below_threshold": below,
    }
