"""The article's fallback rule on the traffic: "below X% acceptance, decode plainly", per group.

For each group: the share of its requests whose own acceptance was below the threshold (those the
rule would have routed to plain decoding), and what that would have cost or saved, by the cost
model in plain decoding steps that `analyze` and `mitigate` use (stats.cost_model): a plain request
of T output tokens costs T target steps; a speculative one costs S verification steps of v target
steps each plus k draft passes of c target steps each per step, S = proposed / k. The saving of
routing a request is its speculative cost minus its plain cost (positive: the rule saves time on
it). c and v are the machine's (measured by `specaudit analyze` beside a vanilla run); k the
server's drafts per step.

This judges the rule in hindsight, per request; a real router decides before the request runs,
from what it knows then (its group, its recent batch), so the figures are the best such a rule
could do.

`evaluate_policies` does the same for the per-group policies of `specaudit mitigate`
(mitigate.group_policy, not reimplemented): each group's per-position acceptance α is read off
its traffic (the α whose i.i.d. acceptance at the server's k is the group's Σ accepted / Σ
proposed), the policy picks a draft length k* or plain decoding for the whole group, and its
effect is priced on the group's requests: routed, by their own speculative and plain costs as
above; at another k, by the speed-up model's ratio at k* over the served k (what was not served
cannot be measured).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from specaudit.errors import InputError
from specaudit.traffic._store import Group, TrafficStore

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class FallbackRow:
    group: str
    requests: int  # with acceptance reported
    routed_share: float  # share of them below the threshold
    saving_routed: float  # plain steps saved per routed request (negative: the rule costs time)
    saving_share_of_total: float  # saved steps over the group's total speculative steps

    def to_dict(self) -> dict:
        return asdict(self)


def _check_costs(k: int, c: float, v: float) -> None:
    if k < 1 or c < 0 or v <= 0:
        raise InputError(f"--k {k}, --c {c}, --v {v}: k is a count of drafts per step (>= 1), c >= 0 and v > 0 are costs in target steps")


def _requests(store: TrafficStore, group: Group) -> tuple[pd.Series, pd.DataFrame]:
    """(group name, the requests with acceptance and output tokens reported)."""
    frame = store.requests(["proposed", "accepted", "output_tokens", "language", "labels"])
    frame = frame[(frame["proposed"].fillna(0) > 0) & frame["output_tokens"].notna()]
    return group.of_rows(frame, store.url), frame


def _costs(frame: pd.DataFrame, k: int, c: float, v: float) -> tuple[np.ndarray, np.ndarray]:
    """(speculative, plain) cost of each request in target steps, by the cost model."""
    speculative = frame["proposed"].to_numpy(float) / k * (v + k * c)
    return speculative, frame["output_tokens"].to_numpy(float)


def evaluate_fallback(store: TrafficStore, *, group_by: str, threshold: float, k: int, c: float, v: float) -> list[FallbackRow]:
    if not 0 < threshold < 1:
        raise InputError(f"--threshold {threshold} is not strictly between 0 and 1")
    _check_costs(k, c, v)
    names, frame = _requests(store, Group.parse(group_by))
    acceptance = frame["accepted"].to_numpy(float) / frame["proposed"].to_numpy(float)
    speculative, plain = _costs(frame, k, c, v)
    saving = speculative - plain
    routed = acceptance < threshold
    rows = []
    for name in sorted(names.unique()):
        mine = (names == name).to_numpy()
        hit = mine & routed
        rows.append(
            FallbackRow(
                group=str(name),
                requests=int(mine.sum()),
                routed_share=float(hit.sum() / mine.sum()),
                saving_routed=float(saving[hit].mean()) if hit.any() else 0.0,
                saving_share_of_total=float(saving[hit].sum() / speculative[mine].sum()),
            )
        )
    return rows


@dataclass(frozen=True)
class PolicyRow:
    group: str
    requests: int
    acceptance: float  # Σ accepted / Σ proposed on the traffic
    alpha: float  # per-position acceptance implied at the served k
    policy: str  # "plain" or "k=N"
    reason: str  # mitigate's
    speedup_served: float  # the speed-up model's, at the served k
    speedup_policy: float  # the same under the policy (1 when routed)
    saving_share_of_total: float  # saved share of the group's speculative time (negative: the policy costs time)

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate_policies(store: TrafficStore, *, group_by: str, k: int, c: float, v: float) -> list[PolicyRow]:
    """mitigate's per-group policy (draft length or plain decoding) for each group of the traffic, priced on its requests."""
    from specaudit.mitigate import group_policy
    from specaudit.stats.advice import alpha_from_tokens_per_step

    _check_costs(k, c, v)
    names, frame = _requests(store, Group.parse(group_by))
    speculative, plain = _costs(frame, k, c, v)
    rows = []
    for name in sorted(names.unique()):
        mine = (names == name).to_numpy()
        acceptance = float(frame["accepted"].to_numpy(float)[mine].sum() / frame["proposed"].to_numpy(float)[mine].sum())
        # acceptance = (τ − 1) / k under the i.i.d. model (stats.advice.acceptance_rate_from_alpha)
        alpha = alpha_from_tokens_per_step(1.0 + k * acceptance, k)
        policy = group_policy(alpha, c, k, None, verify_cost=v)
        served, under = policy["expected_speedup_run_k"], policy["expected_speedup_policy"]
        if policy["route_to_vanilla"]:
            saving = float((speculative[mine] - plain[mine]).sum() / speculative[mine].sum())
        else:
            saving = 1.0 - served / under  # the model's time at k* over its time at the served k, subtracted from 1
        rows.append(
            PolicyRow(
                group=str(name),
                requests=int(mine.sum()),
                acceptance=acceptance,
                alpha=float(alpha),
                policy="plain" if policy["route_to_vanilla"] else f"k={policy['k']}",
                reason=policy["reason"],
                speedup_served=float(served),
                speedup_policy=float(under),
                saving_share_of_total=saving,
            )
        )
    return rows


def render_fallback(rows: list[FallbackRow], threshold: float) -> str:
    lines = [
        f"fallback below {threshold:.0%} acceptance: group  requests  routed  saved steps per routed request  saved share of the group's time"
    ]
    for r in rows:
        lines.append(f"  {r.group:<12} {r.requests:>8}  {r.routed_share:6.1%}  {r.saving_routed:+10.2f}  {r.saving_share_of_total:+7.1%}")
    return "\n".join(lines)


def render_policies(rows: list[PolicyRow], k: int) -> str:
    lines = [
        f"mitigate's per-group policies (served at k = {k}): group  requests  acceptance  alpha  policy  "
        "model speed-up served -> policy  saved share of the group's time"
    ]
    for r in rows:
        lines.append(
            f"  {r.group:<12} {r.requests:>8}  {r.acceptance:10.3f}  {r.alpha:5.3f}  {r.policy:<6}  "
            f"{r.speedup_served:6.2f}x -> {r.speedup_policy:5.2f}x  {r.saving_share_of_total:+7.1%}  ({r.reason})"
        )
    return "\n".join(lines)


__all__ = ["FallbackRow", "PolicyRow", "evaluate_fallback", "evaluate_policies", "render_fallback", "render_policies"]
