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
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from specaudit.errors import InputError
from specaudit.traffic._store import Group, TrafficStore


@dataclass(frozen=True)
class FallbackRow:
    group: str
    requests: int  # with acceptance reported
    routed_share: float  # share of them below the threshold
    saving_routed: float  # plain steps saved per routed request (negative: the rule costs time)
    saving_share_of_total: float  # saved steps over the group's total speculative steps

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate_fallback(store: TrafficStore, *, group_by: str, threshold: float, k: int, c: float, v: float) -> list[FallbackRow]:
    if not 0 < threshold < 1:
        raise InputError(f"--threshold {threshold} is not strictly between 0 and 1")
    if k < 1 or c < 0 or v <= 0:
        raise InputError(f"--k {k}, --c {c}, --v {v}: k is a count of drafts per step (>= 1), c >= 0 and v > 0 are costs in target steps")
    group = Group.parse(group_by)
    frame = store.requests(["proposed", "accepted", "output_tokens", "language", "labels"])
    frame = frame[(frame["proposed"].fillna(0) > 0) & frame["output_tokens"].notna()]
    if group.key == "language":
        names = frame["language"].astype(str)
    else:
        key = group.key.split(":", 1)[1]
        names = frame["labels"].map(lambda text: json.loads(text).get(key, "_none"))
    acceptance = frame["accepted"].to_numpy(float) / frame["proposed"].to_numpy(float)
    steps = frame["proposed"].to_numpy(float) / k
    speculative = steps * (v + k * c)
    plain = frame["output_tokens"].to_numpy(float)
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


def render_fallback(rows: list[FallbackRow], threshold: float) -> str:
    lines = [
        f"fallback below {threshold:.0%} acceptance: group  requests  routed  saved steps per routed request  saved share of the group's time"
    ]
    for r in rows:
        lines.append(f"  {r.group:<12} {r.requests:>8}  {r.routed_share:6.1%}  {r.saving_routed:+10.2f}  {r.saving_share_of_total:+7.1%}")
    return "\n".join(lines)


__all__ = ["FallbackRow", "evaluate_fallback", "render_fallback"]
