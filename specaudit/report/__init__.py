"""snapshot.json → report.html, summary.md, groups.csv, junit.xml.

The report reads only the snapshot (docs/ARCHITECTURE.md, Contracts), as the typed, validated
model (`specaudit.contracts.snapshot.Snapshot`): a snapshot that breaks the contract is refused
with one sentence (InputError), never half-rendered. Any optional section may be missing or
"not run": the report then says so, and the rest still renders.

    from specaudit.contracts.snapshot import read_snapshot
    from specaudit.report import render_report
    paths = render_report(read_snapshot("reports/run-1"), "reports/run-1")  # or the path itself
    paths["html"]  # reports/run-1/report.html
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit._files import check_output_paths, write_all_atomic
from specaudit.contracts.snapshot import Snapshot, read_snapshot
from specaudit.report.exports import groups_csv, groups_rows, junit_xml, summary_markdown
from specaudit.report.view import build_view

if TYPE_CHECKING:
    import jinja2

OUTPUT_FILES = {"html": "report.html", "summary": "summary.md", "groups": "groups.csv", "junit": "junit.xml"}


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("specaudit.report", "templates"),
        autoescape=True,  # every prompt, group name and token string is escaped unless a chart marks itself safe
        undefined=jinja2.ChainableUndefined,  # a view key a snapshot lacks renders empty, never raises
        trim_blocks=False,
        lstrip_blocks=False,
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("specaudit")
    except Exception:  # running from a source tree without metadata
        return "dev"


def render_html(
    snapshot: Snapshot | Mapping[str, Any] | str | Path,
    compare: Snapshot | Mapping[str, Any] | str | Path | None = None,
    compare_label: str = "",
) -> str:
    """The self-contained HTML report of a snapshot, as a string (with `compare`, another run's
    snapshot: a section of what changed per group)."""
    view = build_view(snapshot, compare, compare_label)
    return _environment().get_template("report.html.j2").render(v=view, version=_version())


def render_summary(snapshot: Snapshot | Mapping[str, Any] | str | Path) -> str:
    """The report's headline (verdicts, what to do, headline numbers, gate checks) in Markdown."""
    return summary_markdown(build_view(snapshot))


def render_report(
    snapshot: Snapshot | Mapping[str, Any] | str | Path,
    out_dir: str | Path,
    *,
    compare: Snapshot | Mapping[str, Any] | str | Path | None = None,
    compare_label: str = "",
) -> dict[str, Path]:
    """Write report.html, summary.md, groups.csv and junit.xml into ``out_dir``; return their paths
    by kind ("html", "summary", "groups", "junit"). ``snapshot`` (and ``compare``, another run's
    snapshot, shown per group with the monitor's drift tests) is a Snapshot, or a mapping, a
    snapshot.json path or its run folder, validated into one (InputError if it breaks the contract)."""
    snapshot = read_snapshot(snapshot)
    compare = read_snapshot(compare) if compare is not None else None
    out_dir = Path(out_dir)
    paths = {kind: out_dir / name for kind, name in OUTPUT_FILES.items()}
    check_output_paths(paths.values(), "report file")  # before rendering: all four files or none
    view = build_view(snapshot, compare, compare_label)
    contents = {
        paths["html"]: _environment().get_template("report.html.j2").render(v=view, version=_version()),
        paths["summary"]: summary_markdown(view),
        paths["groups"]: groups_csv(snapshot),
        paths["junit"]: junit_xml(snapshot),
    }
    write_all_atomic(contents, "report file")
    return paths


__all__ = [
    "OUTPUT_FILES",
    "groups_csv",
    "groups_rows",
    "junit_xml",
    "render_html",
    "render_report",
    "render_summary",
]
