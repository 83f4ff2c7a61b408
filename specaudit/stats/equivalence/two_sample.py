"""Black-box two-sample comparison of an engine with the reference engine, prompt by prompt."""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special as _sp
from scipy import stats as _st

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError
from specaudit.stats._results import (
    FAIL,
    PASS,
    SKIPPED,
    StatTestResult,
    bh,
    frame_records,
)
from specaudit.stats.equivalence._common import NOT_RUN, TWO_SAMPLE_TESTS, HolmBattery, _frame
from specaudit.stats.equivalence.goodness_of_fit import _gate_table
from specaudit.stats.scoring import TokenScores, _audited, _field


# ============================================================================ two-sample
def _permuted_labels(n_engine: int, n_total: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Row 0: the observed labels (engine first); rows 1..B: within-prompt permutations."""
    observed = np.zeros(n_total, dtype=bool)
    observed[:n_engine] = True
    labels = np.tile(observed, (n_resamples + 1, 1))
    labels[1:] = rng.permuted(labels[1:], axis=1)
    return labels


def _one_hot(codes: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros((codes.size, width))
    out[np.arange(codes.size), codes] = 1.0
    return out


def _g_statistic(categories: Sequence[Any], labels: np.ndarray) -> np.ndarray:
    """G = 2 Σ O log(O/E) of the 2×m table (engine × category), for every label row."""
    _, codes = np.unique(np.asarray(categories), return_inverse=True)
    onehot = _one_hot(codes.reshape(-1), int(codes.max()) + 1)
    lab = labels.astype(float)
    a = lab @ onehot
    total = onehot.sum(axis=0)
    b = total - a
    n = labels.shape[1]
    n_a = lab.sum(axis=1, keepdims=True)
    e_a, e_b = total * n_a / n, total * (n - n_a) / n
    return 2 * (_sp.xlogy(a, a) - _sp.xlogy(a, e_a) + _sp.xlogy(b, b) - _sp.xlogy(b, e_b)).sum(axis=1)


def _ad_statistic(values: Sequence[float], labels: np.ndarray) -> np.ndarray:
    """Two-sample Anderson–Darling A²_akN (Scholz & Stephens 1987, midrank version for ties),
    for every label row. Constant data give 0."""
    _, codes, ties = np.unique(np.asarray(values, dtype=float), return_inverse=True, return_counts=True)
    n = labels.shape[1]
    onehot = _one_hot(codes.reshape(-1), ties.size)
    lab = labels.astype(float)
    f1 = lab @ onehot
    f2 = ties - f1
    n1 = lab.sum(axis=1, keepdims=True)
    n2 = n - n1
    b_mid = np.cumsum(ties) - ties / 2
    m1 = np.cumsum(f1, axis=1) - f1 / 2
    m2 = np.cumsum(f2, axis=1) - f2 / 2
    denominator = b_mid * (n - b_mid) - n * ties / 4
    ok = denominator > 1e-12
    weight = np.where(ok, ties / n / np.where(ok, denominator, 1.0), 0.0)
    term1 = (weight * (n * m1 - n1 * b_mid) ** 2).sum(axis=1) / n1[:, 0]
    term2 = (weight * (n * m2 - n2 * b_mid) ** 2).sum(axis=1) / n2[:, 0]
    return (n - 1) / n * (term1 + term2)


def _ngrams(tokens: Sequence[int]) -> tuple[Counter, Counter]:
    tokens = [int(t) for t in tokens]
    return Counter(tokens), Counter(itertools.pairwise(tokens))


def _ngram_statistic(outputs: Sequence[Sequence[int]], labels: np.ndarray) -> np.ndarray:
    """Σ over n = 1, 2 of the L1 distance between the two engines' normalised n-gram profiles."""
    lab = labels.astype(float)
    total = np.zeros(labels.shape[0])
    profiles = [_ngrams(o) for o in outputs]
    for order in range(2):
        vocabulary: dict[Any, int] = {}
        for profile in profiles:
            for gram in profile[order]:
                vocabulary.setdefault(gram, len(vocabulary))
        if not vocabulary:
            continue
        counts = np.zeros((len(outputs), len(vocabulary)))
        for i, profile in enumerate(profiles):
            for gram, c in profile[order].items():
                counts[i, vocabulary[gram]] = c
        a = lab @ counts
        b = counts.sum(axis=0) - a
        sa, sb = a.sum(axis=1, keepdims=True), b.sum(axis=1, keepdims=True)
        a = np.divide(a, sa, out=np.zeros_like(a), where=sa > 0)
        b = np.divide(b, sb, out=np.zeros_like(b), where=sb > 0)
        total += np.abs(a - b).sum(axis=1)
    return total


def _permutation_pvalue(stats: np.ndarray) -> float:
    """(1 + #{b: T_b ≥ T_obs}) / (1 + B), with a relative tolerance so exact ties count as ≥."""
    observed = stats[0]
    tolerance = 1e-9 * max(1.0, abs(observed))
    return float((1 + np.sum(stats[1:] >= observed - tolerance)) / stats.size)


@dataclass(frozen=True)
class TwoSample(HolmBattery):
    """Black-box two-sample comparison of `engine` against `reference` on the same prompts.

    `tests` holds each statistic combined across prompts (sum of per-prompt statistics,
    p-value by permuting engine labels within every prompt at once: a stratified permutation
    test, exact at any sample size). `gate` is Holm over those; `by_prompt` and `by_group`
    carry BH q-values across prompts/groups (diagnostics).

    A permutation within prompts can only reject when the prompts allow enough distinct label
    arrangements: with one sample per prompt and engine, swapping the two labels leaves every
    statistic unchanged and p = 1 by construction. Then no test is run, `not_run_reason` says
    why, and `verdict` is "not run" (never a pass).
    """

    engine: str
    reference: str
    alpha: float
    n_prompts: int
    tests: Mapping[str, StatTestResult]
    gate: pd.DataFrame
    by_prompt: pd.DataFrame = field(repr=False)
    by_group: pd.DataFrame = field(repr=False)
    not_run_reason: str | None = None

    @property
    def verdict(self) -> str:
        if self.not_run_reason is not None:
            return NOT_RUN
        if not np.isfinite(self.pvalue):
            return SKIPPED
        return FAIL if self.statistic > 0 else PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "reference": self.reference,
            "alpha": self.alpha,
            "n_prompts": self.n_prompts,
            "verdict": self.verdict,
            "not_run_reason": self.not_run_reason,
            "pvalue": None if not np.isfinite(self.pvalue) else self.pvalue,
            "tests": {name: result.to_dict() for name, result in self.tests.items()},
            "gate": frame_records(self.gate),
            "flagged_prompts": frame_records(self.by_prompt[self.by_prompt["flagged"]]),
            "flagged_groups": frame_records(self.by_group[self.by_group["flagged"]]),
        }


