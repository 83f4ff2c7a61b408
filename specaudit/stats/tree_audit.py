"""Unit-level audit of tree and staged verification rules: `audit_sampler`'s counterpart.

The cases are `audit_sampler`'s (p, q) families, read as a language model whose distributions
depend on the depth only: p_j is the target's distribution at depth j (rows 1..D+1), q_j the
draft's (rows 1..D). A tree rule is run on trees of a given shape whose children the harness
draws from q_j as the rule declares (i.i.d., or the top-k); a staged rule on a small draft q₁ =
the family's q and a medium q₂ = (p + q₁)/2 between draft and target.

Why the test is exact, as in `audit_sampler`: the children of a node are drawn independently of
everything verified above it, and the verification at a node uses fresh randomness, so under an
exact rule the token emitted at depth j, given that depth j was reached, follows p_j whatever
happened above; and whether depth j is reached is decided by the randomness of depths < j. So the
tokens emitted at depth j over the trials that reached it are i.i.d. from p_j, and each
(case, depth) gets `audit_sampler`'s two goodness-of-fit tests against p_j (one bin per token
pooled to a minimum expected count; bins along the likelihood ratio q_j/p_j), planned from the
expected reach of an exact rule only (never from the counts), plus one pooled mid-PIT z-test over
every depth and case. One family, Holm at `alpha`; a token with p_j = 0 fails outright.

A rule that is lossy by design (Medusa's typical acceptance) fails this audit as it should; the
result carries the rule's label so that a report says "lossy by design", not "broken".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from specaudit.contracts.status import CheckStatus
from specaudit.decoding._shapes import parse_branching
from specaudit.decoding.staged import REFERENCE_STAGED, StagedRule, staged_step
from specaudit.decoding.tree import TokenTree, TreeRule, draw_children, verify_tree
from specaudit.decoding.verify import residual_distribution
from specaudit.errors import InputError
from specaudit.stats.sampler_audit import FAMILIES, _draw_cases, _holm, _pooled_test

__all__ = ["TreeAuditResult", "audit_staged", "audit_tree", "tree_acceptance"]


@dataclass(frozen=True, eq=False)
class TreeAuditResult:
    """Outcome of `audit_tree` / `audit_staged`: the family-wise p-value (smallest Holm-adjusted;
    0 on an impossible token), the verdict at alpha, the rule's name and whether it is lossy by
    design, and one table row per test (family, vocab, depth, test, n, bins, statistic, pvalue,
    pvalue_holm, impossible)."""

    rule: str
    lossy_by_design: bool
    pvalue: float
    verdict: CheckStatus
    alpha: float
    table: pd.DataFrame = field(repr=False)
    impossible: int
    trials: int
    samples: int
    seconds: float

    @property
    def passed(self) -> bool:
        return self.verdict is CheckStatus.PASS

    @property
    def finding(self) -> str:
        """What a FAIL means for this rule: "lossy by design" for a rule that never claimed exactness."""
        if self.passed:
            return "no violation found"
        return "lossy by design" if self.lossy_by_design else "broken"


def tree_acceptance(p: torch.Tensor, q: torch.Tensor, count: int, children: str) -> float:
    """Probability that an exact rule accepts one of `count` children at a node: i.i.d. children,
    1 − Π (1 − Σ min(r_i, q)) along the residual chain r_1 = p, r_{i+1} = norm(max(0, r_i − q));
    top-k children, the target mass of the draft's top `count` tokens."""
    p64, q64 = p.double() / p.double().sum(), q.double()
    if children == "top-k":
        top = torch.sort(q64, descending=True, stable=True).indices[:count]
        return float(p64[top].sum())
    residual, none = p64, 1.0
    for _ in range(count):
        none *= 1.0 - float(torch.minimum(residual, q64).sum())
        residual = residual_distribution(residual, q64)
    return 1.0 - none


def _depth_rows(
    family: str,
    vocab: int,
    emitted: np.ndarray,
    lengths: np.ndarray,
    p_all: np.ndarray,
    ratio_q: np.ndarray,
    reach_probs: Sequence[float],
    trials: int,
    min_expected: float,
    ratio_bins: int,
) -> tuple[list[dict], int, int, tuple[float, float, int]]:
    """Tests of one case: per depth j, the tokens emitted there against p_j."""
    rows, impossible_total, samples = [], 0, 0
    pit_sum = pit_var = 0.0
    pit_n = 0
    depth_count = p_all.shape[0]
    expected_reach = float(trials)
    for j in range(depth_count):
        planned = expected_reach >= 2 * min_expected
        if j < len(reach_probs):
            expected_reach *= reach_probs[j]
        column = emitted[lengths > j, j]
        n = len(column)
        samples += n
        p = p_all[j] / p_all[j].sum()
        inside = (column >= 0) & (column < vocab)
        ids = column[inside]
        impossible = int((~inside).sum() + (p[ids] == 0).sum())
        impossible_total += impossible
        base = dict(family=family, vocab=vocab, depth=j + 1, n=n, impossible=impossible)
        if impossible:
            rows.append({**base, "test": "impossible", "bins": 0, "statistic": np.inf, "pvalue": 0.0})
            continue
        support = np.flatnonzero(p > 0)
        tests = {"tokens": (support[np.argsort(-p[support], kind="stable")], min_expected)}
        if j < ratio_q.shape[0] and n:
            q = ratio_q[j] / ratio_q[j].sum()
            order = support[np.argsort(q[support] / p[support], kind="stable")]
            tests["ratio"] = (order, max(min_expected, n / ratio_bins))
            mid = np.zeros(vocab)
            mid[order] = np.cumsum(p[order]) - p[order] / 2.0
            pit_sum += float((mid[ids] - 0.5).sum())
            pit_var += n * float((p * mid**2).sum() - 0.25)
            pit_n += n
        if not planned:
            continue
        observed = np.bincount(ids, minlength=vocab).astype(float)
        for test, (order, bin_size) in tests.items():
            statistic, bins, pvalue = _pooled_test(observed, n * p, order, bin_size)
            rows.append({**base, "test": test, "bins": bins, "statistic": statistic, "pvalue": pvalue})
    return rows, impossible_total, samples, (pit_sum, pit_var, pit_n)


