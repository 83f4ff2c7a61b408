"""Trend report: per-group time series of stored runs, as self-contained HTML (inline SVG) and CSV.

The HTML has no script and fetches nothing: CSS and charts are inline, labels pass through
Jinja's autoescaping, hover details are SVG <title> elements. Each dimension and metric is a
row of small panels, one per group on a shared y axis, with the run's CI as a band, the
dimension's overall series dashed for reference, dashed verticals where the target, draft,
prompt set, config or library versions changed, and the alerts of `monitor check` as marks.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit._chart_style import OKABE_ITO, nice_ticks
from specaudit.monitor._drift import DEFAULT_METRICS, FAIL, WARN
from specaudit.monitor._export import write_atomic
from specaudit.monitor._snapshot import OVERALL, utc_now
from specaudit.monitor._store import HistoryStore, StoredRun

if TYPE_CHECKING:
    import pandas as pd

    from specaudit.monitor._snapshot import MetricPoint

CSV_COLUMNS = (
    "run_id",
    "run",
    "created",
    "environment",
    "dimension",
    "group",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n_prompts",
    "n_tokens",
    "equivalence_status",
    "target",
    "draft",
    "prompt_set",
    "config_hash",
    "alert",
)
_PANEL_W, _PANEL_H = 234, 156
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 10, 8, 24


@dataclass(frozen=True)
class TrendReport:
    html_path: Path
    csv_path: Path
    n_runs: int
    n_charts: int


def _changes(previous: StoredRun | None, run: StoredRun) -> list[str]:
    if previous is None:
        return []
    pairs = [
        ("target", "target_hash"),
        ("draft", "draft_hash"),
        ("prompt set", "prompt_set_checksum"),
        ("config", "config_hash"),
        ("libraries", "versions_hash"),
    ]
    return [name for name, attr in pairs if getattr(previous, attr) != getattr(run, attr)]


def _collect(
    store: HistoryStore, environment: str | None, last: int | None
) -> tuple[list[StoredRun], dict[int, list[MetricPoint]], dict[tuple[int, str, str, str], str], dict[int, list[dict]]]:
    runs = store.runs(environment=environment, limit=last)
    points = store.points(runs)
    alerts: dict[tuple[int, str, str, str], str] = {}
    run_alerts: dict[int, list[dict]] = {}
    for a in store.alerts(runs):
        run_alerts.setdefault(a["run_id"], []).append(a)
        if a["dimension"] is not None:
            key = (a["run_id"], a["dimension"], a["group"], a["metric"])
            if alerts.get(key) != FAIL:
                alerts[key] = a["status"]
    return runs, points, alerts, run_alerts


def trend_rows(
    store: HistoryStore,
    *,
    environment: str | None = None,
    last: int | None = None,
    metrics: Sequence[str] | None = None,
    dimensions: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Long-format rows (CSV_COLUMNS), one per run, dimension, group and metric, oldest run first."""
    runs, points, alerts, _ = _collect(store, environment, last)
    rows = []
    for run in runs:
        for p in points[run.id]:
            if (metrics and p.metric not in metrics) or (dimensions and p.dimension not in dimensions):
                continue
            rows.append(
                {
                    "run_id": run.id,
                    "run": run.name,
                    "created": run.created,
                    "environment": run.environment,
                    "dimension": p.dimension,
                    "group": p.group,
                    "metric": p.metric,
                    "value": p.value,
                    "ci_low": p.ci_low,
                    "ci_high": p.ci_high,
                    "n_prompts": p.n_prompts,
                    "n_tokens": p.n_tokens,
                    "equivalence_status": run.equivalence_status,
                    "target": run.target,
                    "draft": run.draft,
                    "prompt_set": f"{run.prompt_set}@{run.prompt_set_version}" if run.prompt_set else "",
                    "config_hash": run.config_hash,
                    "alert": alerts.get((run.id, p.dimension, p.group, p.metric), ""),
                }
            )
    return rows


