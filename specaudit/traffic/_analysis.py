"""Per-group acceptance and latency per token from the store's sums, and the anytime-valid checks.

Two kinds of check, per group and metric, all in one Holm family:

- `disparity`: the group against the other groups, on the group's own mix of strata (prompt and
  output length, sampling setting, load). Alert when the confidence sequence shows acceptance
  below `band_low` times the others' (latency per token above 1 / band_low times theirs).
- `drift`: the group since the baseline against the group in the baseline (the first requests
  of the store), on the same strata. Alert when acceptance fell by more than `min_change`
  (latency per token rose by more than that).

A gap that comes only from longer prompts (or longer outputs, hotter sampling, busier times) is
compared within strata and vanishes; the unadjusted ratio is reported beside it to say what the
adjustment changed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from specaudit.traffic._estimate import FIELDS, Sums, compare, overall
from specaudit.traffic._rollup import METRIC_COLUMNS, STRATA
from specaudit.traffic._sequential import DEFAULT_TAU, holm, one_sided_p, radius

METRICS = tuple(METRIC_COLUMNS)
# Which way is worse: acceptance falling, latency per token rising.
WORSE_BELOW = {"acceptance": True, "latency_per_token": False}
Z95 = 1.959963984540054


@dataclass(frozen=True)
class GroupSummary:
    group: str
    requests: int
    metric: str
    rate: float | None  # unadjusted: Σy / Σx over the group's requests
    ci_low: float | None  # 95% (fixed-sample) interval, requests as clusters
    ci_high: float | None
    crude_ratio: float | None  # the group's rate over the other groups', unadjusted
    adjusted_ratio: float | None  # the same on the group's mix of strata
    ratio_low: float | None  # anytime-valid (1 - alpha) confidence sequence of adjusted_ratio
    ratio_high: float | None
    overlap: float | None  # share of the group's denominator in strata the others have too

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Check:
    kind: str  # "disparity" or "drift"
    group: str
    metric: str
    ratio: float | None  # adjusted ratio (group / others, or since baseline / baseline)
    crude_ratio: float | None
    low: float | None  # anytime-valid confidence sequence of ratio
    high: float | None
    threshold: float
    p_value: float
    alert: bool

    @property
    def message(self) -> str:
        what = "acceptance" if self.metric == "acceptance" else "latency per token"
        against = "the other groups' (same strata)" if self.kind == "disparity" else "its baseline's (same strata)"
        shown = "n/a" if self.ratio is None else f"{self.ratio:.3f}x"
        bounds = "" if self.low is None else f" [{self.low:.3f}, {self.high:.3f}]"
        crude = "" if self.crude_ratio is None else f"; unadjusted {self.crude_ratio:.3f}x"
        return f"{self.group}: {what} {shown}{bounds} of {against}{crude}; threshold {self.threshold:.3f}x, anytime p = {self.p_value:.2g}"

    def to_dict(self) -> dict:
        return {**asdict(self), "message": self.message}


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def group_sums(frame: pd.DataFrame, metric: str, periods: tuple[int, ...], strata: tuple[str, ...] = STRATA) -> tuple[list[str], Sums]:
    """(group names, Sums of shape (groups, strata)) of `metric` over the rows of `periods`; `strata`
    the columns adjusted for (none: one stratum, no adjustment)."""
    frame = frame.assign(_all=0)
    strata = tuple(strata) or ("_all",)
    rows = frame[frame["period"].isin(periods)]
    distinct = frame[list(strata)].drop_duplicates()
    # pivot_table gives plain columns for one stratum column, a MultiIndex for several.
    keys = pd.Index(distinct[strata[0]]) if len(strata) == 1 else pd.MultiIndex.from_frame(distinct)
    groups = sorted(frame["grp"].astype(str).unique())
    arrays = {}
    for field in FIELDS:
        column = f"{metric}_{field}"
        table = rows.assign(grp=rows["grp"].astype(str)).pivot_table(index="grp", columns=list(strata), values=column, aggfunc="sum")
        table = table.reindex(index=groups, columns=keys, fill_value=0).fillna(0)
        arrays[field] = table.to_numpy(dtype=float)
    return groups, Sums(**arrays)


def summaries(
    frame: pd.DataFrame, *, alpha: float = 0.05, tau: float = DEFAULT_TAU, strata: tuple[str, ...] = STRATA
) -> list[GroupSummary]:
    """Per group and metric, over all stored requests: the rate with a 95% interval, and the ratio to the other groups."""
    out = []
    requests = frame.assign(grp=frame["grp"].astype(str)).groupby("grp")["n"].sum()
    for metric in METRICS:
        groups, sums = group_sums(frame, metric, (0, 1), strata)
        own = overall(sums)
        rest = Sums(*(getattr(sums, f).sum(axis=0, keepdims=True) - getattr(sums, f) for f in FIELDS))
        cmp = compare(sums, rest)
        half = radius(cmp.se, alpha, tau=tau)
        for i, group in enumerate(groups):
            rate, se = own.rate[i], own.se[i]
            out.append(
                GroupSummary(
                    group=group,
                    requests=int(requests.get(group, 0)),
                    metric=metric,
                    rate=_finite(rate),
                    ci_low=_finite(rate - Z95 * se),
                    ci_high=_finite(rate + Z95 * se),
                    crude_ratio=_finite(np.exp(cmp.crude_log_ratio[i])) if len(groups) > 1 else None,
                    adjusted_ratio=_finite(np.exp(cmp.log_ratio[i])) if len(groups) > 1 else None,
                    ratio_low=_finite(np.exp(cmp.log_ratio[i] - half[i])) if len(groups) > 1 else None,
                    ratio_high=_finite(np.exp(cmp.log_ratio[i] + half[i])) if len(groups) > 1 else None,
                    overlap=_finite(cmp.overlap[i]) if len(groups) > 1 else None,
                )
            )
    return out


def _checks_of(kind: str, metric: str, groups: list[str], cmp: object, threshold: float, alpha: float, tau: float) -> list[dict]:
    below = WORSE_BELOW[metric]
    p = one_sided_p(cmp.log_ratio, cmp.se, math.log(threshold), below=below, tau=tau)
    half = radius(cmp.se, alpha, tau=tau)
    return [
        {
            "kind": kind,
            "group": group,
            "metric": metric,
            "ratio": _finite(np.exp(cmp.log_ratio[i])),
            "crude_ratio": _finite(np.exp(cmp.crude_log_ratio[i])),
            "low": _finite(np.exp(cmp.log_ratio[i] - half[i])),
            "high": _finite(np.exp(cmp.log_ratio[i] + half[i])),
            "threshold": threshold,
            "p_value": float(p[i]),
        }
        for i, group in enumerate(groups)
    ]


def checks(
    frame: pd.DataFrame,
    *,
    alpha: float = 0.05,
    band_low: float = 0.8,
    min_change: float = 0.10,
    drift: bool = True,
    tau: float = DEFAULT_TAU,
    strata: tuple[str, ...] = STRATA,
) -> list[Check]:
    """Disparity (and, with a baseline, drift) checks of every group and metric; Holm across all of them."""
    found: list[dict] = []
    for metric in METRICS:
        below = WORSE_BELOW[metric]
        groups, sums = group_sums(frame, metric, (0, 1), strata)
        if len(groups) > 1:
            rest = Sums(*(getattr(sums, f).sum(axis=0, keepdims=True) - getattr(sums, f) for f in FIELDS))
            found += _checks_of("disparity", metric, groups, compare(sums, rest), band_low if below else 1 / band_low, alpha, tau)
        if drift:
            groups, base = group_sums(frame, metric, (0,), strata)
            _, recent = group_sums(frame, metric, (1,), strata)
            found += _checks_of("drift", metric, groups, compare(recent, base), 1 - min_change if below else 1 + min_change, alpha, tau)
    if not found:
        return []
    rejected = holm(np.array([c["p_value"] for c in found]), alpha)
    return [Check(**c, alert=bool(r)) for c, r in zip(found, rejected)]
