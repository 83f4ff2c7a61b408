"""Drift of a run against a baseline: per-group metric changes, slow drifts, verdict and context changes.

Snapshots carry per-prompt values (`prompts`), so a group's change is tested prompt by prompt
(PromptDriftResult: paired when the runs share prompts). Snapshots without them (older ones, or
made elsewhere) are compared through the normal approximation of their bootstrap intervals:

- standard error of a run's estimate: SE = (ci_high − ci_low) / (2 z), z the CI's normal quantile;
- baseline = one run (pinned) or the random-effects mean of a rolling window of runs, with the
  between-run variance τ² estimated by DerSimonian–Laird (runs vary beyond their own CIs when
  traffic, load or seeds change; ignoring that would turn every re-run into an alert);
- difference d = current − baseline, Var d = SE_current² + τ² + Var(baseline mean); z = d / sd,
  two-sided p; Holm across every (group, metric) compared in the run.

A drift is FAIL when it is significant after Holm AND worse than the practical threshold
(`min_change`, relative to the baseline); significant but small or favourable changes are WARN.
Slow drifts that no single run shows are caught by a one-sided CUSUM of recursive residuals
(each run standardised against the pooled runs before it) over the history, with a slack of at
least half the practical threshold, so only drifts that matter accumulate.

The statistics live in `_drift_tests.py` (importable from here too); this module turns them into
checks and a MonitorResult.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specaudit.contracts import CheckStatus, EquivalenceStatus, worst
from specaudit.contracts.snapshot import Snapshot, read_snapshot
from specaudit.errors import InputError
from specaudit.monitor._drift_tests import (
    ConfidenceInterval,
    CusumResult,
    DriftTestResult,
    PromptDriftResult,
    cusum,
    drift_test,
    prompt_drift_test,
)
from specaudit.monitor._snapshot import OVERALL, MetricPoint, config_context, library_versions, summarize
from specaudit.stats._results import holm

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
DEFAULT_METRICS = ("acceptance_rate", "speedup")
DEFAULT_WINDOW = 5
# +1: higher is better, −1: lower is better. A metric not listed alerts on a change either way.
METRIC_DIRECTION = {
    "acceptance_rate": 1,
    "per_position_acceptance": 1,
    "mean_accepted_tokens": 1,
    "mean_beta": 1,
    "speedup": 1,
    "tokens_per_s": 1,
    "vanilla_tokens_per_s": 1,
    "ttft_s": -1,
    "latency_per_token_p50_s": -1,
    "latency_per_token_p95_s": -1,
    "cost_ratio": -1,
}


# ---------------------------------------------------------------------- checks
@dataclass(frozen=True)
class Check:
    """One monitoring check: PASS, WARN (look, exit 0) or FAIL (alert, exit 1)."""

    kind: str  # baseline | drift | cusum | equivalence | context | coverage
    status: CheckStatus
    subject: str
    message: str
    dimension: str | None = None
    group: str | None = None
    metric: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.status} {self.kind} {self.subject}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "status": self.status,
            "subject": self.subject,
            "message": self.message,
            "dimension": self.dimension,
            "group": self.group,
            "metric": self.metric,
            "details": dict(self.details),
        }


@dataclass(frozen=True)
class MonitorResult:
    """All checks of one run against its baseline. `status` is the worst check; exit code 1 on FAIL."""

    run: str
    baseline: str
    baseline_runs: tuple[str, ...]
    checks: tuple[Check, ...]
    run_id: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> CheckStatus:
        return worst(c.status for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 1 if self.status == FAIL else 0

    @property
    def alerts(self) -> tuple[Check, ...]:
        """The non-PASS checks, FAIL first."""
        return tuple(sorted((c for c in self.checks if c.status != PASS), key=lambda c: -c.status.rank))

    def to_dict(self) -> dict[str, Any]:
        counts = {s: sum(c.status == s for c in self.checks) for s in (PASS, WARN, FAIL)}
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "run": self.run,
            "run_id": self.run_id,
            "baseline": self.baseline,
            "baseline_runs": list(self.baseline_runs),
            "counts": counts,
            "settings": dict(self.settings),
            "checks": [c.to_dict() for c in self.checks],
        }

    def format_text(self, *, verbose: bool = False) -> str:
        """Alerts one per line (every check with `verbose`), then a summary line."""
        shown = self.checks if verbose else self.alerts
        counts = {s: sum(c.status == s for c in self.checks) for s in (PASS, WARN, FAIL)}
        summary = f"{self.status}: run {self.run} vs {self.baseline}: {counts[FAIL]} FAIL, {counts[WARN]} WARN, {counts[PASS]} PASS"
        return "\n".join([*(c.line() for c in shown), summary])


@dataclass(frozen=True)
class RunView:
    """What the comparison needs from one run, whether it comes from the store or a snapshot dict."""

    label: str
    points: Mapping[tuple[str, str, str], MetricPoint]
    equivalence_status: str
    engine_verdicts: Mapping[str, str]
    context: Mapping[str, str]
    snapshot: Snapshot | None = None

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot | Mapping[str, Any], label: str | None = None) -> RunView:
        snapshot = read_snapshot(snapshot)
        s = summarize(snapshot)
        return cls(label or s.name, {p.key: p for p in s.points}, s.equivalence_status, s.engine_verdicts, _context(s), snapshot)


def prompt_values(snapshot: Snapshot | None, dimension: str, group: str, metric: str) -> dict[str, float]:
    """Prompt id → finite value of `metric` for the prompts of one group (every prompt of the
    dimension for its overall row), from a snapshot's `prompts` section; empty without one."""
    out: dict[str, float] = {}
    for row in snapshot.prompts if snapshot is not None else []:
        value = getattr(row, metric, None)  # the value columns are the row's extras, numbers or null
        if dimension not in row.attributes or (group != OVERALL and str(row.attributes[dimension]) != group):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[row.id] = float(value)
    return out


