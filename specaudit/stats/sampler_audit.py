"""Unit-level audit of a rejection-sampling (verify) function.

The audit feeds a verify function fixed target/draft distributions and checks that what it
emits follows the target exactly. Why the test is exact: the per-position distributions of a
case do not depend on what was emitted earlier, so whether drafted position j is reached at all
is decided only by the randomness of positions < j, while the token emitted at j depends only on
the randomness of position j (the draft token the harness sampled from q_j, the verifier's
uniform and its correction draw). Under a correct sampler the tokens emitted at position j over
the trials that reached it are therefore i.i.d. from p_j, whatever happened before, and so is
the bonus token (position k+1, from p_{k+1}). Every emitted token is tested exactly once, and
the tests of different positions and cases are independent given their sample sizes.

Each (case, position) gets goodness-of-fit tests against p_j, with bins fixed before looking
at the counts:

- ``tokens``: one bin per token, tokens with small expected counts pooled (in order of p_j) so
  that every bin expects at least ``min_expected`` counts; catches any large deviation.
- ``ratio`` (drafted positions only): tokens ordered by the likelihood ratio q_j/p_j and cut into
  a few bins of equal target mass. Almost every sampler bug moves mass toward or away from the
  draft, i.e. along this ratio, so this test keeps its power where the per-token test spreads it
  over many degrees of freedom.

Both use the Cressie–Read power divergence (λ = 1/2) with its χ² limit, see `_pooled_test`.
One more test pools every drafted token of the audit (``ratio-pit``, family "all"): the mid-PIT
of each token along the q/p ordering has mean exactly 1/2 under p, so a z-test on its sum adds
up small but consistent pulls toward (or away from) the draft across all cases and positions.

An emitted token with p_j = 0, or an id outside the vocabulary, is impossible under a correct
sampler: it is a hard failure (p-value 0), so it never raises a false alarm. So is rejecting a
drafted token with p_j(x) >= q_j(x): the rule u·q < p accepts it for every u < 1. That is the
signature of a ratio computed with another q than the one the draft sampled from (a bf16/fp32
mismatch rejects tokens of identical p and q) or of a wrong acceptance rule, and it shows long
before the emitted distribution moves measurably.

All tests form one family; the verdict rejects when any Holm-adjusted p-value is <= alpha, and
the overall p-value is the smallest Holm-adjusted one (= Bonferroni on the smallest p-value).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from scipy import stats as _scipy_stats

from specaudit.contracts.status import CheckStatus
from specaudit.decoding.verify import VerifyFn
from specaudit.decoding.warping import SamplingSpec, warp
from specaudit.errors import InputError

__all__ = ["FAMILIES", "SamplerAuditResult", "audit_sampler"]

FAMILIES: tuple[str, ...] = (
    "dirichlet",
    "independent",
    "peaked",
    "near-identical",
    "identical",
    "disjoint",
    "q-zero",
    "top-k",
    "top-p",
    "large-vocab",
)
"""(p, q) families drawn by the audit, in table order (see `audit_sampler`)."""

# Large vocabularies are audited on this many active tokens: enough to exercise sparse, scattered
# ids (including the last id, where padding bugs live) while keeping χ² counts usable.
_ACTIVE_TOKENS = 256
_DIRICHLET_CONCENTRATIONS = (0.3, 1.0, 3.0)


@dataclass(frozen=True)
class _Case:
    family: str
    target_probs: torch.Tensor  # [k+1, V]
    draft_probs: torch.Tensor  # [k, V]

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[-1])


@dataclass(frozen=True, eq=False)
class SamplerAuditResult:
    """Outcome of `audit_sampler`.

    statistic:  the smallest per-test p-value (Tippett's statistic).
    pvalue:     family-wise adjusted p-value of the whole audit (smallest Holm-adjusted p-value;
                0 when an impossible or out-of-vocabulary token was emitted, or a draft with
                p >= q was rejected).
    verdict:    CheckStatus.FAIL when pvalue <= alpha (or any impossible token or rejection), else PASS.
    table:      one row per test: family, vocab, position (1..k drafted, k+1 bonus), kind, test
                ("tokens", "ratio", "impossible", "forced-accept"), n, bins, statistic, df, pvalue, pvalue_holm,
                impossible, out_of_vocab, beta (acceptance probability Σ min(p, q) there). The
                last row (family "all", position 0, test "ratio-pit") is the pooled z-test.
    worst:      the row with the smallest p-value, as a dict.
    impossible: emitted tokens with target probability 0 or ids outside the vocabulary.
    out_of_vocab: of those, ids < 0 or >= vocab size.
    impossible_rejections: rejected drafts with p >= q (a correct verifier accepts them).
    trials:     verify calls made; samples: emitted tokens checked; seconds: wall time.
    """

    statistic: float
    pvalue: float
    verdict: CheckStatus
    alpha: float
    table: pd.DataFrame = field(repr=False)
    worst: dict = field(repr=False)
    impossible: int
    out_of_vocab: int
    impossible_rejections: int
    trials: int
    samples: int
    seconds: float

    @property
    def passed(self) -> bool:
        return self.verdict is CheckStatus.PASS


# ---------------------------------------------------------------------------------------------
# (p, q) families


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def _perturb(p: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """A draft that resembles the target: log-normal noise on p (zeros of p stay zeros)."""
    return _normalise(p * np.exp(sigma * rng.standard_normal(p.shape)))


def _peaked(rows: int, size: int, rng: np.random.Generator, top: np.ndarray | None = None) -> np.ndarray:
    if top is None:
        top = rng.integers(size, size=rows)
    mass = rng.uniform(0.8, 0.97, size=rows)
    rest = rng.dirichlet(np.full(size, 0.5), size=rows) * (1.0 - mass)[:, None]
    rest[np.arange(rows), top] += mass
    return rest


def _warped(logits: np.ndarray, spec: SamplingSpec) -> np.ndarray:
    return warp(torch.from_numpy(logits), spec).double().numpy()


def _small_family(family: str, k: int, size: int, rng: np.random.Generator, concentration: float) -> tuple[np.ndarray, np.ndarray]:
    """Target [k+1, size] and draft [k, size] on `size` active tokens."""
    rows = k + 1
    if family == "dirichlet":
        p = rng.dirichlet(np.full(size, concentration), size=rows)
        return p, _perturb(p[:k], rng.uniform(0.3, 1.2), rng)
    if family == "independent":
        return rng.dirichlet(np.ones(size), size=rows), rng.dirichlet(np.ones(size), size=k)
    if family == "peaked":
        top = rng.integers(size, size=rows)
        same = rng.random(k) < 0.5
        draft_top = np.where(same, top[:k], rng.integers(size, size=k))
        return _peaked(rows, size, rng, top), _peaked(k, size, rng, draft_top)
    if family == "near-identical":
        p = rng.dirichlet(np.ones(size), size=rows)
        return p, _perturb(p[:k], 0.05, rng)
    if family == "identical":
        p = rng.dirichlet(np.ones(size), size=rows)
        return p, p[:k].copy()
    if family == "disjoint":
        half = max(1, size // 2)
        p = np.zeros((rows, size))
        q = np.zeros((k, size))
        p[:, :half] = rng.dirichlet(np.ones(half), size=rows)
        q[:, half:] = rng.dirichlet(np.ones(size - half), size=k)
        return p, q
    if family == "q-zero":
        p = rng.dirichlet(np.ones(size), size=rows)
        q = _perturb(p[:k], 0.5, rng)
        # the draft gives zero probability to a third of the tokens the target can emit
        drop = rng.random((k, size)) < 1.0 / 3.0
        drop[np.arange(k), q.argmax(axis=-1)] = False
        return p, _normalise(np.where(drop, 0.0, q))
    if family in ("top-k", "top-p"):
        spec = SamplingSpec(temperature=0.8, top_k=max(2, size // 8)) if family == "top-k" else SamplingSpec(temperature=1.2, top_p=0.8)
        logits = 2.0 * rng.standard_normal((rows, size))
        p = _warped(logits, spec)
        q = _warped(logits[:k] + 0.7 * rng.standard_normal((k, size)), spec)
        return p, q
    raise AssertionError(family)


def _embed(p: np.ndarray, q: np.ndarray, vocab_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Scatter distributions on a few active tokens over a large vocabulary, always using the
    last id (where off-by-one and padding bugs show)."""
    size = p.shape[-1]
    if size == vocab_size:
        return p, q
    ids = rng.choice(vocab_size - 1, size=size - 1, replace=False)
    ids = np.concatenate([ids, [vocab_size - 1]])
    big_p = np.zeros((p.shape[0], vocab_size))
    big_q = np.zeros((q.shape[0], vocab_size))
    big_p[:, ids] = p
    big_q[:, ids] = q
    return big_p, big_q


def _large_vocab(k: int, vocab_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A few hundred plausible tokens scattered over a large vocabulary, always including the
    last ids (as vLLM's vocab-boundary test does), under a real top-p mask.

    The other tokens stand for logits ~30 nats below these: their total mass (< 1e-7) lies far
    inside the 5% that top-p 0.95 cuts, so warping only the active tokens gives exactly the
    full-vocabulary result (zeros elsewhere) without sorting 150k logits per case."""
    rows = k + 1
    active = min(_ACTIVE_TOKENS, vocab_size)
    tail = min(4, active)
    ids = np.concatenate([rng.choice(vocab_size - tail, size=active - tail, replace=False), np.arange(vocab_size - tail, vocab_size)])
    spec = SamplingSpec(temperature=1.0, top_p=0.95)
    logits = 2.0 * rng.standard_normal((rows, active))
    logits[:, -tail:] += 2.0  # keep the last ids likely inside the top-p set
    p = np.zeros((rows, vocab_size))
    q = np.zeros((k, vocab_size))
    p[:, ids] = _warped(logits, spec)
    q[:, ids] = _warped(logits[:k] + 0.7 * rng.standard_normal((k, active)), spec)
    return p, q


def _draw_cases(
    families: Sequence[str], vocab_size: int, k: int, large_vocab_sizes: Sequence[int], rng: np.random.Generator, device: torch.device
) -> list[_Case]:
    cases: list[_Case] = []

    def add(family: str, p: np.ndarray, q: np.ndarray) -> None:
        # float32 is what samplers see; the audit's expectations use exactly these numbers
        cases.append(
            _Case(
                family,
                torch.as_tensor(_normalise(p), dtype=torch.float32, device=device),
                torch.as_tensor(_normalise(q), dtype=torch.float32, device=device),
            )
        )

    size = min(vocab_size, _ACTIVE_TOKENS)
    for family in families:
        if family == "large-vocab":
            for large in large_vocab_sizes:
                add("large-vocab", *_large_vocab(k, large, rng))
            continue
        concentrations = _DIRICHLET_CONCENTRATIONS if family == "dirichlet" else (1.0,)
        for concentration in concentrations:
            p, q = _small_family(family, k, size, rng, concentration)
            name = f"dirichlet({concentration:g})" if family == "dirichlet" else family
            add(name, *_embed(p, q, vocab_size, rng))
    return cases


# ---------------------------------------------------------------------------------------------
# running the sampler


def _run_case(verify: VerifyFn, case: _Case, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Emitted ids [trials, k+1] (padding after each trial's output is meaningless), the
    number of ids each trial emitted, and the drafted ids [trials, k]."""
    device = case.draft_probs.device
    k = case.draft_probs.shape[0]
    draft_gen = torch.Generator(device=device).manual_seed(int(rng.integers(2**62)))
    verify_gen = torch.Generator(device=device).manual_seed(int(rng.integers(2**62)))
    # drafts for every trial at once; position i's draft does not depend on earlier positions
    drafts = torch.multinomial(case.draft_probs, trials, replacement=True, generator=draft_gen).T.contiguous()
    emitted = np.zeros((trials, k + 1), dtype=np.int64)
    lengths = np.zeros(trials, dtype=np.int64)
    for trial in range(trials):
        out = verify(drafts[trial], case.draft_probs, case.target_probs, verify_gen)
        if not isinstance(out, torch.Tensor) or out.dim() != 1 or not (1 <= out.shape[0] <= k + 1):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise InputError(f"the verify function returned {shape} for k={k}; it must return a 1-D LongTensor of 1..k+1 token ids")
        if out.dtype.is_floating_point or out.dtype == torch.bool:
            raise InputError(f"the verify function returned dtype {out.dtype}; it must return integer token ids")
        ids = out.tolist()
        emitted[trial, : len(ids)] = ids
        lengths[trial] = len(ids)
    return emitted, lengths, drafts.cpu().numpy()


# ---------------------------------------------------------------------------------------------
# statistics


def _pooled_test(observed: np.ndarray, expected: np.ndarray, order: np.ndarray, bin_size: float) -> tuple[float, int, float]:
    """Goodness-of-fit over bins formed by walking tokens in `order` and closing a bin once its
    expected count reaches `bin_size` (a short last bin joins the one before).

    The statistic is the Cressie–Read power divergence with λ = 1/2 rather than Pearson's X²:
    the audit decides at Bonferroni-sized levels (~1e-4), and there Pearson's tail is up to 2-3x
    heavier than its χ² limit when a peaked target leaves one huge bin beside small ones, while
    λ = 1/2 stays within ~10% of it (measured on peaked and Dirichlet targets, bins >= 10).
    `observed` may carry leading axes (several samples at once). Returns (statistic, bins,
    pvalue); with fewer than two bins there is nothing to test (statistic 0, p-value 1)."""
    ordered_expected = expected[order]
    ends: list[int] = []
    accumulated = 0.0
    for index, value in enumerate(ordered_expected.tolist()):
        accumulated += value
        if accumulated >= bin_size:
            ends.append(index + 1)
            accumulated = 0.0
    if len(ends) < 2:
        return 0.0, 1, 1.0
    starts = [0, *ends[:-1]]  # the tokens after the last closed bin join that bin
    obs_bins = np.add.reduceat(observed[..., order], starts, axis=-1)
    exp_bins = np.add.reduceat(ordered_expected, starts)
    result = _scipy_stats.power_divergence(obs_bins, exp_bins, lambda_=0.5, axis=-1)
    if np.ndim(result.statistic) == 0:
        return float(result.statistic), len(starts), float(result.pvalue)
    return result.statistic, len(starts), result.pvalue


def _holm(pvalues: np.ndarray) -> np.ndarray:
    m = len(pvalues)
    order = np.argsort(pvalues, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate(pvalues[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adjusted
    return out


@dataclass
class _CaseSummary:
    """What one case adds to the audit besides its table rows."""

    impossible: int = 0
    out_of_vocab: int = 0
    impossible_rejections: int = 0
    samples: int = 0
    # pooled ratio-PIT over drafted positions: Σ(s - 1/2), Σ Var(s), count
    pit_sum: float = 0.0
    pit_var: float = 0.0
    pit_n: int = 0


def _row(
    case: _Case,
    position: int,
    kind: str,
    test: str,
    n: int,
    bins: int,
    statistic: float,
    pvalue: float,
    impossible: int,
    out_of_vocab: int,
    beta: float,
) -> dict:
    return dict(
        family=case.family,
        vocab=case.vocab_size,
        position=position,
        kind=kind,
        test=test,
        n=n,
        bins=bins,
        statistic=statistic,
        df=max(bins - 1, 0),
        pvalue=pvalue,
        impossible=impossible,
        out_of_vocab=out_of_vocab,
        beta=beta,
    )


def _case_rows(
    case: _Case, emitted: np.ndarray, lengths: np.ndarray, drafts: np.ndarray, *, min_expected: float, ratio_bins: int, trials: int
) -> tuple[list[dict], _CaseSummary]:
    p_all = case.target_probs.double().cpu().numpy()
    q_all = case.draft_probs.double().cpu().numpy()
    k = q_all.shape[0]
    vocab = case.vocab_size
    beta = np.minimum(p_all[:k], q_all).sum(axis=-1)
    rows: list[dict] = []
    summary = _CaseSummary()
    # the very numbers the verifier compared: a draft with p >= q cannot be rejected
    rejected = np.flatnonzero(lengths <= k)
    at = lengths[rejected] - 1
    token = drafts[rejected, at]
    forced = int((p_all[at, token] >= q_all[at, token]).sum())
    if forced:
        summary.impossible_rejections = forced
        rows.append(_row(case, 0, "drafted", "forced-accept", len(rejected), 0, float(forced), 0.0, 0, 0, float("nan")))
    expected_reach = float(trials)
    for j in range(k + 1):
        # Which tests run is fixed by the case and the budget alone (expected reach), never by the
        # counts, so the size of the test family does not depend on the data.
        planned = expected_reach >= 2 * min_expected
        if j < k:
            expected_reach *= beta[j]
        kind = "bonus" if j == k else "drafted"
        position_beta = float(beta[j]) if j < k else float("nan")
        column = emitted[lengths > j, j]
        n = len(column)
        p = p_all[j] / p_all[j].sum()
        in_vocab = (column >= 0) & (column < vocab)
        ids = column[in_vocab]
        out_of_vocab = int((~in_vocab).sum())
        impossible = out_of_vocab + int((p[ids] == 0).sum())
        summary.impossible += impossible
        summary.out_of_vocab += out_of_vocab
        summary.samples += n
        if impossible:
            # proof of a bug whatever the budget: p-value 0, and no χ² (counts no longer sum to n)
            tests = ("tokens", "ratio") if (planned and j < k) else ("tokens",) if planned else ("impossible",)
            for test in tests:
                rows.append(_row(case, j + 1, kind, test, n, 0, math.inf, 0.0, impossible, out_of_vocab, position_beta))
            continue
        support = np.flatnonzero(p > 0)
        ratio_order = None
        if j < k and n:
            q = q_all[j] / q_all[j].sum()
            ratio_order = support[np.argsort(q[support] / p[support], kind="stable")]
            # mid-PIT along the likelihood ratio: mean exactly 1/2 under p, larger when the
            # sampler leans toward the draft; pooled over every drafted token of the audit
            mid = np.zeros(vocab)
            ordered = p[ratio_order]
            mid[ratio_order] = np.cumsum(ordered) - ordered / 2.0
            summary.pit_sum += float((mid[ids] - 0.5).sum())
            summary.pit_var += n * float((p * mid**2).sum() - 0.25)
            summary.pit_n += n
        if not planned:
            continue
        observed = np.bincount(ids, minlength=vocab).astype(float)
        expected = n * p
        tests = {"tokens": (support[np.argsort(-p[support], kind="stable")], min_expected)}
        if ratio_order is not None:
            tests["ratio"] = (ratio_order, max(min_expected, n / ratio_bins))
        for test, (order, bin_size) in tests.items():
            statistic, bins, pvalue = _pooled_test(observed, expected, order, bin_size)
            rows.append(_row(case, j + 1, kind, test, n, bins, statistic, pvalue, 0, 0, position_beta))
    return rows, summary


def _pooled_pit_row(summaries: list[_CaseSummary]) -> dict:
    """One z-test over every drafted token of every case: Σ(s - 1/2) / sqrt(Σ Var s), two-sided.
    A sum of thousands of bounded, independent terms, so the normal tail is accurate even at
    Bonferroni-sized levels; this is where small but consistent pulls toward the draft add up."""
    total = sum(s.pit_sum for s in summaries)
    variance = sum(s.pit_var for s in summaries)
    n = sum(s.pit_n for s in summaries)
    z = total / math.sqrt(variance) if variance > 0 else 0.0
    pvalue = float(2.0 * _scipy_stats.norm.sf(abs(z))) if variance > 0 else 1.0
    return dict(
        family="all",
        vocab=0,
        position=0,
        kind="drafted",
        test="ratio-pit",
        n=n,
        bins=0,
        statistic=z,
        df=0,
        pvalue=pvalue,
        impossible=0,
        out_of_vocab=0,
        beta=float("nan"),
    )


def _check_inputs(
    verify: object,
    vocab_size: object,
    k: object,
    trials: object,
    alpha: object,
    families: Sequence[str] | str | None,
    large_vocab_sizes: Sequence[int],
    min_expected: float,
    ratio_bins: int,
) -> list[str]:
    if not callable(verify):
        raise InputError(
            f"verify must be a function verify(draft_tokens, draft_probs, target_probs, generator), got {type(verify).__name__}"
        )
    if not (isinstance(vocab_size, int) and vocab_size >= 2):
        raise InputError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
    if not (isinstance(k, int) and k >= 1):
        raise InputError(f"k (draft length) must be an integer >= 1, got {k!r}")
    if not (isinstance(trials, int) and trials >= 1):
        raise InputError(f"trials must be an integer >= 1, got {trials!r}")
    if not (0.0 < alpha < 1.0):
        raise InputError(f"alpha must be in (0, 1), got {alpha!r}")
    if any(not (isinstance(v, int) and v >= 2) for v in large_vocab_sizes):
        raise InputError(f"large_vocab_sizes must be integers >= 2, got {list(large_vocab_sizes)!r}")
    if min_expected <= 0 or ratio_bins < 2:
        raise InputError(f"min_expected must be > 0 and ratio_bins >= 2, got {min_expected!r} and {ratio_bins!r}")
    chosen = list(FAMILIES if families is None else ([families] if isinstance(families, str) else families))
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise InputError(f"unknown sampler-audit families {unknown or chosen!r}; choose from {', '.join(FAMILIES)}")
    return chosen


def audit_sampler(
    verify: VerifyFn,
    *,
    vocab_size: int = 64,
    k: int = 4,
    trials: int = 400,
    seed: int = 0,
    families: Sequence[str] | str | None = None,
    alpha: float = 0.05,
    device: str | torch.device = "cpu",
    large_vocab_sizes: Sequence[int] = (8193, 151936),
    large_vocab_trials: int | None = None,
    min_expected: float = 10.0,
    ratio_bins: int = 8,
) -> SamplerAuditResult:
    """Test that a verify function emits exactly the target distribution.

    For every (p, q) case drawn from `families` (all of `FAMILIES` by default: random Dirichlet
    at several concentrations, independent p and q, peaked, near-identical, identical, disjoint
    support, q = 0 where p > 0, top-k and top-p masks from `warp`, and large vocabularies of
    `large_vocab_sizes`), the harness samples draft tokens from q and calls `verify` `trials`
    times. The token emitted at each position j (given j was reached) and the bonus token are
    tested against p_j by χ² goodness-of-fit; see the module docstring for why this is exact.
    All tests are one family under Holm's rule at level `alpha`; any emitted token with target
    probability 0 or an id outside the vocabulary fails the audit outright.

    `vocab_size` is the vocabulary of every family except "large-vocab"; above 256 the
    distributions live on 256 scattered tokens, including the last id. Large-vocabulary cases
    run `large_vocab_trials` times (default trials // 4). `min_expected` is the smallest
    expected count of a χ² bin, `ratio_bins` the number of bins of the likelihood-ratio test.
    """
    chosen = _check_inputs(verify, vocab_size, k, trials, alpha, families, large_vocab_sizes, min_expected, ratio_bins)
    if large_vocab_trials is not None and not (isinstance(large_vocab_trials, int) and large_vocab_trials >= 1):
        raise InputError(f"large_vocab_trials must be an integer >= 1 (or None for trials // 4), got {large_vocab_trials!r}")
    device = torch.device(device)
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    cases = _draw_cases(chosen, vocab_size, k, tuple(large_vocab_sizes), rng, device)
    if large_vocab_trials is None:
        # a call on a 150k vocabulary costs ~15x one on 64 tokens; these cases are there for
        # boundaries and scale, the small ones carry most of the power
        large_vocab_trials = max(1, trials // 4)
    rows: list[dict] = []
    summaries: list[_CaseSummary] = []
    total_trials = 0
    # A verify call works on a few small tensors; on CPU, torch's intra-op threads only add
    # hand-off overhead there (measured 5x slower with 2 threads on a busy 2-core machine).
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        for case in cases:
            case_trials = large_vocab_trials if case.family == "large-vocab" else trials
            emitted, lengths, drafts = _run_case(verify, case, case_trials, rng)
            case_rows, summary = _case_rows(
                case, emitted, lengths, drafts, min_expected=min_expected, ratio_bins=ratio_bins, trials=case_trials
            )
            rows.extend(case_rows)
            summaries.append(summary)
            total_trials += case_trials
    finally:
        torch.set_num_threads(threads)
    rows.append(_pooled_pit_row(summaries))
    table = pd.DataFrame(rows)
    pvalues = table["pvalue"].to_numpy(dtype=float)
    table.insert(table.columns.get_loc("pvalue") + 1, "pvalue_holm", _holm(pvalues))
    impossible = sum(s.impossible for s in summaries)
    impossible_rejections = sum(s.impossible_rejections for s in summaries)
    worst_index = int(np.lexsort((-table["statistic"].abs().to_numpy(), pvalues))[0])
    proof = impossible > 0 or impossible_rejections > 0
    pvalue = 0.0 if proof else float(table["pvalue_holm"].min())
    verdict = CheckStatus.FAIL if (proof or pvalue <= alpha) else CheckStatus.PASS
    return SamplerAuditResult(
        statistic=float(pvalues.min()),
        pvalue=pvalue,
        verdict=verdict,
        alpha=alpha,
        table=table,
        worst={key: (value.item() if hasattr(value, "item") else value) for key, value in table.iloc[worst_index].items()},
        impossible=impossible,
        impossible_rejections=impossible_rejections,
        out_of_vocab=sum(s.out_of_vocab for s in summaries),
        trials=total_trials,
        samples=sum(s.samples for s in summaries),
        seconds=time.perf_counter() - started,
    )