def _finish(
    rule: str,
    lossy: bool,
    rows: list[dict],
    pit: list[tuple[float, float, int]],
    impossible: int,
    trials: int,
    samples: int,
    alpha: float,
    started: float,
) -> TreeAuditResult:
    from scipy import stats as _scipy_stats

    total, variance, n = (sum(x[i] for x in pit) for i in range(3))
    z = total / variance**0.5 if variance > 0 else 0.0
    pooled = float(2.0 * _scipy_stats.norm.sf(abs(z))) if variance > 0 else 1.0
    rows.append(dict(family="all", vocab=0, depth=0, n=n, impossible=0, test="ratio-pit", bins=0, statistic=z, pvalue=pooled))
    table = pd.DataFrame(rows)
    table["pvalue_holm"] = _holm(table["pvalue"].to_numpy(float))
    pvalue = 0.0 if impossible else float(table["pvalue_holm"].min())
    verdict = CheckStatus.FAIL if pvalue <= alpha else CheckStatus.PASS
    return TreeAuditResult(rule, lossy, pvalue, verdict, alpha, table, impossible, trials, samples, time.perf_counter() - started)


def _check(trials: int, alpha: float, families: Sequence[str] | str | None) -> list[str]:
    if not (isinstance(trials, int) and trials >= 1):
        raise InputError(f"trials must be an integer >= 1, got {trials!r}")
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must be in (0, 1), got {alpha!r}")
    chosen = list(FAMILIES if families is None else ([families] if isinstance(families, str) else families))
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise InputError(f"unknown sampler-audit families {unknown or chosen!r}; choose from {', '.join(FAMILIES)}")
    return chosen


def _run_trials(trials: int, step: Callable[[], list[int]], width: int) -> tuple[np.ndarray, np.ndarray]:
    emitted = np.zeros((trials, width), dtype=np.int64)
    lengths = np.zeros(trials, dtype=np.int64)
    for trial in range(trials):
        out = step()
        if not 1 <= len(out) <= width:
            raise InputError(f"the rule emitted {len(out)} tokens in one step; a tree of depth {width - 1} emits 1 to {width}")
        emitted[trial, : len(out)] = out
        lengths[trial] = len(out)
    return emitted, lengths


@dataclass(frozen=True)
class _CasePlan:
    """How one case is run and tested: the step that emits one trial's tokens (at most `width`),
    the target's rows p_j, the proposal rows the ratio bins follow, and per depth the probability
    that an exact rule accepts there (which tests are planned)."""

    step: Callable[[], list[int]]
    width: int
    target: torch.Tensor
    proposal: torch.Tensor
    reach: list[float]