def _arrangements(sides: Iterable[tuple[int, int]]) -> float:
    """log of the number of distinct values a label-symmetric statistic can take under the
    within-prompt permutation: Π C(n_j, a_j), halved where both sides have the same size
    (exchanging the two sides gives the same value)."""
    total = 0.0
    for a, b in sides:
        total += math.lgamma(a + b + 1) - math.lgamma(a + 1) - math.lgamma(b + 1) - (math.log(2) if a == b else 0.0)
    return total


def _cannot_reject(sides: list[tuple[int, int]], alpha: float) -> str | None:
    """Why a within-prompt permutation test over these prompts cannot reach p < alpha, or None."""
    if all(a + b <= 2 for a, b in sides):
        return (
            "one sample per prompt and engine: swapping the two labels within a prompt leaves every statistic "
            "unchanged, so the permutation p-value is 1 by construction; draw several samples per prompt"
        )
    log_count = _arrangements(sides)
    if log_count < math.log(1 / alpha):
        return (
            f"only {math.exp(log_count):.0f} distinct label arrangements within prompts: the smallest attainable "
            f"p-value is above alpha = {alpha:g}; draw more samples per prompt"
        )
    return None


def _split_by_prompt(records: Iterable[Any], engine: str, reference: str) -> dict[str, tuple[list[Any], list[Any]]]:
    pairs: dict[str, tuple[list[Any], list[Any]]] = defaultdict(lambda: ([], []))
    for r in _audited(records):
        eng = str(_field(r, "engine"))
        if eng in (engine, reference):
            pairs[str(_field(r, "prompt_id"))][0 if eng == engine else 1].append(r)
    return {pid: sides for pid, sides in sorted(pairs.items()) if sides[0] and sides[1]}


def _first_token_pvalue(categories: list[Any], labels: np.ndarray, stats: np.ndarray, n_resamples: int) -> tuple[float, str]:
    """Asymptotic χ² for G when every expected count is ≥ 5 (Cochran), permutation otherwise."""
    values, counts = np.unique(np.asarray(categories), return_counts=True)
    n, n_a = labels.shape[1], int(labels[0].sum())
    if values.size < 2:
        return 1.0, "degenerate (one category)"
    expected_min = counts.min() * min(n_a, n - n_a) / n
    if expected_min >= 5:
        return float(_st.chi2.sf(stats[0], values.size - 1)), "asymptotic chi2"
    return _permutation_pvalue(stats), f"permutation ({n_resamples})"


