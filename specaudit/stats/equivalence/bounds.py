"""Equivalence bounds: upper confidence bounds on the total-variation (and KL) distance."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE
from specaudit.errors import InputError
from specaudit.stats._results import (
    SKIPPED,
    ConfidenceInterval,
)
from specaudit.stats.equivalence._common import (
    DIFFERENT,
    EQUIVALENT,
    NOT_SHOWN,
    _check_not_greedy,
    _one_engine,
)
from specaudit.stats.equivalence.token_tests import anderson_darling_uniform, pit_values
from specaudit.stats.equivalence.two_sample import (
    _g_statistic,
    _permutation_pvalue,
    _permuted_labels,
    _split_by_prompt,
)
from specaudit.stats.plugin_tv import SamplesToShow, samples_to_show
from specaudit.stats.scoring import TokenScores, _field


# ============================================================================ equivalence bounds
@dataclass(frozen=True)
class TVBound:
    """Upper confidence bound on the total-variation distance at one output position.

    The distance is the mean over prompts of TV(engine's distribution of the token at
    `position`, reference distribution): exactly the target's (white-box, from scores) or the
    reference engine's (black-box). `estimate` is the plug-in value, `upper` a 1−α upper bound
    (McDiarmid: valid at any vocabulary size and sample count, conservative because the plug-in
    is biased upward), `kl_upper` a bound on the mean KL(engine ‖ target) (first token,
    white-box only; see `tv_bound`). `pvalue` tests equality at that position. Verdict against
    the margin `delta`: "equivalent within delta" if upper ≤ δ, else "different" if p < α, else
    "not shown".
    """

    reference: str
    position: int
    estimate: float
    upper: float
    kl_upper: float
    pvalue: float
    n_samples: int
    n_prompts: int
    alpha: float
    delta: float | None = None
    to_show: SamplesToShow | None = None

    @property
    def statistic(self) -> float:
        return self.estimate

    def confidence_interval(self) -> ConfidenceInterval:
        """One-sided 1−α interval [0, upper]."""
        return ConfidenceInterval(0.0, self.upper)

    @property
    def verdict(self) -> str:
        if self.n_samples == 0:
            return SKIPPED
        if self.delta is not None and self.upper <= self.delta:
            return EQUIVALENT
        if np.isfinite(self.pvalue) and self.pvalue < self.alpha:
            return DIFFERENT
        return NOT_SHOWN

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "position": self.position,
            "estimate": self.estimate,
            "upper": self.upper,
            "kl_upper": self.kl_upper if math.isfinite(self.kl_upper) else None,
            "pvalue": self.pvalue if math.isfinite(self.pvalue) else None,
            "n_samples": self.n_samples,
            "n_prompts": self.n_prompts,
            "alpha": self.alpha,
            "delta": self.delta,
            "verdict": self.verdict,
            **({"samples_to_show": self.to_show.to_dict()} if self.to_show is not None else {}),
        }


def _mcdiarmid_margin(difference_bound: float, per_prompt_n: Sequence[float], alpha: float) -> float:
    """ε with P(mean_j TV̂_j ≤ E − ε) ≤ α when one sample of prompt j moves TV̂_j by at most
    difference_bound / n_j: ε = (c / P)·sqrt(log(1/α)/2 · Σ_j 1/n_j)."""
    n = np.asarray(per_prompt_n, dtype=float)
    return difference_bound / n.size * math.sqrt(math.log(1 / alpha) / 2 * float(np.sum(1 / n)))


def tv_bound(
    scores: TokenScores,
    *,
    engine: str | None = None,
    position: int = 0,
    delta: float | None = None,
    alpha: float = 0.05,
    seed: int = 0,
) -> TVBound:
    """White-box TV (and KL) upper bound between the engine's token at `position` and the target.

    Per prompt j with n_j records, TV̂_j = ½ Σ_x |#(x)/n_j − (1/n_j) Σ_i p_i(x)| where p_i is
    the warped target at record i's prefix (records that ended earlier contribute to neither
    side). Its expectation is at least the true pooled TV (convexity), and one record moves
    TV̂_j by ≤ 1/n_j at position 0 (the prefix is the prompt) or ≤ 2/n_j later (the prefix moves
    too), so McDiarmid gives the margin. KL (position 0): for s ≪ p on a support whose smallest
    probability is p_min, KL(s‖p) ≤ log(1 + χ²) ≤ log(1 + 2·TV²/p_min); averaged over prompts
    (concavity, TV² ≤ TV) ≤ log(1 + 2·upper/p_min). It is only finite-useful under top-k/top-p,
    where p_min is not astronomically small. `pvalue`: PIT (Anderson–Darling) of the tokens at
    that position, an exact test of equality.
    """
    if not isinstance(scores, TokenScores):
        raise InputError("tv_bound needs the TokenScores object from score_records (it uses position_mass)")
    _check_not_greedy(scores)
    frame, engine = _one_engine(scores.tokens, engine)
    mass = scores.position_mass[scores.position_mass["engine"] == engine]
    if len(mass) == 0 or position < 0:
        raise InputError(f"no per-position mass for engine {engine!r}; rescore with score_records")
    limit = int(mass["position"].max())
    if position > limit:
        raise InputError(f"position {position} is beyond the scored positions (≤ {limit}); rescore with a larger max_mass_position")
    n_records = mass.groupby("prompt_id")["n_records"].first()
    at = mass[mass["position"] == position]
    tv = {}
    for pid, n in n_records.items():
        rows = at[at["prompt_id"] == pid]
        if len(rows) == 0:
            tv[pid] = 0.0
            continue
        count, target_mass = rows["count"].to_numpy(float), rows["target_mass"].to_numpy(float)
        unseen = max(0.0, float(rows["n_reached"].iloc[0]) - target_mass.sum())
        tv[pid] = 0.5 * (np.abs(count - target_mass).sum() + unseen) / n
    estimate = float(np.mean(list(tv.values())))
    upper = min(1.0, estimate + _mcdiarmid_margin(1.0 if position == 0 else 2.0, n_records.to_numpy(), alpha))
    kl_upper = math.nan
    tokens_here = frame[frame["position"] == position]
    if position == 0 and len(tokens_here):
        if (tokens_here["p"] <= 0).any():
            kl_upper = math.inf
        else:
            p_min = float(tokens_here["p_min"].min())
            kl_upper = math.log1p(2 * upper / p_min)
    u = pit_values(frame.reset_index(drop=True), seed)[(frame["position"] == position).to_numpy()]
    pvalue = anderson_darling_uniform(u)[1] if u.size else math.nan
    if len(tokens_here) and (tokens_here["p"] <= 0).any():
        pvalue = 0.0  # an impossible token settles it
    to_show = None
    first = scores.first_token_null
    if position == 0 and delta is not None and first is not None and all(pid in first for pid in n_records.index):
        to_show = samples_to_show(np.stack([first[pid] for pid in n_records.index]), delta=delta, alpha=alpha)
    return TVBound("target", position, estimate, upper, kl_upper, pvalue, int(n_records.sum()), len(n_records), alpha, delta, to_show)


def tv_bound_two_sample(
    records: Iterable[Any],
    *,
    engine: str = SPECULATIVE_ENGINE,
    reference: str = CONTROL_ENGINE,
    position: int = 0,
    delta: float | None = None,
    alpha: float = 0.05,
    n_resamples: int = 999,
    seed: int = 0,
) -> TVBound:
    """Black-box TV upper bound between the engine's and the reference engine's token at
    `position` (records that ended earlier count as the category "ended"), mean over prompts.
    One sample moves TV̂_j by ≤ 1/n_j of its side, so ε = (1/P)·sqrt(log(1/α)/2 · Σ_j
    (1/n_engine,j + 1/n_reference,j)). `pvalue`: stratified permutation G-test at `position`."""
    prompts = _split_by_prompt(records, engine, reference)
    if not prompts:
        raise InputError(f"no prompt has records of both {engine!r} and {reference!r}; run both engines")

    def token_at(record: Any) -> int:
        out = _field(record, "output_token_ids") or []
        return int(out[position]) if position < len(out) else -1  # -1: ended before `position`

    rng = np.random.default_rng(seed)
    tv, inverse_n, g_total = [], 0.0, None
    n_samples = 0
    for mine, theirs in prompts.values():
        a, b = [token_at(r) for r in mine], [token_at(r) for r in theirs]
        ca, cb = Counter(a), Counter(b)
        tv.append(0.5 * sum(abs(ca[x] / len(a) - cb[x] / len(b)) for x in set(ca) | set(cb)))
        inverse_n += 1 / len(a) + 1 / len(b)
        n_samples += len(a)
        labels = _permuted_labels(len(a), len(a) + len(b), n_resamples, rng)
        g = _g_statistic(a + b, labels)
        g_total = g if g_total is None else g_total + g
    estimate = float(np.mean(tv))
    upper = min(1.0, estimate + math.sqrt(math.log(1 / alpha) / 2 * inverse_n) / len(tv))
    return TVBound(reference, position, estimate, upper, math.nan, _permutation_pvalue(g_total), n_samples, len(tv), alpha, delta)


def tv_bound_profile(
    scores: TokenScores,
    *,
    engine: str | None = None,
    max_position: int | None = None,
    alpha: float = 0.05,
    delta: float | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """`tv_bound` at every scored position (0..max_position), one row each."""
    _, engine = _one_engine(scores.tokens, engine)
    mass = scores.position_mass[scores.position_mass["engine"] == engine]
    last = int(mass["position"].max()) if len(mass) else -1
    last = last if max_position is None else min(last, max_position)
    rows = [tv_bound(scores, engine=engine, position=t, alpha=alpha, delta=delta, seed=seed).to_dict() for t in range(last + 1)]
    return pd.DataFrame(rows)