def _context(source: Any) -> dict[str, str]:
    names = (
        "target",
        "target_hash",
        "draft",
        "draft_hash",
        "prompt_set",
        "prompt_set_version",
        "prompt_set_checksum",
        "config_hash",
        "versions_hash",
    )
    return {n: str(getattr(source, n, "")) for n in names}


def _subject(dimension: str, group: str, metric: str | None = None) -> str:
    where = f"{dimension} (overall)" if group == OVERALL else f"{dimension}={group}"
    return f"{where} {metric}" if metric else where


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}" if abs(x) >= 1000 or (x != 0 and abs(x) < 0.01) else f"{x:.3f}"


def _fmt_p(p: float) -> str:
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _drift_checks(
    current: RunView, baseline: Sequence[RunView], metrics: Sequence[str], alpha: float, min_change: float, baseline_text: str
) -> list[Check]:
    tested: list[tuple[MetricPoint, DriftTestResult | PromptDriftResult]] = []
    skipped: list[Check] = []
    keys = sorted(k for k in current.points if k[2] in metrics)
    for key in keys:
        point = current.points[key]
        if point.value is None:
            continue
        previous = [b.points[key] for b in baseline if key in b.points]
        # Prompt by prompt where every run carries per-prompt values; else from the group CIs.
        values = [prompt_values(view.snapshot, *key) for view in (current, *baseline)]
        if all(values):
            result = prompt_drift_test(values[0], values[1:], confidence_level=1 - alpha)
        else:
            result = drift_test(point, previous, confidence_level=1 - alpha)
        if result is None:
            if previous:
                skipped.append(Check("drift", PASS, _subject(*key), "not tested: no usable confidence interval on one side", *key))
            continue
        tested.append((point, result))
    adjusted = holm([r.pvalue for _, r in tested]).tolist()
    checks = []
    for (point, result), p_holm in zip(tested, adjusted):
        direction = METRIC_DIRECTION.get(point.metric, 0)
        worse = result.difference * direction < 0 if direction else result.difference != 0
        large = abs(result.relative_change) >= min_change
        significant = p_holm < alpha
        status = FAIL if significant and worse and large else WARN if significant else PASS
        ci = result.confidence_interval()
        word = ("worse" if worse else "better") if direction else "changed"
        word = word if significant else "not significant"
        message = (
            f"{_fmt(result.baseline)} → {_fmt(result.current)} ({result.relative_change:+.1%}, {word}; "
            f"difference {_fmt(result.difference)}, {1 - alpha:.0%} CI {_fmt(ci.low)} to {_fmt(ci.high)}; "
            f"p = {_fmt_p(result.pvalue)}, Holm {_fmt_p(p_holm)}) vs {baseline_text}"
        )
        if status == WARN:
            message += "; significant but " + ("favourable" if not worse else f"under the {min_change:.0%} practical threshold")
        details = {**result.to_dict(), "pvalue_holm": p_holm, "worse": worse, "min_change": min_change}
        checks.append(Check("drift", status, _subject(*point.key), message, *point.key, details=details))
    return checks + skipped


def _coverage_checks(current: RunView, reference: RunView, metrics: Sequence[str]) -> list[Check]:
    now = {(d, g) for d, g, m in current.points if m in metrics}
    before = {(d, g) for d, g, m in reference.points if m in metrics}
    checks = [
        Check("coverage", WARN, _subject(d, g), f"in baseline run {reference.label} but missing from this run", d, g)
        for d, g in sorted(before - now)
    ]
    checks += [
        Check("coverage", PASS, _subject(d, g), f"new group, not in baseline run {reference.label}", d, g) for d, g in sorted(now - before)
    ]
    return checks