def two_sample(
    records: Iterable[Any],
    scores: TokenScores | pd.DataFrame | None = None,
    *,
    engine: str = SPECULATIVE_ENGINE,
    reference: str = CONTROL_ENGINE,
    by: Sequence[str] | None = None,
    alpha: float = 0.05,
    n_resamples: int = 999,
    seed: int = 0,
) -> TwoSample:
    """Compare `engine`'s outputs with `reference`'s on the prompts both decoded.

    Per prompt: first output token (G-test), output length and sequence log-likelihood under
    the warped target (two-sample Anderson–Darling; the latter needs `scores` of both
    engines), unigram+bigram profiles (L1 distance). One set of within-prompt label
    permutations serves all four statistics. `by` lists attribute dimensions for group results.
    """
    records = list(records)
    prompts = _split_by_prompt(records, engine, reference)
    if not prompts:
        raise InputError(f"no prompt has records of both {engine!r} and {reference!r}; run both engines on the same prompts")
    loglik: dict[str, float] | None = None
    if scores is not None:
        frame = _frame(scores)
        loglik = (-frame.groupby("key")["surprisal"].sum()).to_dict()
    rng = np.random.default_rng(seed)
    per_prompt: dict[str, dict[str, np.ndarray]] = {}
    rows = []
    attributes: dict[str, Mapping[str, Any]] = {}
    for pid, (mine, theirs) in prompts.items():
        items = mine + theirs
        attributes[pid] = _field(items[0], "attributes") or {}
        labels = _permuted_labels(len(mine), len(items), n_resamples, rng)
        outputs = [list(_field(r, "output_token_ids") or []) for r in items]
        firsts = [o[0] if o else -1 for o in outputs]  # -1: empty output, a category of its own
        stats = {
            "first_token": _g_statistic(firsts, labels),
            "length": _ad_statistic([len(o) for o in outputs], labels),
            "ngram": _ngram_statistic(outputs, labels),
        }
        if loglik is not None:
            keys = [str(_field(r, "key")) for r in items]
            missing = [k for k, o in zip(keys, outputs) if o and k not in loglik]
            if missing:
                raise InputError(f"scores lack record {missing[0]!r} (and {len(missing) - 1} more); score both engines' records")
            stats["loglik"] = _ad_statistic([loglik.get(k, 0.0) for k in keys], labels)
        per_prompt[pid] = stats
        for name, values in stats.items():
            if name == "first_token":
                p, method = _first_token_pvalue(firsts, labels, values, n_resamples)
            else:
                p, method = _permutation_pvalue(values), f"permutation ({n_resamples})"
            rows.append(
                {
                    "prompt_id": pid,
                    "test": name,
                    "statistic": float(values[0]),
                    "pvalue": p,
                    "method": method,
                    "n_engine": len(mine),
                    "n_reference": len(theirs),
                }
            )
    by_prompt = pd.DataFrame(rows, columns=["prompt_id", "test", "statistic", "pvalue", "method", "n_engine", "n_reference"])
    # A prompt with one sample a side has p = 1 by construction: it is no evidence, so not listed.
    by_prompt = by_prompt[by_prompt["n_engine"] + by_prompt["n_reference"] > 2].reset_index(drop=True)
    by_prompt["qvalue"] = bh(by_prompt["pvalue"].to_numpy(float)) if len(by_prompt) else []
    by_prompt["flagged"] = by_prompt["qvalue"] < alpha

    def sides(pids: Sequence[str]) -> list[tuple[int, int]]:
        return [(len(prompts[p][0]), len(prompts[p][1])) for p in pids]

    def combined(pids: Sequence[str]) -> dict[str, StatTestResult]:
        out = {}
        if _cannot_reject(sides(pids), alpha) is not None:
            return out
        for name in TWO_SAMPLE_TESTS:
            parts = [per_prompt[p][name] for p in pids if name in per_prompt[p]]
            if not parts:
                continue
            total = np.sum(parts, axis=0)
            n = sum(len(prompts[p][0]) + len(prompts[p][1]) for p in pids)
            out[name] = StatTestResult(
                name, float(total[0]), _permutation_pvalue(total), n, alpha, f"stratified permutation ({n_resamples})"
            )
        return out

    not_run_reason = _cannot_reject(sides(list(prompts)), alpha)
    tests = combined(list(prompts))
    gate = _gate_table(tests, TWO_SAMPLE_TESTS, alpha)
    group_rows = []
    for dim in by or ():
        levels: dict[Any, list[str]] = defaultdict(list)
        for pid in prompts:
            if dim in attributes[pid]:
                levels[attributes[pid][dim]].append(pid)
        for level, pids in sorted(levels.items(), key=lambda kv: str(kv[0])):
            for name, result in combined(pids).items():
                group_rows.append(
                    {"dimension": dim, "group": level, "test": name, "n": result.n, "statistic": result.statistic, "pvalue": result.pvalue}
                )
    by_group = pd.DataFrame(group_rows, columns=["dimension", "group", "test", "n", "statistic", "pvalue"])
    by_group["qvalue"] = bh(by_group["pvalue"].to_numpy(float)) if len(by_group) else []
    by_group["flagged"] = by_group["qvalue"] < alpha
    return TwoSample(engine, reference, alpha, len(prompts), tests, gate, by_prompt, by_group, not_run_reason)