def trend_frame(store: HistoryStore, **options: Any) -> pd.DataFrame:
    """`trend_rows` as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame(trend_rows(store, **options), columns=list(CSV_COLUMNS))


def trend_csv(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


# ---------------------------------------------------------------------- charts
def _fmt(v: float) -> str:
    return f"{v:.3g}"


def _y_range(values: list[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    if high - low < 1e-12:
        pad = abs(high) * 0.1 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.06
    return low - pad, high + pad


def _panel(
    title: str,
    runs: Sequence[StoredRun],
    series: list,
    overall: list | None,
    y_range: tuple[float, float],
    markers: list[tuple[int, str]],
    alerts: list[str | None],
) -> dict[str, Any]:
    plot_w, plot_h = _PANEL_W - _LEFT - _RIGHT, _PANEL_H - _TOP - _BOTTOM
    n = len(runs)
    ymin, ymax = y_range

    def x(i: int) -> float:
        return _LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(v: float) -> float:
        return _TOP + (1 - (v - ymin) / (ymax - ymin)) * plot_h

    def segments(values: list) -> list[list[int]]:
        out, current = [], []
        for i, v in enumerate(values):
            if v is None:
                if current:
                    out.append(current)
                current = []
            else:
                current.append(i)
        return out + ([current] if current else [])

    values = [p[0] if p else None for p in series]
    bands = []
    for seg in segments([p if p and p[1] is not None and p[2] is not None else None for p in series]):
        upper = " L ".join(f"{x(i):.1f} {y(series[i][2]):.1f}" for i in seg)
        lower = " L ".join(f"{x(i):.1f} {y(series[i][1]):.1f}" for i in reversed(seg))
        if len(seg) == 1:  # a lone point's CI is a whisker, not an area
            i = seg[0]
            bands.append(
                f"M {x(i) - 3:.1f} {y(series[i][2]):.1f} L {x(i) + 3:.1f} {y(series[i][2]):.1f} "
                f"L {x(i) + 3:.1f} {y(series[i][1]):.1f} L {x(i) - 3:.1f} {y(series[i][1]):.1f} Z"
            )
        else:
            bands.append(f"M {upper} L {lower} Z")
    lines = [" ".join(f"{x(i):.1f},{y(values[i]):.1f}" for i in seg) for seg in segments(values)]
    overall_values = [p[0] if p else None for p in (overall or [])]
    overall_lines = [" ".join(f"{x(i):.1f},{y(overall_values[i]):.1f}" for i in seg) for seg in segments(overall_values)] if overall else []
    points = []
    for i, p in enumerate(series):
        if not p:
            continue
        ci = f" [{_fmt(p[1])}, {_fmt(p[2])}]" if p[1] is not None and p[2] is not None else ""
        status = alerts[i]
        tip = f"{runs[i].label} {runs[i].created[:16].replace('T', ' ')}: {_fmt(p[0])}{ci}" + (f" — {status}" if status else "")
        points.append({"x": round(x(i), 1), "y": round(y(p[0]), 1), "status": (status or "ok").lower(), "title": tip})
    ticks = [{"y": round(y(v), 1), "label": _fmt(v)} for v in nice_ticks(ymin, ymax) if ymin <= v <= ymax]
    xlabels = []
    if n:
        xlabels.append({"x": round(x(0), 1), "label": runs[0].label, "anchor": "start" if n > 1 else "middle"})
    if n > 1:
        xlabels.append({"x": round(x(n - 1), 1), "label": runs[-1].label, "anchor": "end"})
    return {
        "title": title,
        "w": _PANEL_W,
        "h": _PANEL_H,
        "left": _LEFT,
        "right": _PANEL_W - _RIGHT,
        "top": _TOP,
        "bottom": _PANEL_H - _BOTTOM,
        "bands": bands,
        "lines": lines,
        "overall": overall_lines,
        "points": points,
        "ticks": ticks,
        "xlabels": xlabels,
        "markers": [{"x": round(x(i), 1), "label": text} for i, text in markers],
    }


def _charts(
    runs: Sequence[StoredRun],
    points: dict,
    alerts: dict,
    metrics: Sequence[str],
    dimensions: Sequence[str] | None,
    markers: list[tuple[int, str]],
) -> list[dict[str, Any]]:
    index = {}
    for i, run in enumerate(runs):
        for p in points[run.id]:
            index[(p.dimension, p.group, p.metric, i)] = p
    found = sorted({(p.dimension, p.metric) for run in runs for p in points[run.id] if p.metric in metrics})
    charts = []
    for dimension, metric in sorted(found, key=lambda dm: (dm[0], list(metrics).index(dm[1]))):
        if dimensions and dimension not in dimensions:
            continue
        groups = sorted({g for (d, g, m, _) in index if d == dimension and m == metric}, key=lambda g: (g != OVERALL, g))

        def series(group: str) -> list:
            out = []
            for i in range(len(runs)):
                p = index.get((dimension, group, metric, i))
                out.append((p.value, p.ci_low, p.ci_high) if p is not None and p.value is not None else None)
            return out

        all_series = {g: series(g) for g in groups}
        values = [v for s in all_series.values() for p in s if p for v in p if v is not None and math.isfinite(v)]
        if not values:
            continue
        y_range = _y_range(values)
        overall = all_series.get(OVERALL)
        panels = []
        for g in groups:
            flags = [alerts.get((run.id, dimension, g, metric)) for run in runs]
            panels.append(
                _panel(
                    "all prompts" if g == OVERALL else g, runs, all_series[g], None if g == OVERALL else overall, y_range, markers, flags
                )
            )
        n_alerts = sum(1 for (rid, d, g, m), s in alerts.items() if d == dimension and m == metric and s == FAIL)
        charts.append({"dimension": dimension, "metric": metric, "panels": panels, "n_fail": n_alerts})
    return charts


_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
{{ report_css }}
.panels { display: flex; flex-wrap: wrap; gap: 10px; }
.panels figure { margin: 0; border: 1px solid var(--rule); border-radius: 6px; padding: 4px 4px 0; background: #fff; }
.panels figcaption { text-align: center; font-weight: 650; color: var(--ink); margin: 0 0 2px; }
svg.trend text { font-size: 10px; fill: var(--muted); }
svg.trend .grid { stroke: #ececf0; } svg.trend .axis { stroke: #8c8c94; }
svg.trend .band { fill: {{ colours.blue }}; opacity: .16; }
svg.trend .line { fill: none; stroke: {{ colours.blue }}; stroke-width: 1.7; }
svg.trend .overall { fill: none; stroke: {{ colours.black }}; stroke-width: 1; stroke-dasharray: 3 3; opacity: .55; }
svg.trend .change { stroke: {{ colours.purple }}; stroke-width: 1.2; stroke-dasharray: 4 3; }
.pt-ok { fill: {{ colours.blue }}; } .pt-warn { fill: {{ colours.orange }}; } .pt-fail { fill: {{ colours.vermillion }}; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 18px; align-items: center; margin: 10px 0; }
.legend svg { vertical-align: middle; margin-right: 4px; }
</style></head>
<body>
{%- macro badge(status) -%}
<span class="badge {{ status|lower }}"><span class="sym" aria-hidden="true">{{ {"PASS": "✓", "WARN": "!", "FAIL": "✗"}[status] }}</span>{{ status }}</span>
{%- endmacro -%}
{%- macro mark(status, x, y, title) -%}
{%- if status == "fail" -%}<rect class="pt-fail" x="{{ x - 4.5 }}" y="{{ y - 4.5 }}" width="9" height="9"><title>{{ title }}</title></rect>
{%- elif status == "warn" -%}<path class="pt-warn" d="M{{ x }} {{ y - 5.5 }}L{{ x + 5.5 }} {{ y }}L{{ x }} {{ y + 5.5 }}L{{ x - 5.5 }} {{ y }}Z"><title>{{ title }}</title></path>
{%- else -%}<circle class="pt-ok" cx="{{ x }}" cy="{{ y }}" r="2.6"><title>{{ title }}</title></circle>{%- endif -%}
{%- endmacro %}
<header class="top"><div class="inner"><h1>{{ title }}</h1>
<p>Store <code>{{ store }}</code>{% if environment %} · environment <b>{{ environment }}</b>{% endif %} · {{ runs|length }} run(s){% if runs %} from {{ runs[0].created_short }} to {{ runs[-1].created_short }}{% endif %} · generated {{ generated }}</p></div></header>
<main>
{% if latest %}
<h2>Latest run</h2>
<div class="card"><h3>{{ latest.label }} <span class="muted small">{{ latest.created_short }}</span>{% if latest_alerts %} {{ badge(latest_status) }}{% endif %}</h3>
{% if latest_alerts %}<ul class="actions">{% for a in latest_alerts %}<li class="{{ a.status|lower }}"><span class="lvl">{{ a.status }}</span>{{ a.kind }} {{ a.subject }}: {{ a.message }}</li>{% endfor %}</ul>
{% else %}<p class="muted">No alerts recorded for this run (<code>specaudit monitor check</code> records them).</p>{% endif %}
</div>
{% endif %}
<div class="legend small muted">
<span><svg width="22" height="10"><rect x="0" y="1" width="22" height="8" class="pt-ok" opacity=".25"/></svg>{{ ci_text }}</span>
<span><svg width="22" height="10"><line x1="0" x2="22" y1="5" y2="5" stroke="#000" stroke-dasharray="3 3" opacity=".55"/></svg>all prompts of the dimension</span>
<span><svg width="12" height="14"><line x1="6" x2="6" y1="0" y2="14" stroke="{{ colours.purple }}" stroke-width="1.2" stroke-dasharray="4 3"/></svg>target / draft / prompt set / config / library change</span>
<span><svg width="12" height="12">{{ mark("fail", 6, 6, "FAIL") }}</svg>FAIL alert</span>
<span><svg width="12" height="12">{{ mark("warn", 6, 6, "WARN") }}</svg>WARN</span>
</div>
{% for chart in charts %}
<h2>{{ chart.dimension }} · {{ chart.metric }}{% if chart.n_fail %} {{ badge("FAIL") }} <span class="small muted">{{ chart.n_fail }} alert(s)</span>{% endif %}</h2>
<div class="panels">
{% for p in chart.panels %}<figure><figcaption>{{ p.title }}</figcaption>
<svg class="trend" width="{{ p.w }}" height="{{ p.h }}" viewBox="0 0 {{ p.w }} {{ p.h }}" role="img" aria-label="{{ chart.metric }} of {{ p.title }} over runs">
{% for t in p.ticks %}<line class="grid" x1="{{ p.left }}" x2="{{ p.right }}" y1="{{ t.y }}" y2="{{ t.y }}"/><text x="{{ p.left - 4 }}" y="{{ t.y + 3 }}" text-anchor="end">{{ t.label }}</text>
{% endfor %}<line class="axis" x1="{{ p.left }}" x2="{{ p.left }}" y1="{{ p.top }}" y2="{{ p.bottom }}"/><line class="axis" x1="{{ p.left }}" x2="{{ p.right }}" y1="{{ p.bottom }}" y2="{{ p.bottom }}"/>
{% for m in p.markers %}<line class="change" x1="{{ m.x }}" x2="{{ m.x }}" y1="{{ p.top }}" y2="{{ p.bottom }}"><title>{{ m.label }}</title></line>
{% endfor %}{% for b in p.bands %}<path class="band" d="{{ b }}"/>
{% endfor %}{% for l in p.overall %}<polyline class="overall" points="{{ l }}"/>
{% endfor %}{% for l in p.lines %}<polyline class="line" points="{{ l }}"/>
{% endfor %}{% for pt in p.points %}{{ mark(pt.status, pt.x, pt.y, pt.title) }}
{% endfor %}{% for xl in p.xlabels %}<text x="{{ xl.x }}" y="{{ p.bottom + 14 }}" text-anchor="{{ xl.anchor }}">{{ xl.label }}</text>
{% endfor %}</svg></figure>
{% endfor %}</div>
{% else %}<p class="notrun">No metric series to chart{% if metrics %} for {{ metrics|join(", ") }}{% endif %}.</p>
{% endfor %}
<h2>Runs</h2>
<div class="wide"><table><thead><tr><th>run</th><th>created (UTC)</th><th>env</th><th>equivalence</th><th>target</th><th>draft</th><th>prompt set</th><th>changed since previous</th><th class="num">alerts</th></tr></thead>
<tbody>{% for r in runs %}<tr><td>{{ r.label }}{% if r.pinned %} <span class="muted">(baseline)</span>{% endif %}</td><td>{{ r.created_short }}</td><td>{{ r.environment }}</td>
<td>{{ r.equivalence }}</td><td>{{ r.target }}</td><td>{{ r.draft }}</td><td>{{ r.prompt_set }}</td><td>{{ r.changes }}</td><td class="num">{{ r.alerts }}</td></tr>{% endfor %}</tbody></table></div>
<footer>Each point is one stored snapshot; bands are that snapshot's own bootstrap confidence interval (prompts resampled).
Alerts are those recorded by the latest <code>specaudit monitor check</code> of each run: a FAIL drift is a change significant
after Holm correction (normal approximation from the two runs' intervals) and beyond the practical threshold; a CUSUM alert
is a slow drift accumulated over runs. The CSV beside this file holds every number shown.</footer>
</main></body></html>
"""


