"""Getting results into existing monitoring: Prometheus textfile metrics and a local alert log.

The metrics file follows the Prometheus text exposition format for node_exporter's textfile
collector (`--collector.textfile.directory`): gauges per dimension and group, written to a
temporary file and renamed into place so the collector never reads half a file. The alert log
is JSON Lines, one object per non-PASS check, appended: any log shipper can tail it, no webhook.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from specaudit.errors import InputError
from specaudit.monitor._drift import FAIL, PASS, WARN, MonitorResult
from specaudit.monitor._snapshot import MetricPoint, utc_now
from specaudit.monitor._store import HistoryStore, StoredRun

PREFIX = "specaudit_"
_HELP = {
    "acceptance_rate": "Accepted / proposed draft tokens",
    "per_position_acceptance": "Acceptance rate per drafted position reached",
    "mean_accepted_tokens": "Mean tokens emitted per verification step",
    "mean_beta": "Mean theoretical acceptance sum(min(p, q))",
    "speedup": "Vanilla wall time / speculative wall time, paired per prompt",
    "tokens_per_s": "Speculative decoding tokens per second",
    "vanilla_tokens_per_s": "Vanilla decoding tokens per second",
    "ttft_s": "Time to first token, seconds",
    "latency_per_token_p50_s": "Median latency per token, seconds",
    "latency_per_token_p95_s": "95th percentile latency per token, seconds",
    "cost_ratio": "Draft step cost / target step cost",
}
_STATUS_VALUE = {PASS: 0, WARN: 1, FAIL: 2}


def _metric_name(name: str) -> str:
    clean = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    return PREFIX + (f"_{clean}" if clean[:1].isdigit() else clean)


def _label_value(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items()) + "}" if labels else ""


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Families:
    """Samples grouped by metric family: the format wants each family's lines together, after its HELP/TYPE."""

    def __init__(self) -> None:
        self._order: list[str] = []
        self._help: dict[str, str] = {}
        self._samples: dict[str, list[str]] = {}

    def add(self, name: str, help_text: str, labels: Mapping[str, Any], value: float | None) -> None:
        if value is None:
            return
        if name not in self._samples:
            self._order.append(name)
            self._help[name] = help_text
            self._samples[name] = []
        self._samples[name].append(f"{name}{_labels(labels)} {_number(float(value))}")

    def text(self) -> str:
        lines = []
        for name in self._order:
            lines.append(f"# HELP {name} {self._help[name]}")
            lines.append(f"# TYPE {name} gauge")
            lines.extend(self._samples[name])
        return "\n".join(lines) + "\n"


