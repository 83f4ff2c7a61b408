"""Plain-text views of prompt sets for the command line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from specaudit.prompts._load import ChecksumEntry
from specaudit.prompts._manifest import (
    DimensionSpec,
    Manifest,
    display_path,
    list_prompt_sets,
    manifest_for,
)
from specaudit.prompts._model import ValidationReport
from specaudit.prompts._read import SourceRow, parse_column_map, read_file
from specaudit.prompts._stats import provenance_counts

MAX_ISSUES_SHOWN = 50


def _groups_text(groups: list[str] | tuple[str, ...], reference: str | None) -> str:
    return ", ".join(f"{g}*" if g == reference else g for g in groups)


def _kind(spec: DimensionSpec) -> str:
    if spec.pairing == "reference":
        return "paired"  # each pair: a reference prompt and its twin in one other group
    return "parallel" if spec.parallel else "independent"


def _provenance_lines(counts: list[tuple[str, str, str, int]], indent: str, unit: str) -> list[str]:
    """One line per distinct provenance (from provenance_counts): "N rows: author, date, method"."""
    return [
        f"{indent}{n} {unit}(s) record no provenance" if author == "(none)" else f"{indent}{n} {unit}(s): {author}, {date}, {method}"
        for author, date, method, n in counts
    ]


def format_prompt_sets() -> str:
    """`prompts list`: every named set with version, size and groups (reference group starred)."""
    manifests = list_prompt_sets()
    if not manifests:
        return "no prompt sets found (looked in ./prompt_sets, the checkout's prompt_sets/ and $SPECAUDIT_PROMPT_SETS)"
    lines = []
    for m in manifests:
        size = m.n_prompts
        lines.append(f"{m.name}  v{m.version}  {size if size is not None else '?'} prompts  ({display_path(m.directory)})")
        for dim, spec in m.dimensions.items():
            lines.append(f"    {dim:<12} {_kind(spec):<11} {_groups_text(spec.groups, spec.reference)}")
    lines.append("(* = reference group)")
    return "\n".join(lines)


def describe_prompt_set(source: str | Path, examples: int = 2) -> str:
    """`prompts show`: manifest summary and the first rows of each dimension's file (unvalidated)."""
    m: Manifest = manifest_for(source)
    lines = [f"{m.name}  version {m.version}  ({display_path(m.directory)})"]
    if m.description:
        lines += textwrap.wrap(m.description, width=96, initial_indent="  ", subsequent_indent="  ")
    lines.append(f"  license: {m.license or 'not stated'};  minimum group size: {m.min_group_size}")
    for dim, spec in m.dimensions.items():
        entry = m.files.get(spec.file)
        rows = entry.rows if entry is not None and entry.rows is not None else "?"
        lines.append("")
        lines.append(f"  {dim}: {spec.file}, {rows} rows, {_kind(spec)}, reference {spec.reference or 'none'}")
        lines.append(f"    groups: {_groups_text(spec.groups, spec.reference)}")
        path = m.directory / spec.file
        if not path.is_file():
            lines.append("    (file missing)")
            continue
        result = read_file(path, parse_column_map(None))
        if result.failure is not None:
            lines.append(f"    (unreadable: {result.failure[2]})")
            continue
        lines.append("    provenance:")
        lines += _provenance_lines(provenance_counts([row.extra.get("provenance") for row in result.rows]), "      ", "row")
        for row in result.rows[:examples]:
            lines.append(f"    [{row.id}] {row.attributes}  {_preview(row)}")
    return "\n".join(lines)


def _preview(row: SourceRow) -> str:
    shown = row.text if row.text is not None else row.messages
    text = " ".join(str(shown).split())
    return text if len(text) <= 100 else text[:99] + "…"


def format_validation(report: ValidationReport) -> tuple[str, str]:
    """(warnings text, errors text) with long lists cut, for stdout and stderr."""

    def cut(issues: tuple, label: str) -> str:
        shown = [f"{label}: {issue}" for issue in issues[:MAX_ISSUES_SHOWN]]
        if len(issues) > MAX_ISSUES_SHOWN:
            shown.append(f"... and {len(issues) - MAX_ISSUES_SHOWN} more {label}s")
        return "\n".join(shown)

    return cut(report.warnings, "warning"), cut(report.errors, "error")


def format_stats(table: pd.DataFrame, min_group_size: int | None) -> str:
    if table.empty:
        return "no groups: the prompts carry no group attributes"
    view = table.copy()
    view["group"] = [f"{g}*" if ref else g for g, ref in zip(view["group"], view["reference"])]
    view = view.drop(columns=["reference", "below_min_size"])
    if view["zipf_median"].isna().all():
        view = view.drop(columns=["zipf_median"])
    else:
        view["zipf_median"] = ["-" if pd.isna(v) else f"{v:.2f}" for v in view["zipf_median"]]
    text = view.to_string(index=False)
    provenance = table.attrs.get("provenance")
    if provenance:
        text += "\nprovenance:\n" + "\n".join(_provenance_lines(provenance, "  ", "prompt"))
    small = table[table["below_min_size"]]
    if min_group_size is None:
        return text
    if small.empty:
        return text + f"\nevery group has at least {min_group_size} prompts"
    names = ", ".join(f"{d}/{g}" for d, g in zip(small["dimension"], small["group"]))
    return text + f"\ngroups below {min_group_size} prompts: {names}"


def format_checksums(entries: list[ChecksumEntry], written: bool) -> str:
    lines = [f"{e.file}  sha256 {e.sha256}  rows {e.rows}  [{e.status}]" for e in entries]
    stale = [e for e in entries if e.status != "ok"]
    if written:
        lines.append("manifest.yaml updated" if stale else "manifest.yaml already up to date")
    elif stale:
        lines.append("manifest.yaml is out of date; rerun with --write to record these checksums")
    return "\n".join(lines)