def _cusum_checks(
    history: Sequence[RunView], metrics: Sequence[str], k: float, h: float | None, alpha: float, min_change: float
) -> list[Check]:
    current = history[-1]
    keys = sorted(key for key in current.points if key[2] in metrics and current.points[key].value is not None)
    # Each series' one-sided CUSUM exceeds h with stationary probability about e^(−2k·h), so
    # h = ln(m / α) / (2k) keeps the chance of any false alarm in a run near α over m series.
    threshold = h if h is not None else max(4.0, math.log(max(len(keys), 1) / alpha) / (2 * k))
    checks = []
    for key in keys:
        series = [view.points[key] for view in history if key in view.points]
        result = cusum(series, direction=METRIC_DIRECTION.get(key[2], 0), reference=k, threshold=threshold, min_change=min_change)
        if not result.alarm:
            continue
        labels = [view.label for view in history if key in view.points]
        start = result.excursion_start or 0
        message = (
            f"slow drift: CUSUM {result.statistic:.1f} > {threshold:.1f}, accumulated over the last {len(labels) - start} "
            f"runs ({labels[start]} … {labels[-1]})"
        )
        checks.append(Check("cusum", FAIL, _subject(*key), message, *key, details={**result.to_dict(), "runs": labels}))
    return checks


def _equivalence_checks(current: RunView, reference: RunView) -> list[Check]:
    unknown = {EquivalenceStatus.NOT_RUN, "skipped", "unknown", ""}
    # both spelt by the contracts (RunView's sources pass them through `spelt`), so old and new rows compare
    now, before = current.equivalence_status, reference.equivalence_status
    checks = []
    if now == FAIL:
        checks.append(Check("equivalence", FAIL, "equivalence", f"status {now} (baseline run {reference.label}: {before})"))
    elif now != before and now not in unknown and before not in unknown:
        checks.append(Check("equivalence", FAIL, "equivalence", f"verdict changed {before} → {now} since baseline run {reference.label}"))
    elif now in unknown and before not in unknown:
        checks.append(Check("equivalence", WARN, "equivalence", f"not tested in this run (baseline run {reference.label}: {before})"))
    else:
        checks.append(Check("equivalence", PASS, "equivalence", f"status {now} (baseline run {reference.label}: {before})"))
    for engine in sorted(set(current.engine_verdicts) & set(reference.engine_verdicts)):
        a, b = reference.engine_verdicts[engine], current.engine_verdicts[engine]
        if a != b:
            checks.append(Check("equivalence", FAIL, f"equivalence {engine}", f"engine verdict changed {a} → {b} since {reference.label}"))
    return checks


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): value}