def _audit_cases(
    rule: str,
    lossy: bool,
    depth: int,
    plan: Callable[[Any, torch.Generator], _CasePlan],
    *,
    vocab_size: int,
    trials: int,
    seed: int,
    families: Sequence[str] | str | None,
    alpha: float,
    large_vocab_sizes: Sequence[int],
    large_vocab_trials: int | None,
    min_expected: float,
    ratio_bins: int,
) -> TreeAuditResult:
    """Draw the cases (`depth` positions each), run every case's trials (large-vocabulary cases
    `large_vocab_trials`, default trials // 4), test the tokens at each depth and combine the
    tests into one verdict."""
    chosen = _check(trials, alpha, families)
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    cases = _draw_cases(chosen, vocab_size, depth, tuple(large_vocab_sizes), rng, torch.device("cpu"))
    large_trials = large_vocab_trials or max(1, trials // 4)
    rows, pit, impossible, total_trials, samples = [], [], 0, 0, 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: intra-op threads only add hand-off cost (as audit_sampler)
    try:
        for case in cases:
            case_trials = large_trials if case.family == "large-vocab" else trials
            run = plan(case, torch.Generator().manual_seed(int(rng.integers(2**62))))
            emitted, lengths = _run_trials(case_trials, run.step, run.width)
            case_rows, bad, n, case_pit = _depth_rows(
                case.family,
                case.vocab_size,
                emitted,
                lengths,
                run.target.double().numpy(),
                run.proposal.double().numpy(),
                run.reach,
                case_trials,
                min_expected,
                ratio_bins,
            )
            rows += case_rows
            pit.append(case_pit)
            impossible += bad
            samples += n
            total_trials += case_trials
    finally:
        torch.set_num_threads(threads)
    return _finish(rule, lossy, rows, pit, impossible, total_trials, samples, alpha, started)


class _LazyTree:
    """A tree of the given shape whose children are drawn when a rule first reads them. The
    distributions depend on the depth only, so drawing the subtrees a walk never enters or
    leaving them undrawn gives the walk the same law; it saves drawing 15 nodes to read 3."""

    def __init__(self, shape: Sequence[int], draft_probs: torch.Tensor, children: str, generator: torch.Generator) -> None:
        self.shape, self.draft_probs, self.mode, self.generator = shape, draft_probs, children, generator
        self.tree = TokenTree()
        self.drawn: set[int] = set()
        self.children = self  # verify_tree reads tree.children[node] and tree.tokens[child]
        self.tokens = self.tree.tokens
        self.depths = self.tree.depths

    def __getitem__(self, node: int) -> list[int]:
        if node not in self.drawn:
            self.drawn.add(node)
            depth = self.tree.depths[node]
            if depth < len(self.shape):
                for token in draw_children(self.draft_probs[depth], self.shape[depth], self.mode, self.generator):
                    self.tree.add(node, token)
        return self.tree.children[node]


def audit_tree(
    rule: TreeRule,
    *,
    branching: str | Sequence[int] = (3, 2, 1),
    vocab_size: int = 64,
    trials: int = 400,
    seed: int = 0,
    families: Sequence[str] | str | None = None,
    alpha: float = 0.05,
    large_vocab_sizes: Sequence[int] = (8193, 151936),
    large_vocab_trials: int | None = None,
    min_expected: float = 10.0,
    ratio_bins: int = 8,
) -> TreeAuditResult:
    """Test that a tree rule emits exactly the target's distribution (module docstring): `trials`
    trees of shape `branching` per case (large-vocabulary cases `large_vocab_trials`, default
    trials // 4), children drawn as `rule.children` says."""
    shape = parse_branching(branching)

    def plan(case: Any, generator: torch.Generator) -> _CasePlan:
        p, q = case.target_probs, case.draft_probs

        def step() -> list[int]:
            tree = _LazyTree(shape, q, rule.children, generator)
            return verify_tree(tree, q, p, rule, generator, rows=tree.depths).emitted

        reach = [tree_acceptance(p[j], q[j], count, rule.children) for j, count in enumerate(shape)]
        return _CasePlan(step, len(shape) + 1, p, q, reach)

    return _audit_cases(
        rule.name,
        rule.lossy_by_design,
        len(shape),
        plan,
        vocab_size=vocab_size,
        trials=trials,
        seed=seed,
        families=families,
        alpha=alpha,
        large_vocab_sizes=large_vocab_sizes,
        large_vocab_trials=large_vocab_trials,
        min_expected=min_expected,
        ratio_bins=ratio_bins,
    )


def audit_staged(
    rule: StagedRule = REFERENCE_STAGED,
    *,
    k: int = 4,
    k_small: int = 2,
    vocab_size: int = 64,
    trials: int = 400,
    seed: int = 0,
    families: Sequence[str] | str | None = None,
    alpha: float = 0.05,
    large_vocab_sizes: Sequence[int] = (8193, 151936),
    large_vocab_trials: int | None = None,
    min_expected: float = 10.0,
    ratio_bins: int = 8,
) -> TreeAuditResult:
    """Test that a staged rule emits exactly the target's distribution: per case, a small draft
    q₁ (the family's q), a medium q₂ = (p + q₁)/2 building a chain of `k` tokens in rounds of
    `k_small`, and the target's check; tokens at each position against p_j."""
    if not (isinstance(k, int) and k >= 1 and isinstance(k_small, int) and k_small >= 1):
        raise InputError(f"k and k_small must be integers >= 1, got {k!r} and {k_small!r}")

    def plan(case: Any, generator: torch.Generator) -> _CasePlan:
        p, small = case.target_probs, case.draft_probs
        medium = (p[:k] + small) / 2.0
        reach = [float(torch.minimum(p[j].double(), medium[j].double()).sum()) for j in range(k)]
        return _CasePlan(lambda: staged_step(small, medium, p, k_small, generator, rule).tolist(), k + 1, p, medium, reach)

    return _audit_cases(
        rule.name,
        False,
        k,
        plan,
        vocab_size=vocab_size,
        trials=trials,
        seed=seed,
        families=families,
        alpha=alpha,
        large_vocab_sizes=large_vocab_sizes,
        large_vocab_trials=large_vocab_trials,
        min_expected=min_expected,
        ratio_bins=ratio_bins,
    )
