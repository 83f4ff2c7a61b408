"""Scheduled monitoring of audits: history store, drift against a baseline, alerts, trend report.

Reads snapshot.json files only (docs/ARCHITECTURE.md, Contracts)::

    from specaudit.monitor import open_store, check, write_trend_report

    with open_store("sqlite:///history.db") as store:
        store.add("runs/today/snapshot.json", environment="prod")
        result = check(store, baseline="rolling:5")        # or a pinned run: store.set_baseline(12)
        print(result.format_text())                        # alerts one per line
        write_trend_report(store, "reports/trend")         # trend.html + trend.csv

`result.exit_code` is 1 when any check FAILs (a significant, practically large drop of a group's
acceptance or speed-up, a slow drift caught by CUSUM, a changed or failing equivalence verdict),
0 otherwise.
"""

from specaudit.monitor._check import Baseline, check, resolve_baseline
from specaudit.monitor._drift import (
    DEFAULT_METRICS,
    FAIL,
    METRIC_DIRECTION,
    PASS,
    WARN,
    Check,
    CusumResult,
    DriftTestResult,
    MonitorResult,
    compare_snapshots,
    cusum,
    drift_test,
)
from specaudit.monitor._export import alert_lines, append_alerts, metrics_text, prometheus_text, write_atomic
from specaudit.monitor._snapshot import OVERALL, MetricPoint, metric_points
from specaudit.monitor._store import AddResult, HistoryStore, StoredRun, default_store_url, open_store
from specaudit.monitor._trend import TrendReport, trend_frame, trend_rows, write_trend_report

__all__ = [
    "open_store",
    "HistoryStore",
    "StoredRun",
    "AddResult",
    "default_store_url",
    "check",
    "resolve_baseline",
    "Baseline",
    "compare_snapshots",
    "MonitorResult",
    "Check",
    "drift_test",
    "DriftTestResult",
    "cusum",
    "CusumResult",
    "DEFAULT_METRICS",
    "METRIC_DIRECTION",
    "PASS",
    "WARN",
    "FAIL",
    "metric_points",
    "MetricPoint",
    "OVERALL",
    "metrics_text",
    "prometheus_text",
    "alert_lines",
    "append_alerts",
    "write_atomic",
    "write_trend_report",
    "trend_rows",
    "trend_frame",
    "TrendReport",
]
