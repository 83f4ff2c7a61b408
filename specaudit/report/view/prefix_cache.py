"""The report's prefix-cache part (a run with `--prefix-cache`): equivalence per cache state, the
prompt tokens each state's requests reused from the server's cache, and the requests that were
not in their state (warm requests that reused nothing, cold ones that reused tokens). Read from
the snapshot's `prefix_cache` section only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.contracts.snapshot import LevelMetrics
from specaudit.report.view.concurrency import interval_text
from specaudit.report.view.format import badge

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import Snapshot


def prefix_cache_view(snapshot: Snapshot) -> dict[str, Any]:
    section = snapshot.prefix_cache
    if section is None:
        return {"ran": False}
    rows = []
    for state in section.states:
        battery = section.equivalence.get(state)
        metrics = section.metrics.get(state) or LevelMetrics()
        for engine, c in sorted(section.counts.get(state, {}).items()):
            rows.append(
                {
                    "state": state,
                    "engine": engine,
                    "badge": badge(battery.status if battery is not None else None),
                    "verdict": str((battery.engines[engine].status if battery is not None and engine in battery.engines else "") or ""),
                    "holm_p": _holm_p(battery.engines.get(engine) if battery is not None else None),
                    "records": c["records"],
                    "judged": c["judged"],
                    "tokens": c["tokens"],
                    "hits": c["hits"],
                    "misses": c["misses"],
                    "unreported": c["unreported"],
                    "reused": f"{c['reused_tokens'] / c['hits']:.1f}" if c["hits"] else "-",
                    "acceptance": interval_text(metrics.acceptance, fmt=lambda v: f"{v:.2f}") if engine != CONTROL_ENGINE else "",
                    "speedup": interval_text(metrics.speedup, fmt=lambda v: f"{v:.2f}", suffix="×") if engine != CONTROL_ENGINE else "",
                }
            )
    return {
        "ran": True,
        "message": section.message or "",
        "alpha": f"{section.state_alpha:.3g}",
        "rows": rows,
    }


def _holm_p(entry: Any) -> str:
    """The smallest Holm-adjusted p of an engine's tests in a state (analysis.prefix_cache.smallest_holm_p's rule,
    read from the snapshot: the report never imports the analysis)."""
    values = [
        row.holm_pvalue
        for part in (getattr(entry, "goodness_of_fit", None), getattr(entry, "two_sample", None))
        if part is not None
        for row in part.gate
        if row.holm_pvalue is not None
    ]
    return f"{min(values):.3g}" if values else "-"


def prefix_cache_markdown(view: Mapping[str, Any]) -> list[str]:
    """summary.md lines for the part (none for a run without --prefix-cache)."""
    part = view["prefix_cache"]
    if not part["ran"]:
        return []
    lines = ["", "## Prefix cache", ""]
    if part["message"]:
        lines += [f"**{part['message']}**", ""]
    lines += [
        f"Each state's battery at alpha {part['alpha']}.",
        "",
        "| state | engine | equivalence | smallest Holm p | records | judged | tokens | reused prompt tokens | reused none | no count | mean reused "
        "prompt tokens (where any) | acceptance | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in part["rows"]:
        lines.append(
            f"| {r['state']} | {r['engine']} | {r['badge']['symbol']} {r['badge']['text']} {r['verdict']} | {r['holm_p']} | {r['records']} | "
            f"{r['judged']} | {r['tokens']} | {r['hits']} | {r['misses']} | {r['unreported']} | {r['reused']} | "
            f"{r['acceptance']} | {r['speedup']} |"
        )
    return lines


__all__ = ["prefix_cache_markdown", "prefix_cache_view"]
