"""The snapshot's concurrency section: a run whose records carry `concurrency` (the number of
requests in flight when each ran, `--engines llama-server`) is judged per level.

- Equivalence per level: the whole battery (analysis.equivalence.equivalence_section) on each
  level's records alone, so a sampler that is right one request at a time and wrong in a batch
  fails at the level where it breaks, and the run's equivalence fails naming that level.
- Independence per level: outputs made at each level above the lowest agree no more than those
  made at the lowest (stats.equivalence.independence, a permutation test per engine); a server
  that shares random numbers across a batch fails it at the level where requests run together,
  though each output alone follows the target.
- The run's equivalence fails when the pooled battery, any level's battery or any independence
  test fails, so alpha is split across those three families (`split_alpha`, Bonferroni): the
  rate a correct server is failed at stays at most alpha.
- Acceptance, latency and throughput per group x level: the speculative records' pooled acceptance
  (accepted / proposed, from the server's own per-request counts), mean time to first token,
  mean per-token latency and the paired speed-up (vanilla wall / speculative wall of the same
  prompt and sample), each with a prompt-cluster bootstrap interval. Where the speed-up interval
  lies below 1 speculation stops paying at that level; `crossover` names the lowest such level per
  group (None where it pays or cannot be told at every level; a group of fewer than
  MIN_PROMPTS_FOR_INTERVAL prompts gets estimates without intervals and no crossover).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.contracts.snapshot import ConcurrencySection, EngineEquivalence, EquivalenceSection
from specaudit.contracts.status import CheckStatus

if TYPE_CHECKING:
    from specaudit.analysis.equivalence import Battery

ALL = "all"  # the group of every prompt, beside each dimension's groups
# Fewer prompts than this give a point estimate without an interval (a bootstrap over 1 or 2
# prompts is degenerate or near it), so no crossover is claimed from them.
MIN_PROMPTS_FOR_INTERVAL = 5


def levels_of(records: list[dict]) -> list[int]:
    return sorted({int(r["concurrency"]) for r in records if r.get("concurrency") is not None})


@dataclass(frozen=True)
class AlphaSplit:
    """The level each family of a multi-level run's equivalence decision is judged at."""

    pooled: float  # the battery on every record (analysis.equivalence)
    level: float  # the battery on one level's records
    independence: float  # one level's independence tests, split again over the engines tested
    state: float = 0.0  # the battery on one prompt-cache state's records (analysis.prefix_cache)


def split_alpha(alpha: float, levels: list[int], states: int = 0) -> AlphaSplit:
    """Bonferroni over the families, then over the levels (or states) inside each. At one level the
    level's battery is the pooled one on the same records and there is no independence test, so
    neither is a family of its own; a run with --prefix-cache (`states` > 0) adds the states'
    batteries as one family, split over the states."""
    families = (3 if len(levels) >= 2 else 1) + (1 if states else 0)
    family = alpha / families
    if len(levels) < 2:
        return AlphaSplit(pooled=family, level=family, independence=family, state=family / max(states, 1))
    return AlphaSplit(pooled=family, level=family / len(levels), independence=family / (len(levels) - 1), state=family / max(states, 1))


def _interval(values_by_prompt: dict[str, tuple[float, float]], n_boot: int, seed: int) -> dict | None:
    """Ratio of sums (numerator / denominator over prompts) with a prompt-cluster bootstrap interval."""
    from specaudit.stats._bootstrap import cluster_bootstrap

    if not values_by_prompt:
        return None
    pairs = np.array(list(values_by_prompt.values()), dtype=float)
    if pairs[:, 1].sum() <= 0:
        return None

    def ratio(weights: np.ndarray) -> np.ndarray:
        denominator = weights @ pairs[:, 1]
        return np.divide(weights @ pairs[:, 0], denominator, out=np.full(len(weights), np.nan), where=denominator > 0)

    if len(pairs) < MIN_PROMPTS_FOR_INTERVAL:
        return {"estimate": float(ratio(np.ones((1, len(pairs))))[0]), "ci_low": None, "ci_high": None, "n_prompts": len(pairs)}
    result = cluster_bootstrap(ratio, len(pairs), n_boot=n_boot, seed=seed)
    return {
        "estimate": float(result.statistic),
        "ci_low": float(result.ci_low),
        "ci_high": float(result.ci_high),
        "n_prompts": len(pairs),
    }