def prometheus_text(
    run: StoredRun, points: Sequence[MetricPoint], *, engine_verdicts: Mapping[str, str] | None = None, result: MonitorResult | None = None
) -> str:
    """Prometheus text format for one run (and, given `result`, its monitoring checks)."""
    families = _Families()
    info = {
        "run": run.name,
        "run_id": run.id,
        "environment": run.environment,
        "target": run.target,
        "draft": run.draft,
        "prompt_set": f"{run.prompt_set}@{run.prompt_set_version}" if run.prompt_set else "",
    }
    families.add(f"{PREFIX}run_info", "The run these gauges describe (labels); always 1", info, 1)
    try:
        created = datetime.fromisoformat(run.created).timestamp()
    except ValueError:
        created = None
    families.add(f"{PREFIX}run_created_timestamp_seconds", "When the audited run was created (Unix time)", {}, created)
    for point in points:
        base = _metric_name(point.metric)
        labels = {"dimension": point.dimension, "group": point.group}
        help_text = _HELP.get(point.metric, point.metric.replace("_", " "))
        families.add(base, f'{help_text} (per prompt group; group="_overall" is all prompts)', labels, point.value)
    level = f"{run.ci_level:.0%}"
    for suffix in ("ci_low", "ci_high"):
        for point in points:
            families.add(
                f"{_metric_name(point.metric)}_{suffix}",
                f"{level} bootstrap confidence bound ({suffix}) of {point.metric}",
                {"dimension": point.dimension, "group": point.group},
                getattr(point, suffix),
            )
    for point in points:
        if point.metric == "acceptance_rate":
            families.add(
                f"{PREFIX}group_prompts", "Prompts in the group", {"dimension": point.dimension, "group": point.group}, point.n_prompts
            )
    status = run.equivalence_status  # spelt by the contracts (the store reads it through `spelt`)
    if status in (PASS, FAIL):
        families.add(f"{PREFIX}equivalence_pass", "1 when the equivalence battery passed, 0 when it failed", {}, int(status == PASS))
    for engine, verdict in sorted((engine_verdicts or {}).items()):
        if verdict in (PASS, FAIL):
            families.add(
                f"{PREFIX}equivalence_engine_pass",
                "1 when the engine passed the equivalence battery",
                {"engine": engine},
                int(verdict == PASS),
            )
    if result is not None:
        families.add(f"{PREFIX}monitor_status", "Monitoring check of this run: 0 PASS, 1 WARN, 2 FAIL", {}, _STATUS_VALUE[result.status])
        for s in (PASS, WARN, FAIL):
            families.add(f"{PREFIX}monitor_checks", "Monitoring checks by status", {"status": s}, sum(c.status == s for c in result.checks))
        for c in result.checks:
            if c.kind == "drift" and "relative_change" in c.details:
                families.add(
                    f"{PREFIX}drift_relative_change",
                    "Relative change against the baseline",
                    {"dimension": c.dimension, "group": c.group, "metric": c.metric},
                    c.details["relative_change"],
                )
        for c in result.checks:
            if c.kind in ("drift", "cusum"):
                families.add(
                    f"{PREFIX}drift_status",
                    "Drift check status: 0 PASS, 1 WARN, 2 FAIL",
                    {"kind": c.kind, "dimension": c.dimension, "group": c.group, "metric": c.metric},
                    _STATUS_VALUE[c.status],
                )
        families.add(
            f"{PREFIX}monitor_last_check_timestamp_seconds",
            "When this check ran (Unix time)",
            {},
            datetime.fromisoformat(utc_now()).timestamp(),
        )
    return families.text()


def metrics_text(
    store: HistoryStore, run: str | int | StoredRun = "latest", *, result: MonitorResult | None = None, environment: str | None = None
) -> str:
    """Prometheus text for a stored run (default: the latest)."""
    stored = run if isinstance(run, StoredRun) else store.get(run, environment=environment)
    return prometheus_text(
        stored, store.points([stored])[stored.id], engine_verdicts=store.engine_verdicts([stored])[stored.id], result=result
    )


def write_atomic(path: str | Path, content: str) -> Path:
    """Write via a temporary file in the same folder and rename: readers see the old or the new file, never half."""
    from specaudit._files import write_atomic as write_file_atomic

    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a folder; name a file such as {path / 'specaudit.prom'}")
    return write_file_atomic(path, content)


def alert_lines(result: MonitorResult, *, environment: str = "") -> list[str]:
    """JSON Lines for the non-PASS checks of `result` (FAIL first)."""
    now = utc_now()
    return [
        json.dumps(
            {
                "time": now,
                "status": c.status,
                "kind": c.kind,
                "subject": c.subject,
                "message": c.message,
                "dimension": c.dimension,
                "group": c.group,
                "metric": c.metric,
                "run": result.run,
                "run_id": result.run_id,
                "environment": environment,
                "baseline": result.baseline,
            },
            ensure_ascii=False,
        )
        for c in result.alerts
    ]


def append_alerts(path: str | Path, lines: Iterable[str]) -> int:
    """Append alert lines in one write (O_APPEND keeps concurrent jobs' lines whole); the count written."""
    lines = list(lines)
    if not lines:
        return 0
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
    except OSError as err:
        raise InputError(f"cannot append alerts to {path}: {err.strerror}") from None
    return len(lines)