def _report_css() -> str:
    # The audit report's stylesheet, inlined: the trend report looks like the audit report.
    from importlib.resources import files

    return (files("specaudit.report") / "templates" / "report.css").read_text(encoding="utf-8")


def render_trend_html(
    store: HistoryStore,
    *,
    environment: str | None = None,
    last: int | None = 50,
    metrics: Sequence[str] = DEFAULT_METRICS,
    dimensions: Sequence[str] | None = None,
    title: str | None = None,
) -> tuple[str, list[StoredRun], int]:
    """(HTML, runs shown, number of charts)."""
    import jinja2
    from markupsafe import Markup

    runs, points, alerts, run_alerts = _collect(store, environment, last)
    pins = {r.id for r in store.baselines().values()}
    markers = []
    rows = []
    for i, run in enumerate(runs):
        changed = _changes(runs[i - 1] if i else None, run)
        if changed:
            markers.append((i, f"{run.label}: {', '.join(changed)} changed"))
        stored = run_alerts.get(run.id, [])
        fails = sum(a["status"] == FAIL for a in stored)
        warns = sum(a["status"] == WARN for a in stored)
        rows.append(
            {
                "label": run.label,
                "created_short": run.created[:16].replace("T", " "),
                "name": run.name,
                "environment": run.environment or "-",
                "equivalence": run.equivalence_status,
                "target": run.target,
                "draft": run.draft,
                "prompt_set": f"{run.prompt_set}@{run.prompt_set_version}" if run.prompt_set else "-",
                "changes": ", ".join(changed) or "",
                "alerts": f"{fails} FAIL, {warns} WARN" if stored else "",
                "pinned": run.id in pins,
            }
        )
    charts = _charts(runs, points, alerts, metrics, dimensions, markers)
    latest = runs[-1] if runs else None
    latest_alerts = sorted(run_alerts.get(latest.id, []), key=lambda a: a["status"] != FAIL) if latest else []
    levels = sorted({f"{r.ci_level:.0%}" for r in runs})
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.from_string(_TEMPLATE).render(
        report_css=Markup(_report_css()),
        colours=OKABE_ITO,
        title=title or "specaudit monitoring trend",
        store=store.url,
        environment=environment,
        runs=rows,
        generated=utc_now(),
        charts=charts,
        metrics=list(metrics),
        latest=rows[-1] if rows else None,
        latest_alerts=latest_alerts,
        latest_status=FAIL if any(a["status"] == FAIL for a in latest_alerts) else WARN,
        ci_text=f"{'/'.join(levels) or '95%'} confidence interval of the run",
    )
    return html, list(runs), len(charts)


def write_trend_report(
    store: HistoryStore,
    out_dir: str | Path,
    *,
    environment: str | None = None,
    last: int | None = 50,
    metrics: Sequence[str] = DEFAULT_METRICS,
    dimensions: Sequence[str] | None = None,
    title: str | None = None,
) -> TrendReport:
    """Write out_dir/trend.html and out_dir/trend.csv (each atomically)."""
    out = Path(out_dir)
    html, runs, n_charts = render_trend_html(store, environment=environment, last=last, metrics=metrics, dimensions=dimensions, title=title)
    rows = trend_rows(store, environment=environment, last=last, metrics=metrics, dimensions=dimensions)
    html_path = write_atomic(out / "trend.html", html)
    csv_path = write_atomic(out / "trend.csv", trend_csv(rows))
    return TrendReport(html_path, csv_path, len(runs), n_charts)