def _sums(
    records: list[dict], numerator: Callable[[dict], float | None], denominator: Callable[[dict], float | None]
) -> dict[str, tuple[float, float]]:
    sums: dict[str, list[float]] = {}
    for r in records:
        n, d = numerator(r), denominator(r)
        if n is None or d is None:
            continue
        entry = sums.setdefault(r["prompt_id"], [0.0, 0.0])
        entry[0] += n
        entry[1] += d
    return {prompt: (n, d) for prompt, (n, d) in sums.items()}


def group_metrics(records: list[dict], *, n_boot: int, seed: int) -> dict[str, Any]:
    """Acceptance, TTFT, per-token latency, throughput and paired speed-up of one group at one level."""
    spec = [r for r in records if r["engine"] == SPECULATIVE_ENGINE]
    control = {(r["prompt_id"], r["sample"]): r for r in records if r["engine"] == CONTROL_ENGINE}
    paired = [(control[(r["prompt_id"], r["sample"])], r) for r in spec if (r["prompt_id"], r["sample"]) in control]
    tokens = lambda r: len(r["output_token_ids"])  # noqa: E731
    out: dict[str, Any] = {
        "n_records": len(spec),
        "acceptance": _interval(
            _sums([r for r in spec if not r.get("timing_only")], lambda r: r.get("accepted"), lambda r: r.get("proposed")), n_boot, seed
        ),
    }
    for engine, rows in ((CONTROL_ENGINE, list(control.values())), (SPECULATIVE_ENGINE, spec)):
        out[engine] = {
            "ttft_s": _interval(
                _sums(rows, lambda r: r.get("ttft_s"), lambda r: 1.0 if r.get("ttft_s") is not None else None), n_boot, seed
            ),
            "per_token_s": _interval(_sums(rows, lambda r: r.get("wall_s"), lambda r: tokens(r) or None), n_boot, seed),
            "tokens_per_s": _interval(_sums(rows, lambda r: tokens(r), lambda r: r.get("wall_s") or None), n_boot, seed),
        }
    # Speed-up as a ratio of summed times per token (vanilla over speculative), pairs kept together.
    by_prompt: dict[str, list[float]] = {}
    for off, on in paired:
        if off.get("wall_s") and on.get("wall_s") and tokens(off) and tokens(on):
            entry = by_prompt.setdefault(on["prompt_id"], [0.0, 0.0])
            entry[0] += off["wall_s"] / tokens(off)
            entry[1] += on["wall_s"] / tokens(on)
    out["speedup"] = _interval({p: (a, b) for p, (a, b) in by_prompt.items()}, n_boot, seed)
    return out


def subset_battery(subset: list[dict], battery: Battery, *, keep_tests: bool = False) -> tuple[EquivalenceSection, str]:
    """The whole equivalence battery on one level's (or cache state's) records, kept as verdicts
    (with `keep_tests`, the engines' tests too: their Holm-adjusted p-values), and its outcome:
    "control failed" (the spec-OFF control fails: that subset cannot be trusted), "failed" or "passed"."""
    from specaudit.analysis.equivalence import equivalence_section

    result, _ = equivalence_section(subset, battery)
    engines = {
        name: EngineEquivalence(
            verdict=e.verdict, status=e.status, **({"goodness_of_fit": e.goodness_of_fit, "two_sample": e.two_sample} if keep_tests else {})
        )
        for name, e in result.engines.items()
    }
    section = EquivalenceSection(
        status=result.status,
        engines=engines,
        **({"alpha": battery.alpha} if keep_tests else {}),
        **({"message": result.message} if result.message else {}),
    )
    outcome = "control failed" if result.control_failed else "failed" if result.status == CheckStatus.FAIL else "passed"
    return section, outcome


