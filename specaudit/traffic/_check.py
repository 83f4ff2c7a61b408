"""`specaudit traffic report` and `traffic check`: the store's sums, the per-group table, the checks,
and the monitor's outputs (alert file of JSON lines, Prometheus textfile gauges per group)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from specaudit.errors import InputError
from specaudit.monitor._export import _Families, append_alerts, write_atomic
from specaudit.monitor._snapshot import utc_now
from specaudit.traffic._analysis import Check, GroupSummary, checks, summaries
from specaudit.traffic._sequential import DEFAULT_TAU
from specaudit.traffic._store import STRATA, Group, TrafficStore

# --adjust names for the strata columns.
ADJUSTABLE = {"prompt": "prompt_bin", "output": "output_bin", "sampling": "sampling_bin", "load": "load_bin"}


def parse_adjust(spelling: str) -> tuple[str, ...]:
    """Strata columns from "prompt,output,sampling,load" (any subset) or "none"."""
    if spelling.strip() == "none":
        return ()
    names = [n.strip() for n in spelling.split(",") if n.strip()]
    unknown = [n for n in names if n not in ADJUSTABLE]
    if unknown or not names:
        raise InputError(f"--adjust {spelling!r}: name some of {', '.join(ADJUSTABLE)} (comma-separated), or 'none'")
    return tuple(ADJUSTABLE[n] for n in names)


PREFIX = "specaudit_traffic_"
DEFAULT_BASELINE_REQUESTS = 1000


@dataclass(frozen=True)
class TrafficResult:
    group_by: str
    requests: int
    baseline_requests: int | None  # None: too few requests for a baseline and a period after it
    summaries: list[GroupSummary]
    checks: list[Check]

    @property
    def alerts(self) -> list[Check]:
        return [c for c in self.checks if c.alert]

    def to_dict(self) -> dict:
        return {
            "group_by": self.group_by,
            "requests": self.requests,
            "baseline_requests": self.baseline_requests,
            "groups": [s.to_dict() for s in self.summaries],
            "checks": [c.to_dict() for c in self.checks],
            "alerts": len(self.alerts),
        }


def _frame(store: TrafficStore, group: Group, baseline_requests: int) -> tuple[pd.DataFrame, int, int | None]:
    total = store.count()
    if total == 0:
        raise InputError(f"traffic store {store.url} holds no requests; ingest a log first with `specaudit traffic ingest`")
    until = store.time_at(baseline_requests + 1) if baseline_requests > 0 and total > baseline_requests else None
    frame = store.aggregates(group, baseline_until=until)
    return frame, total, (baseline_requests if until is not None else None)


def evaluate(
    store: TrafficStore,
    *,
    group_by: str = "language",
    baseline_requests: int = DEFAULT_BASELINE_REQUESTS,
    alpha: float = 0.05,
    band_low: float = 0.8,
    min_change: float = 0.10,
    tau: float = DEFAULT_TAU,
    strata: tuple[str, ...] = STRATA,
) -> TrafficResult:
    for name, value, low, high in (("--false-alarm-rate", alpha, 0, 1), ("--band-low", band_low, 0, 1), ("--min-change", min_change, 0, 1)):
        if not low < value < high:
            raise InputError(f"{name} {value} is not strictly between {low} and {high}")
    if baseline_requests < 0:
        raise InputError(f"--baseline-requests {baseline_requests} is negative; give a count of requests (0: no drift check)")
    group = Group.parse(group_by)
    frame, total, baseline = _frame(store, group, baseline_requests)
    return TrafficResult(
        group_by=group_by,
        requests=total,
        baseline_requests=baseline,
        summaries=summaries(frame, alpha=alpha, tau=tau, strata=strata),
        checks=checks(frame, alpha=alpha, band_low=band_low, min_change=min_change, drift=baseline is not None, tau=tau, strata=strata),
    )


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def render_text(result: TrafficResult, *, verbose: bool = False) -> str:
    lines = [f"{result.requests} requests, grouped by {result.group_by}"]
    for metric, unit, scale in (("acceptance", "", 1.0), ("latency_per_token", " ms", 1000.0)):
        lines.append(f"{metric}{unit}: group  requests  rate [95% CI]  vs others: unadjusted  adjusted [anytime CS]")
        for s in result.summaries:
            if s.metric != metric:
                continue
            rate = (
                "n/a"
                if s.rate is None
                else f"{s.rate * scale:.3f} [{_fmt(s.ci_low and s.ci_low * scale)}, {_fmt(s.ci_high and s.ci_high * scale)}]"
            )
            lines.append(
                f"  {s.group:<12} {s.requests:>8}  {rate}  {_fmt(s.crude_ratio)}x  {_fmt(s.adjusted_ratio)}x "
                f"[{_fmt(s.ratio_low)}, {_fmt(s.ratio_high)}]"
            )
    if result.baseline_requests is None:
        lines.append("drift: not checked (the store holds no more requests than the baseline)")
    for c in result.checks:
        if c.alert or verbose:
            lines.append(f"{'ALERT' if c.alert else 'ok   '} {c.kind}: {c.message}")
    lines.append(f"{len(result.alerts)} alert(s) of {len(result.checks)} checks (Holm across groups, metrics and kinds)")
    return "\n".join(lines)


def prometheus_text(result: TrafficResult) -> str:
    families = _Families()
    for s in result.summaries:
        labels = {"group_by": result.group_by, "group": s.group}
        families.add(f"{PREFIX}{s.metric}", f"{s.metric.replace('_', ' ')} per group (unadjusted)", labels, s.rate)
        families.add(
            f"{PREFIX}{s.metric}_adjusted_ratio",
            f"{s.metric.replace('_', ' ')} over the other groups', on the group's strata",
            labels,
            s.adjusted_ratio,
        )
        if s.metric == "acceptance":
            families.add(f"{PREFIX}requests", "Requests in the group", labels, s.requests)
    for c in result.checks:
        families.add(
            f"{PREFIX}alert",
            "1 when the anytime-valid check alerts (Holm across the family)",
            {"kind": c.kind, "group_by": result.group_by, "group": c.group, "metric": c.metric},
            int(c.alert),
        )
    families.add(f"{PREFIX}alerts", "Alerts of the last check", {}, len(result.alerts))
    families.add(f"{PREFIX}requests_total", "Requests in the store", {}, result.requests)
    return families.text()


def write_outputs(result: TrafficResult, *, alert_file: str | None, metrics_file: str | None, store_url: str) -> None:
    if alert_file:
        now = utc_now()
        append_alerts(
            alert_file,
            [
                json.dumps(
                    {"time": now, "status": "FAIL", "store": store_url, "group_by": result.group_by, **c.to_dict()}, ensure_ascii=False
                )
                for c in result.alerts
            ],
        )
    if metrics_file:
        write_atomic(metrics_file, prometheus_text(result))


def summaries_json(result: TrafficResult) -> str:
    return json.dumps(result.to_dict(), indent=2)


__all__: Sequence[str] = ["TrafficResult", "evaluate", "render_text", "prometheus_text", "write_outputs"]
