"""Checking a stored run against its baseline: choose the baseline, gather the history, compare, record."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from specaudit.contracts import CheckStatus
from specaudit.errors import InputError
from specaudit.monitor._drift import DEFAULT_METRICS, DEFAULT_WINDOW, MonitorResult, RunView, _context, compare
from specaudit.monitor._store import HistoryStore, StoredRun

# The CUSUM looks back at most this many runs: enough for slow drifts, bounded work per check.
HISTORY_LIMIT = 60


@dataclass(frozen=True)
class Baseline:
    """The runs a check compares against: `kind` pinned | run | rolling | none."""

    kind: str
    runs: tuple[StoredRun, ...]
    description: str


def rolling_window(spec: str) -> int:
    """N of a `rolling:N` baseline (`rolling` alone: the default window)."""
    try:
        window = int(spec.split(":", 1)[1]) if ":" in spec else DEFAULT_WINDOW
    except ValueError:
        window = 0
    if window < 1:
        raise InputError(f"--baseline {spec!r}: write rolling:N with N >= 1 runs, e.g. rolling:5")
    return window


def check_baseline(store: HistoryStore, spec: str = "auto", environment: str | None = None) -> None:
    """Refuse a baseline that cannot resolve, before a check stores its snapshot or `monitor run`
    decodes: rolling:N with N < 1, or a run id or name the store does not hold."""
    spec = (spec or "auto").strip()
    if spec in ("auto", "pinned"):
        return  # resolved against the checked run's environment, which storing decides
    if spec.startswith("rolling"):
        rolling_window(spec)
    else:
        store.get(spec)


def resolve_baseline(store: HistoryStore, current: StoredRun, spec: str = "auto") -> Baseline:
    """`spec`: auto (the environment's pinned run, else rolling:5), pinned, rolling:N, or a run reference."""
    spec = (spec or "auto").strip()
    env = current.environment
    where = f" in environment {env!r}" if env else ""
    if spec in ("auto", "pinned"):
        pin = store.baseline(env)
        if pin is not None and pin.id != current.id:
            return Baseline("pinned", (pin,), f"pinned baseline {pin.label}")
        if spec == "pinned":
            if pin is None:
                raise InputError(
                    f"no pinned baseline{where}; pin one with `specaudit monitor baseline set RUN` or use --baseline rolling:5"
                )
            return Baseline("none", (), "the pinned baseline (this run itself)")
        spec = f"rolling:{DEFAULT_WINDOW}"
    if spec.startswith("rolling"):
        window = rolling_window(spec)
        runs = store.runs(environment=env, before=current, limit=window)
        text = f"the last run {runs[0].label}" if len(runs) == 1 else f"the last {len(runs)} runs{where}"
        return Baseline("rolling" if runs else "none", tuple(runs), text if runs else f"no earlier run{where}")
    run = store.get(spec)
    if run.id == current.id:
        raise InputError(f"--baseline {spec!r} is the run being checked; name an earlier run")
    return Baseline("run", (run,), f"run {run.label}")


def _views(store: HistoryStore, runs: Sequence[StoredRun], with_snapshot: Sequence[StoredRun] = ()) -> dict[int, RunView]:
    points = store.points(runs)
    verdicts = store.engine_verdicts(runs)
    snapshots = {r.id: store.typed_snapshot(r) for r in with_snapshot}
    return {
        r.id: RunView(r.label, {p.key: p for p in points[r.id]}, r.equivalence_status, verdicts[r.id], _context(r), snapshots.get(r.id))
        for r in runs
    }


def check(
    store: HistoryStore,
    run: str | int = "latest",
    *,
    baseline: str = "auto",
    environment: str | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    alpha: float = 0.05,
    min_change: float = 0.10,
    cusum: bool = True,
    cusum_k: float = 0.5,
    cusum_h: float | None = None,
    record: bool = True,
) -> MonitorResult:
    """Compare a stored run (default: the latest of `environment`) with its baseline; keep the alerts in the store."""
    current = store.get(run, environment=environment)
    base = resolve_baseline(store, current, baseline)
    history: list[StoredRun] = []
    if cusum:
        since = base.runs[0] if base.kind == "pinned" else None
        history = [*store.runs(environment=current.environment, before=current, since=since, limit=HISTORY_LIMIT), current]
    wanted = {r.id: r for r in [*base.runs, *history, current]}
    views = _views(store, list(wanted.values()), with_snapshot=[current, *base.runs])
    available = {key[2] for key in views[current.id].points}
    unknown = [m for m in metrics if m not in available]
    if available and unknown:  # a run without per-group metrics is still checked for equivalence and context
        raise InputError(f"--metrics {', '.join(unknown)}: run {current.label} has no such metric (it has {', '.join(sorted(available))})")
    result = compare(
        views[current.id],
        [views[r.id] for r in base.runs],
        history=[views[r.id] for r in history],
        baseline_text=base.description,
        metrics=metrics,
        alpha=alpha,
        min_change=min_change,
        cusum_k=cusum_k,
        cusum_h=cusum_h,
        run_id=current.id,
    )
    if record:
        store.record_alerts(current, base.description, result.checks)
    return result


def history_table(runs: Sequence[StoredRun], *, pins: dict[str, StoredRun] | None = None, alerts: dict[int, int] | None = None) -> str:
    """A plain-text table of runs for `monitor list`."""
    pinned = {r.id for r in (pins or {}).values()}
    header = ("id", "created (UTC)", "name", "env", "equivalence", "target", "draft", "prompt set", "alerts")
    rows = [header]
    for r in runs:
        rows.append(
            (
                f"{r.id}{'*' if r.id in pinned else ''}",
                r.created.replace("+00:00", ""),
                r.name,
                r.environment or "-",
                r.equivalence_status,
                r.target,
                r.draft,
                f"{r.prompt_set}@{r.prompt_set_version}" if r.prompt_set else "-",
                str((alerts or {}).get(r.id, 0)),
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if pinned:
        lines.append("* pinned baseline of its environment")
    return "\n".join(lines)


def describe_run(store: HistoryStore, run: StoredRun, *, metrics: Sequence[str] | None = None) -> str:
    """Plain-text summary of one stored run: identity, tags, equivalence, per-group metrics."""
    points = store.points([run])[run.id]
    verdicts = store.engine_verdicts([run])[run.id]
    lines = [
        f"run {run.label}  created {run.created}  ingested {run.ingested}",
        f"environment: {run.environment or '-'}   digest: {run.digest[:16]}   source: {run.source or '-'}",
        f"target: {run.target} ({run.target_hash[:8]})   draft: {run.draft} ({run.draft_hash[:8]})",
        f"prompt set: {run.prompt_set}@{run.prompt_set_version} ({run.prompt_set_checksum[:8]})   config: {run.config_hash[:8]}",
        "tags: " + ", ".join(f"{k}={v}" for k, v in sorted(run.tags.items())),
        f"equivalence: {run.equivalence_status}"
        + ("  (" + ", ".join(f"{e}: {v}" for e, v in sorted(verdicts.items())) + ")" if verdicts else ""),
    ]
    chosen = [p for p in points if metrics is None or p.metric in metrics]
    for p in chosen:
        ci = f"[{p.ci_low:.4g}, {p.ci_high:.4g}]" if p.ci_low is not None and p.ci_high is not None else "[no CI]"
        value = f"{p.value:.4g}" if p.value is not None else "n/a"
        lines.append(f"  {p.dimension:<12} {p.group:<14} {p.metric:<26} {value:>10} {ci}  n_prompts={p.n_prompts}")
    return "\n".join(lines)


def alert_counts(store: HistoryStore, runs: Sequence[StoredRun]) -> dict[int, int]:
    return Counter(a["run_id"] for a in store.alerts(runs) if a["status"] == CheckStatus.FAIL)