def concurrency_section(records: list[dict], battery: Battery, *, states: int = 0) -> ConcurrencySection | None:
    """The section, or None for a run without concurrency levels; `battery.alpha` is the run's (the
    pooled battery was judged at its split.pooled). `states`: the prompt-cache states of a run with
    --prefix-cache (analysis.prefix_cache), a family of its own in the alpha split."""
    levels = levels_of(records)
    if not levels:
        return None
    split = split_alpha(battery.alpha, levels, states)
    dimensions, seed = battery.dimensions, battery.seed
    batteries: dict[str, EquivalenceSection] = {}
    independence: dict[str, dict[str, dict[str, Any]]] = {}
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    failed, control_failed = [], []  # levels where the speculative server fails; where the spec-OFF control does
    dependent: dict[int, list[str]] = {}  # level -> engines whose outputs that ran together agree too often
    for level in levels:
        subset = [r for r in records if r.get("concurrency") == level]
        if battery.equivalence:
            batteries[str(level)], outcome = subset_battery(subset, battery.at(split.level))
            if outcome == "control failed":
                control_failed.append(level)
            elif outcome == "failed":
                failed.append(level)
            if level != levels[0]:
                found = _independence(records, level, levels[0], split.independence, seed)
                independence[str(level)] = found
                for engine, test in found.items():
                    if test["verdict"] == CheckStatus.FAIL:
                        dependent.setdefault(level, []).append(engine)
        members_by_dimension = {ALL: {ALL: subset}}
        for dimension in dimensions:
            for record in subset:
                value = (record.get("attributes") or {}).get(dimension)
                if value is not None:  # a prompt of another dimension is in no group of this one
                    members_by_dimension.setdefault(dimension, {}).setdefault(str(value), []).append(record)
        for dimension, members in members_by_dimension.items():
            for group, rows in members.items():
                groups.setdefault(dimension, {}).setdefault(group, {})[str(level)] = group_metrics(rows, n_boot=battery.n_boot, seed=seed)
    crossover = {dimension: {group: _crossover(by_level) for group, by_level in members.items()} for dimension, members in groups.items()}
    control_dependent = [level for level, engines in dependent.items() if CONTROL_ENGINE in engines]
    message = _message(levels, failed, control_failed, dependent)
    return ConcurrencySection(
        levels=levels,
        pooled_alpha=split.pooled,
        level_alpha=split.level,
        independence_alpha=split.independence,
        equivalence=batteries,
        independence=independence,
        groups=groups,
        crossover=crossover,
        failed_levels=sorted({*failed, *control_failed, *dependent}),
        control_failed_levels=sorted({*control_failed, *control_dependent}),
        dependent_levels=sorted(dependent),
        **({"message": message} if message else {}),
    )


def _crossover(by_level: dict[str, dict[str, Any]]) -> int | None:
    """The lowest level whose speed-up interval lies below 1 (speculation stops paying), or None."""
    stops = [
        int(level)
        for level, m in by_level.items()
        if m["speedup"] and m["speedup"]["ci_high"] is not None and m["speedup"]["ci_high"] < 1.0
    ]
    return min(stops) if stops else None


def _message(levels: list[int], failed: list[int], control_failed: list[int], dependent: dict[int, list[str]]) -> str | None:
    """The section's finding in words: dependent outputs, then failed levels, then a failed control."""
    said = []
    for level, engines in dependent.items():
        said.append(
            f"outputs that ran together at concurrency {level} are not independent ({', '.join(engines)}): samples of one prompt "
            f"agree more than the samples made at concurrency {levels[0]}; the server shares random numbers across the requests of a batch"
        )
    if failed:
        said.append(
            f"equivalence fails at concurrency {', '.join(map(str, failed))} of {', '.join(map(str, levels))}: "
            "the speculative server's outputs do not follow the target's distribution when that many requests run together"
        )
    if control_failed:
        said.append(
            f"the vanilla control fails at concurrency {', '.join(map(str, control_failed))} of {', '.join(map(str, levels))}: "
            "the spec-OFF server's outputs do not follow the target's either, so the audit at that level cannot be trusted"
        )
    return "; ".join(said) or None


def _independence(records: list[dict], level: int, baseline: int, alpha: float, seed: int) -> dict[str, dict]:
    """concurrent_independence of each engine's outputs at `level` against `baseline`."""
    from specaudit.stats.equivalence.independence import concurrent_independence

    outputs: dict[tuple[str, int], dict[str, list]] = {}
    for r in records:
        if not r.get("timing_only") and r.get("concurrency") in (level, baseline):
            outputs.setdefault((r["engine"], r["concurrency"]), {}).setdefault(r["prompt_id"], []).append(r["output_token_ids"])
    engines = sorted({engine for engine, _ in outputs})
    found = {}
    for engine in engines:
        result = concurrent_independence(
            outputs.get((engine, level), {}), outputs.get((engine, baseline), {}), alpha=alpha / len(engines), seed=seed
        )
        found[engine] = {**result.to_dict(), "verdict": result.verdict, "baseline_level": baseline}
    return found


__all__ = ["AlphaSplit", "concurrency_section", "group_metrics", "levels_of", "split_alpha"]
