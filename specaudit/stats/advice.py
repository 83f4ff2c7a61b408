"""What to do about a disparity: the expected speed-up model, the best draft length per group,
and a simulated fallback rule ("route a prompt to vanilla when its acceptance is below x").

The model (Leviathan et al. 2023) assumes i.i.d. acceptances with per-position probability α,
draft length k and cost ratio c = draft forward / target forward:

    tokens per step  E[τ] = (1 − α^(k+1)) / (1 − α)          (k + 1 when α = 1)
    speed-up              = E[τ] / (k·c + 1)

Acceptances are autocorrelated in practice, so the model is compared with measurements rather
than used as one. The α fed to it is ``per_position_acceptance`` (accepted / positions reached),
the maximum-likelihood α of that model; accepted / proposed would understate it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from specaudit.contracts import INTERSECTION, group_label
from specaudit.errors import InputError

if TYPE_CHECKING:
    from specaudit.stats.disparity.frame import GroupFrame

__all__ = [
    "acceptance_rate_from_alpha",
    "alpha_from_tokens_per_step",
    "best_draft_length",
    "break_even_alpha",
    "expected_speedup",
    "expected_tokens_per_step",
    "recommendations",
    "simulate_fallback",
]


def _check(alpha: float | np.ndarray, k: int | np.ndarray, cost_ratio: float | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    alpha = np.asarray(alpha, dtype=float)
    k = np.asarray(k, dtype=float)
    if np.any((alpha < 0) | (alpha > 1)):
        raise InputError("advice: the acceptance α must lie in [0, 1].")
    if np.any(k < 0) or np.any(k != np.round(k)):
        raise InputError("advice: the draft length k must be a non-negative integer.")
    if cost_ratio is not None and np.any(np.asarray(cost_ratio, dtype=float) < 0):
        raise InputError("advice: the cost ratio c must be non-negative.")
    return alpha, k


def expected_tokens_per_step(alpha: float | np.ndarray, k: int | np.ndarray) -> float | np.ndarray:
    """(1 − α^(k+1)) / (1 − α), k + 1 at α = 1: tokens emitted per verification step."""
    alpha, k = _check(alpha, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(alpha < 1.0, (1.0 - alpha ** (k + 1)) / (1.0 - np.where(alpha < 1.0, alpha, 0.0)), k + 1.0)
    return value if value.ndim else float(value)


def expected_speedup(
    alpha: float | np.ndarray, k: int | np.ndarray, cost_ratio: float | np.ndarray, verify_cost: float | np.ndarray = 1.0
) -> float | np.ndarray:
    """(1 − α^(k+1)) / ((1 − α)(k·c + v)): wall-time speed-up over vanilla under the i.i.d. model,
    with c the draft's cost per token and v the cost of one verification pass of k + 1 tokens, both
    in units of one plain target step (v = 1 where verifying is memory-bound, as on a GPU)."""
    _check(alpha, k, cost_ratio)
    step_cost = np.asarray(k, float) * np.asarray(cost_ratio, float) + np.asarray(verify_cost, float)
    value = np.asarray(expected_tokens_per_step(alpha, k)) / step_cost
    return value if value.ndim else float(value)


def best_draft_length(alpha: float, cost_ratio: float, k_max: int = 8, verify_cost: float = 1.0) -> tuple[int, float]:
    """The k in 1..k_max maximising the expected speed-up, and that speed-up. When even the best
    is below 1, speculation does not pay: returns (0, 1.0), i.e. decode without a draft."""
    if not (np.isfinite(alpha) and np.isfinite(cost_ratio)):
        return 0, float("nan")
    ks = np.arange(1, k_max + 1)
    speedups = expected_speedup(alpha, ks, cost_ratio, verify_cost)
    best = int(np.argmax(speedups))
    if speedups[best] < 1.0:
        return 0, 1.0
    return int(ks[best]), float(speedups[best])


def break_even_alpha(k: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """The per-position acceptance α at which the expected speed-up is exactly 1 (speculation pays
    above it); NaN when no α pays (k·c + v ≥ k + 1). The speed-up grows with α, so bisection finds it."""
    if k < 1 or not np.isfinite(cost_ratio) or expected_speedup(1.0, k, cost_ratio, verify_cost) < 1.0:
        return float("nan")
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if expected_speedup(middle, k, cost_ratio, verify_cost) < 1.0 else (low, middle)
    return high


def alpha_from_tokens_per_step(tau: float, k: int) -> float:
    """The per-position α whose expected tokens per step equals the measured τ (bisection; the
    model's τ grows with α). For engines that report no per-step counts."""
    if k < 1 or not np.isfinite(tau):
        return float("nan")
    tau = min(max(tau, 1.0), k + 1.0)
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if expected_tokens_per_step(middle, k) < tau else (low, middle)
    return 0.5 * (low + high)


def acceptance_rate_from_alpha(alpha: float | np.ndarray, k: int | np.ndarray) -> float | np.ndarray:
    """accepted / proposed implied by per-position α under the i.i.d. model: Σ_{i=1..k} α^i / k
    (positions after the first rejection of a step are proposed but never accepted)."""
    alpha, k = _check(alpha, k)
    value = (np.asarray(expected_tokens_per_step(alpha, k)) - 1.0) / k
    return value if value.ndim else float(value)


def simulate_fallback(
    per_prompt: pd.DataFrame,
    groups: Sequence[Any] | np.ndarray | pd.Series,
    threshold: float = 0.5,
    *,
    reference: Any | None = None,
    threshold_metric: str = "acceptance_rate",
) -> pd.DataFrame:
    """Each group's latency and speed-up if prompts with ``threshold_metric`` (acceptance rate by
    default) below ``threshold`` ran on vanilla instead, from the measured per-token times of both engines (paired prompts only).

    Routing uses each prompt's measured acceptance, so it is an oracle rule: a deployed rule
    must predict acceptance (e.g. from the first steps) and will do somewhat worse. Group speed-up
    = Σ vanilla time/token ÷ Σ time/token under the rule, as in GroupFrame's ``speedup``. Rows:
    groups then "overall"; ``ratio_*`` columns compare with ``reference`` (a group label), or
    with the best group when reference is None.
    """
    needed = [threshold_metric, "vanilla_latency_per_token_s", "latency_per_token_s"]
    missing = [c for c in needed if c not in per_prompt.columns]
    if missing:
        raise InputError(f"simulate_fallback: the per-prompt table lacks {', '.join(missing)}; build it with per_prompt_metrics.")
    labels = list(groups) if not isinstance(groups, np.ndarray) else [groups[i] for i in range(len(groups))]
    if len(labels) != len(per_prompt):
        raise InputError(f"simulate_fallback: got {len(labels)} group labels for {len(per_prompt)} prompts; give one per prompt.")
    has_label = np.array([g is not None and g == g for g in labels])  # g == g is False for NaN
    vanilla = per_prompt["vanilla_latency_per_token_s"].to_numpy(dtype=float)
    speculative = per_prompt["latency_per_token_s"].to_numpy(dtype=float)
    acceptance = per_prompt[threshold_metric].to_numpy(dtype=float)
    paired = np.isfinite(vanilla) & np.isfinite(speculative)
    routed = paired & np.isfinite(acceptance) & (acceptance < threshold)
    after = np.where(routed, vanilla, speculative)
    rows = {}
    names = np.array([group_label(g) if ok else "" for g, ok in zip(labels, has_label)], dtype=object)
    present = sorted({n for n, ok in zip(names, has_label) if ok})
    for group in [*present, "overall"]:
        in_group = np.ones(len(labels), bool) if group == "overall" else has_label & (names == group)
        members = paired & in_group
        n = int(members.sum())
        with np.errstate(all="ignore"):
            rows[group] = {
                "threshold": threshold,
                "n_paired_prompts": n,
                "n_routed": int((routed & members).sum()),
                "share_routed": (routed & members).sum() / n if n else np.nan,
                "latency_per_token_before_s": speculative[members].mean() if n else np.nan,
                "latency_per_token_after_s": after[members].mean() if n else np.nan,
                "speedup_before": vanilla[members].sum() / speculative[members].sum() if n else np.nan,
                "speedup_after": vanilla[members].sum() / after[members].sum() if n else np.nan,
            }
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "group"
    group_rows = frame.loc[[g for g in frame.index if g != "overall"]]
    for when in ("before", "after"):
        column = group_rows[f"speedup_{when}"]
        if reference is not None and group_label(reference) in group_rows.index:
            base = frame.loc[group_label(reference), f"speedup_{when}"]
        else:
            base = column.max()
        frame[f"ratio_to_reference_{when}"] = frame[f"speedup_{when}"] / base
    frame.attrs["reference"] = reference if reference is not None else "best group"
    frame.attrs["min_max_ratio_before"] = (
        float(group_rows["speedup_before"].min() / group_rows["speedup_before"].max()) if len(group_rows) else np.nan
    )
    frame.attrs["min_max_ratio_after"] = (
        float(group_rows["speedup_after"].min() / group_rows["speedup_after"].max()) if len(group_rows) else np.nan
    )
    return frame


def _json(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _row_json(row: pd.Series) -> dict[str, Any]:
    return {k: (int(v) if k.startswith("n_") else _json(v)) for k, v in row.items()}


def recommendations(
    frame: GroupFrame,
    *,
    reference: Any = "largest",
    threshold: float = 0.5,
    cost_ratio: float | None = None,
    verify_cost: float = 1.0,
    k_max: int = 8,
    thresholds: Sequence[float] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7),
    threshold_metric: str = "acceptance_rate",
    min_gain: float = 0.05,
    deployment_cost_ratio: float | None = None,
    deployment_verify_cost: float = 1.0,
    acceptance_rule: str | None = None,
) -> dict[str, Any]:
    """Per group: model vs measured speed-up, best k, slow-down warning; the fallback rule's effect
    on each group and on the disparity; and plain-language messages. JSON-ready.

    Acceptance is portable, speed-up is not: each group carries α = mean Σ min(p, q) (what
    rejection sampling accepts, a property of the two models and the prompts) beside the engine's
    own rule's per-position rate (a greedy draft kept while the target's sample matches accepts
    less), and, given a deployment's draft cost c and verification cost v, the speed-up the model
    projects there from α's interval (`projected_speedup`; the formula is in `projection`).

    `cost_ratio` (c) and `verify_cost` (v) are this machine's, in plain decoding steps, where the
    audit measured them (a screened audit's cost model); without them c is each group's draft time
    per drafted token over its verification time per step and v = 1."""
    table = frame.per_prompt
    dimension = INTERSECTION.join(frame.sensitive)
    ci_pct = f"{round(frame.confidence_level * 100)}%"

    def get(group: str | None, metric: str, stat: str = "value") -> float:
        return frame.value(metric, group, stat) if metric in frame.metrics else np.nan

    overall_c = cost_ratio if cost_ratio is not None else get(None, "cost_ratio")
    per_group: dict[str, Any] = {}
    messages: list[str] = []
    labels = frame.prompt_groups
    for group in frame.groups:
        name = group_label(group)
        members = np.array([label == group for label in labels], dtype=bool)
        k_values = table.loc[members, "k"].dropna()
        k = int(round(k_values.median())) if len(k_values) else 0
        alpha = get(group, "per_position_acceptance")
        alpha_source = "per_position_acceptance"
        tau = get(group, "mean_accepted_tokens")
        if not np.isfinite(alpha):
            alpha, alpha_source = get(group, "mean_beta"), "mean_beta"
        if not np.isfinite(alpha) and k > 0:
            alpha, alpha_source = alpha_from_tokens_per_step(tau, k), "mean_accepted_tokens (model inverted)"
        c = cost_ratio if cost_ratio is not None else get(group, "cost_ratio")
        if not np.isfinite(c):
            c = overall_c
        model = expected_speedup(alpha, k, c, verify_cost) if np.isfinite(alpha) and np.isfinite(c) and k > 0 else np.nan
        from_tau = tau / (k * c + verify_cost) if np.isfinite(tau) and np.isfinite(c) and k > 0 else np.nan
        best_k, best_value = best_draft_length(alpha, c, k_max, verify_cost) if np.isfinite(alpha) else (0, np.nan)
        even = break_even_alpha(k, c, verify_cost) if k > 0 else np.nan
        measured = {s: get(group, "speedup", s) for s in ("value", "ci_low", "ci_high")}
        slowed = bool(np.isfinite(measured["value"]) and measured["value"] < 1.0)
        clearly_slowed = bool(np.isfinite(measured["ci_high"]) and measured["ci_high"] < 1.0)
        portable = {s: get(group, "mean_beta", s) for s in ("value", "ci_low", "ci_high")}
        rule_rate = {s: get(group, "per_position_acceptance", s) for s in ("value", "ci_low", "ci_high")}
        per_group[name] = {
            "k": k,
            "alpha": _json(alpha),
            "alpha_source": alpha_source,
            "alpha_portable": {key: _json(v) for key, v in portable.items()},
            "engine_rule_rate": {key: _json(v) for key, v in rule_rate.items()},
            "cost_ratio": _json(c),
            "verify_cost": _json(verify_cost),
            "expected_speedup": _json(model),
            "expected_speedup_from_measured_tau": _json(from_tau),
            "measured_speedup": {key: _json(v) for key, v in measured.items()},
            "best_k": best_k,
            "best_k_expected_speedup": _json(best_value),
            "break_even_alpha": _json(even),
            "break_even_acceptance_rate": _json(acceptance_rate_from_alpha(even, k) if np.isfinite(even) else np.nan),
            "slowed_down": slowed,
            "slowed_down_significantly": clearly_slowed,
        }
        if deployment_cost_ratio is not None and k > 0:
            basis, source = (portable, "mean_beta") if np.isfinite(portable["value"]) else (rule_rate, "per_position_acceptance")
            # the speed-up grows with α, so α's interval maps to the projection's
            per_group[name]["projected_speedup"] = {
                key: _json(expected_speedup(v, k, deployment_cost_ratio, deployment_verify_cost) if np.isfinite(v) else np.nan)
                for key, v in basis.items()
            }
            per_group[name]["projected_from"] = source
        if slowed:
            messages.append(
                f"Speculation slows {dimension}={name} down: measured speed-up {measured['value']:.2f}× "
                f"({ci_pct} CI {measured['ci_low']:.2f}–{measured['ci_high']:.2f})"
                + ("" if clearly_slowed else ", though the interval reaches 1")
                + "; route it to vanilla decoding or use a better draft for it."
            )
        worth_it = np.isfinite(model) and np.isfinite(best_value) and best_value > (1.0 + min_gain) * model
        if np.isfinite(alpha) and best_k != k and (best_k == 0 or worth_it):
            if best_k == 0:
                messages.append(
                    f"For {dimension}={name} (β̄ = {alpha:.2f}, c = {c:.2f}, v = {verify_cost:.2f}) no draft length pays off in the model: "
                    "decode without speculation."
                )
            else:
                messages.append(
                    f"For {dimension}={name} the model prefers k = {best_k} (expected {best_value:.2f}×) "
                    f"to the k = {k} used (expected {model:.2f}×)."
                )
        if np.isfinite(model) and np.isfinite(measured["value"]) and measured["value"] < 0.8 * model:
            messages.append(
                f"{dimension}={name} measures {measured['value']:.2f}× against {model:.2f}× expected from "
                f"β̄ and c ({from_tau:.2f}× from its measured tokens per step): acceptances cluster, or per-step "
                "overheads the model leaves out dominate."
            )

    ref_index = frame.reference_index(reference)
    ref_label = None if ref_index is None else frame.groups[ref_index]
    fallback = simulate_fallback(table, labels, threshold, reference=ref_label, threshold_metric=threshold_metric)
    fallback_groups = {}
    for group in frame.groups:
        if group_label(group) in fallback.index:
            fallback_groups[group_label(group)] = _row_json(fallback.loc[group_label(group)])
    sweep = []
    for x in sorted(set(thresholds) | {threshold}):
        sim = simulate_fallback(table, labels, x, reference=ref_label, threshold_metric=threshold_metric)
        sweep.append(
            {
                "threshold": x,
                "overall_speedup": _json(sim.loc["overall", "speedup_after"]),
                "share_routed": _json(sim.loc["overall", "share_routed"]),
                "min_max_speedup_ratio": _json(sim.attrs["min_max_ratio_after"]),
            }
        )
    before, after = fallback.attrs["min_max_ratio_before"], fallback.attrs["min_max_ratio_after"]
    if np.isfinite(before) and np.isfinite(after) and "overall" in fallback.index:
        routed = int(fallback.loc["overall", "n_routed"])
        messages.append(
            f"Routing prompts with {threshold_metric} < {threshold:g} to vanilla ({routed} of "
            f"{int(fallback.loc['overall', 'n_paired_prompts'])} prompts) moves the overall speed-up from "
            f"{fallback.loc['overall', 'speedup_before']:.2f}× to {fallback.loc['overall', 'speedup_after']:.2f}× "
            f"and the slowest/fastest group speed-up ratio from {before:.2f} to {after:.2f} "
            "(oracle routing on measured acceptance: an upper bound for a deployed rule)."
        )
    k_all = table["k"].dropna()
    if len(k_all) and np.isfinite(overall_c):
        k_used = int(round(k_all.median()))
        even = break_even_alpha(k_used, overall_c, verify_cost)
        if np.isfinite(even):
            # Under the model τ = 1 + k·(accepted/proposed) and a step costs k·c + v, so a prompt breaks
            # even exactly when its acceptance rate equals c + (v − 1)/k (c itself where v = 1).
            rate = overall_c + (verify_cost - 1.0) / k_used
            losing = int((table["acceptance_rate"] < rate).sum())
            messages.append(
                f"Under the model a prompt gains from speculation only when its acceptance rate exceeds "
                f"{rate:.2f} (c + (v − 1)/k with c = {overall_c:.2f}, v = {verify_cost:.2f}; per-position acceptance above "
                f"{even:.2f} at k = {k_used}); {losing} of {int(table['acceptance_rate'].notna().sum())} prompts fall below "
                "it, and a fallback threshold there routes just those."
            )
    return {
        "model": f"speed-up = (1 − β̄^(k+1)) / ((1 − β̄)(k·c + v)), i.i.d. acceptances, v = {verify_cost:.3g}",
        "by_group": per_group,
        "acceptance_rule": acceptance_rule,  # what engine_rule_rate measures
        "fallback": {
            "threshold": threshold,
            "rule": f"route a prompt to vanilla decoding when its {threshold_metric} is below the threshold",
            "threshold_metric": threshold_metric,
            "oracle": True,
            "reference": None if ref_label is None else group_label(ref_label),
            "by_group": fallback_groups,
            "overall": _row_json(fallback.loc["overall"]),
            "min_max_speedup_ratio_before": _json(before),
            "min_max_speedup_ratio_after": _json(after),
            "sweep": sweep,
        },
        "messages": messages,
        **(
            {
                "projection": {
                    "cost_ratio": deployment_cost_ratio,
                    "verify_cost": deployment_verify_cost,
                    "formula": "projected speed-up = (1 − β̄^(k+1)) / ((1 − β̄)(k·c + v)), β̄ = mean Σ min(p, q) of the group, "
                    "k as audited, c and v as given",
                    "note": "a projection for the deployment described, not a measurement: it assumes i.i.d. acceptances "
                    "and the same k; the measured speed-up column holds on this machine only",
                }
            }
            if deployment_cost_ratio is not None
            else {}
        ),
    }
