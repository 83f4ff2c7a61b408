"""The tree and staged part of the self-test: how often the unit audit (`stats.tree_audit`)
rejects each exact rule (a false alarm: at most alpha) and each mutant (a detection), over seeds.

A mutant that is lossy by design (Medusa's typical acceptance) is held to the same detection
target and labelled apart: its FAIL is the audit telling the truth about a heuristic, not a bug.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import pandas as pd
from scipy import stats as _scipy_stats

from specaudit.contracts.status import CheckStatus
from specaudit.errors import InputError
from specaudit.selftest.tree_mutants import STAGED_MUTANTS, TREE_MUTANTS
from specaudit.stats.tree_audit import audit_staged, audit_tree

__all__ = ["TREE_SELFTEST_SAMPLERS", "tree_selftest"]

TREE_SELFTEST_SAMPLERS = (*TREE_MUTANTS, *STAGED_MUTANTS)
_QUICK_SEEDS = 10
_DETECTION_TARGET = 0.99


def _audit(name: str, seed: int, branching: str, alpha: float, trials: int):  # noqa: ANN202 (a TreeAuditResult)
    if name in TREE_MUTANTS:
        return audit_tree(TREE_MUTANTS[name], branching=branching, seed=seed, alpha=alpha, trials=trials)
    return audit_staged(STAGED_MUTANTS[name], seed=seed, alpha=alpha, trials=trials)


def tree_selftest(
    seeds: Iterable[int] | None = None,
    quick: bool = False,
    samplers: Iterable[str] | None = None,
    branching: str = "3,2,1",
    alpha: float = 0.05,
    trials: int = 400,
) -> pd.DataFrame:
    """One row per rule: rule, kind (exact / mutant / lossy by design), seeds, rejections,
    rejection_rate with its Clopper-Pearson 95% interval, target, ok, seconds_per_audit.
    Exact rules: the interval's lower end <= alpha (not shown to fail more often than alpha).
    Mutants: >= 0.99 of seeds rejected (with `quick`: the interval above alpha). Default seeds:
    200 (10 with `quick`); the tree shape `branching`, staged rules at k = 4 in rounds of 2, `trials`
    trees or staged steps per case (the audits' default 400; a quarter of it on the large vocabularies)."""
    seeds = list(range(_QUICK_SEEDS if quick else 200) if seeds is None else seeds)
    names = list(TREE_SELFTEST_SAMPLERS if samplers is None else samplers)
    unknown = [n for n in names if n not in TREE_SELFTEST_SAMPLERS]
    if unknown or not names or not seeds:
        raise InputError(f"unknown tree sampler(s) {unknown or names!r} or no seeds; choose from {', '.join(TREE_SELFTEST_SAMPLERS)}")
    rows = []
    for name in names:
        started = time.perf_counter()
        results = [_audit(name, seed, branching, alpha, trials) for seed in seeds]
        rejections = sum(r.verdict is CheckStatus.FAIL for r in results)
        interval = _scipy_stats.binomtest(rejections, len(seeds)).proportion_ci(confidence_level=0.95)
        rate = rejections / len(seeds)
        exact = name.startswith("correct")
        lossy = results[0].lossy_by_design
        if exact:
            target, ok = f"<= {alpha:g}", interval.low <= alpha
        elif quick:
            target, ok = f"> {alpha:g}", interval.low > alpha
        else:
            target, ok = f">= {_DETECTION_TARGET:g}", rate >= _DETECTION_TARGET
        rows.append(
            dict(
                sampler=name,
                rule=results[0].rule,
                kind="exact" if exact else ("lossy by design" if lossy else "mutant"),
                seeds=len(seeds),
                rejections=rejections,
                rejection_rate=rate,
                ci_low=float(interval.low),
                ci_high=float(interval.high),
                target=target,
                ok=bool(ok),
                samples_per_audit=sum(r.samples for r in results) / len(results),
                seconds_per_audit=(time.perf_counter() - started) / len(seeds),
            )
        )
    return pd.DataFrame(rows)