def _differences(before: Any, after: Any, limit: int = 6) -> str:
    a, b = _flatten(before), _flatten(after)
    changed = [f"{k} {a.get(k)!r} → {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    more = f" and {len(changed) - limit} more" if len(changed) > limit else ""
    return ", ".join(changed[:limit]) + more


def _context_checks(current: RunView, baseline: Sequence[RunView]) -> list[Check]:
    """Model, prompt-set, config and library changes between any baseline run and this one: not
    failures, but the likeliest cause of a drift, so they are named beside it."""
    b = current.context

    def last_differing(attr: str) -> RunView | None:
        return next((view for view in reversed(baseline) if view.context[attr] != b[attr]), None)

    checks = []
    for role in ("target", "draft"):
        ref = last_differing(f"{role}_hash")
        if ref is not None:
            a = ref.context
            checks.append(
                Check(
                    "context",
                    WARN,
                    f"{role} model",
                    f"changed since {ref.label}: {a[role]} ({a[f'{role}_hash'][:8]}) → {b[role]} ({b[f'{role}_hash'][:8]})",
                )
            )
    ref = last_differing("prompt_set_checksum")
    if ref is not None:
        a = ref.context
        checks.append(
            Check(
                "context",
                WARN,
                "prompt set",
                f"changed since {ref.label}: {a['prompt_set']}@{a['prompt_set_version']} "
                f"({a['prompt_set_checksum'][:8]}) → {b['prompt_set']}@{b['prompt_set_version']} "
                f"({b['prompt_set_checksum'][:8]})",
            )
        )
    ref = last_differing("config_hash")
    if ref is not None:
        detail = (
            _differences(config_context(ref.snapshot), config_context(current.snapshot))
            if ref.snapshot and current.snapshot
            else "settings differ"
        )
        checks.append(Check("context", WARN, "config", f"changed since {ref.label}: {detail}"))
    ref = last_differing("versions_hash")
    if ref is not None:
        detail = (
            _differences(library_versions(ref.snapshot), library_versions(current.snapshot))
            if ref.snapshot and current.snapshot
            else "library versions differ"
        )
        checks.append(Check("context", WARN, "library versions", f"changed since {ref.label}: {detail}"))
    return checks


def check_settings(*, alpha: float, min_change: float, cusum_k: float = 0.5, cusum_h: float | None = None) -> None:
    """The one range check of a drift check's numbers (NaN compares false with everything, so each
    bound is written to fail on it); `monitor check` and `monitor run` call it before storing anything."""
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise InputError(f"--alpha must be in (0, 1), got {alpha}")
    if not (isinstance(min_change, (int, float)) and 0 <= min_change < math.inf):
        raise InputError(f"--min-change must be a finite number >= 0 (a relative change such as 0.1), got {min_change}")
    if not (0 < cusum_k < math.inf):
        raise InputError(f"the CUSUM reference k must be a finite number > 0, got {cusum_k}")
    if cusum_h is not None and not (0 < cusum_h < math.inf):
        raise InputError(f"--cusum-h must be a finite number > 0 (the CUSUM threshold), got {cusum_h}")


def compare(
    current: RunView,
    baseline: Sequence[RunView],
    *,
    history: Sequence[RunView] = (),
    baseline_text: str = "baseline",
    metrics: Sequence[str] = DEFAULT_METRICS,
    alpha: float = 0.05,
    min_change: float = 0.10,
    cusum_k: float = 0.5,
    cusum_h: float | None = None,
    run_id: int | None = None,
) -> MonitorResult:
    """All checks of `current` against `baseline` views (oldest first); `history` (ending with current) feeds the CUSUM."""
    check_settings(alpha=alpha, min_change=min_change, cusum_k=cusum_k, cusum_h=cusum_h)
    settings = {
        "metrics": list(metrics),
        "alpha": alpha,
        "min_change": min_change,
        "cusum_k": cusum_k,
        "cusum_h": cusum_h,
        "approximation": "normal, SE from CI width; baseline window pooled by DerSimonian–Laird random effects; Holm",
    }
    if not baseline:
        check = Check("baseline", PASS, "baseline", "no earlier run to compare with; this run starts the history")
        return MonitorResult(current.label, baseline_text, (), (check,), run_id, settings)
    reference = baseline[-1]
    checks: list[Check] = []
    checks += _equivalence_checks(current, reference)
    checks += _context_checks(current, baseline)
    checks += _coverage_checks(current, reference, metrics)
    checks += _drift_checks(current, baseline, metrics, alpha, min_change, baseline_text)
    if len(history) > 1:
        checks += _cusum_checks(history, metrics, cusum_k, cusum_h, alpha, min_change)
    return MonitorResult(current.label, baseline_text, tuple(v.label for v in baseline), tuple(checks), run_id, settings)


def compare_snapshots(
    current: Snapshot | Mapping[str, Any],
    baseline: Snapshot | Mapping[str, Any] | Sequence[Snapshot | Mapping[str, Any]],
    *,
    history: Sequence[Snapshot | Mapping[str, Any]] = (),
    **options: Any,
) -> MonitorResult:
    """`compare` for snapshots (typed, or dicts; no store): `baseline` one snapshot or a window (oldest
    first); `history` the runs before `current`, oldest first, for the CUSUM (`current` is appended)."""
    baselines = [baseline] if isinstance(baseline, (Snapshot, Mapping)) else list(baseline)
    cache: dict[int, RunView] = {}  # a snapshot in both the window and the history is read once

    def view(snapshot: Snapshot | Mapping[str, Any], label: str) -> RunView:
        if id(snapshot) not in cache:
            cache[id(snapshot)] = RunView.from_snapshot(snapshot, label=label)
        return cache[id(snapshot)]

    now = view(current, "current")
    past = [view(s, f"history[{i}]") for i, s in enumerate(history) if s is not current]
    views = [view(s, f"baseline[{i}]") for i, s in enumerate(baselines)]
    text = "the baseline run" if len(views) == 1 else f"{len(views)} baseline runs"
    return compare(now, views, history=[*past, now] if past else (), baseline_text=text, **options)


__all__ = [
    "DEFAULT_METRICS",
    "DEFAULT_WINDOW",
    "FAIL",
    "METRIC_DIRECTION",
    "PASS",
    "WARN",
    "Check",
    "ConfidenceInterval",
    "CusumResult",
    "DriftTestResult",
    "MonitorResult",
    "PromptDriftResult",
    "RunView",
    "compare",
    "compare_snapshots",
    "cusum",
    "drift_test",
    "prompt_drift_test",
    "prompt_values",
]
