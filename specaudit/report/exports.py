"""summary.md, groups.csv and junit.xml: the report's headline for pull requests, its numbers
for spreadsheets, and the gate's checks for CI systems."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit.contracts import CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.contracts.snapshot import CheckDetails, DimensionDisparities, GroupEntry, MetricEstimate, read_snapshot
from specaudit.report.view.concurrency import concurrency_markdown
from specaudit.report.view.format import finite, recorded
from specaudit.report.view.prefix_cache import prefix_cache_markdown
from specaudit.report.view.shapes import shapes_markdown

if TYPE_CHECKING:
    from specaudit.contracts.snapshot import GateCheckEntry, Snapshot

# ============================================================================ summary.md
# Only what can start markup inside running text or a table cell: links need "[", emphasis "*"/"_",
# code "`", tables "|", strikethrough "~"; "<", ">" and "&" become entities first.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: Any) -> str:
    """Markdown-safe text: HTML specials become entities (a `<script>` group name stays text on
    any renderer) and Markdown punctuation is backslash-escaped; newlines become spaces."""
    text = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = " ".join(text.split())
    return _MD_SPECIAL.sub(r"\\\1", text)


def _glossary_markdown(text: str) -> list[str]:
    """The terms the summary uses, each explained once (the report's glossary, same words)."""
    from specaudit.report.view.glossary import glossary_for

    rows = glossary_for(text)
    return ["", "## Glossary", "", "| term | meaning |", "|---|---|"] + [f"| {md_escape(t)} | {md_escape(m)} |" for t, m in rows]


def _group_names_markdown(view: Mapping[str, Any]) -> list[str]:
    """The prompt set's readable names of its group codes (`sae`: Standard American English)."""
    rows = view["group_names"]
    if not rows:
        return []
    return ["", "## Group names", "", "| dimension | group | name |", "|---|---|---|"] + [
        f"| {md_escape(d)} | `{_code(g)}` | {md_escape(n)} |" for d, g, n in rows
    ]


def summary_markdown(view: Mapping[str, Any]) -> str:
    """The decision first, then the gate line, the cards, what to do (with commands) and the checks."""
    run, summary = view["run"], view["summary"]
    if not summary["ran"]:  # the guard's note: the summary could not be built
        return "\n".join([f"# specaudit: {md_escape(run['id'] if run['ran'] else 'run')}", "", md_escape(summary["reason"]), ""])
    decision = summary["decision"]
    lines = [f"# Decision: {decision['title']}", "", f"**{decision['gate']}**", ""]
    if decision["gate_note"]:
        lines += [md_escape(decision["gate_note"]).replace("\\`", "`"), ""]
    lines += [f"- {md_escape(r)}" for r in decision["reasons"]]
    lines += [
        "",
        (
            f"Run `{_code(run['id'])}`: target `{_code(run['target'])}`, draft `{_code(run['draft'])}`; "
            f"{md_escape(run['n_prompts'])} prompts, {md_escape(run['n_output_tokens'])} output tokens; "
            f"{md_escape(run['sampling'])}, {md_escape(run['steps'])}."
            if run["ran"]
            else f"Run: {md_escape(run['reason'])}."  # the guard's note: the run header could not be built
        ),
        "",
    ]
    lines += ["| | status | finding |", "|---|---|---|"]
    for card in summary["cards"]:
        finding = " ".join(card.lines) + (f" Timed under: {'; '.join(card.conditions)}." if card.conditions else "")
        lines.append(f"| {card.label} | **{card.badge['symbol']} {card.badge['text']}** | {md_escape(finding)} |")
    lines += ["", "## What to do", ""]
    for action in summary["actions"]:
        word = {"fail": "MUST", "warn": "SHOULD", "pass": "OK"}[action["level"]]  # the only levels actions() gives
        lines.append(f"1. **{word}**: {md_escape(action['text'])}")
        if action["command"]:
            lines.append(f"   `{_code(action['command'])}`")
    sampling = summary["sampling"]
    if sampling.ran:
        lines += ["", f"## Sampling setting tested: {md_escape(sampling.label)}", ""]
        lines += ["| bug class | reported in | can this setting show it? |", "|---|---|---|"]
        for row in sampling.rows:
            answer = "yes" if row["visible"] else f"**no**: {md_escape(row['blind_when'])}"
            lines.append(f"| {md_escape(row['class'])}: {md_escape(row['example'])} | {md_escape(row['reports'])} | {answer} |")
    lines += ["", "## Audit subject", "", "| | |", "|---|---|"]
    lines += [f"| {md_escape(label)} | {md_escape(text)} |" for label, text in summary["subject"]]
    compare = view["compare"]
    if compare["ran"]:  # not the guard's note, which has ran False
        c = compare["counts"]
        lines += [
            "",
            f"## Compared with {md_escape(compare['label'])}",
            "",
            f"{c['FAIL']} worse, {c['WARN']} changed, {c['PASS']} without a significant change (per group and metric).",
        ]
    gate = view["gate"]
    if gate["ran"]:
        lines += ["", "## Gate checks", ""]
        if gate["thresholds"]:
            lines += ["Thresholds: " + "; ".join(f"{md_escape(t['name'])} = {md_escape(t['value'])}" for t in gate["thresholds"]) + ".", ""]
        lines += ["| status | check | finding |", "|---|---|---|"]
        for check in gate["checks"]:
            lines.append(f"| {check['badge']['text']} | `{_code(check['name'])}` | {md_escape(check['message'])} |")
    lines += concurrency_markdown(view)
    lines += prefix_cache_markdown(view)
    lines += shapes_markdown(view)
    lines += _glossary_markdown("\n".join(lines))
    lines += _group_names_markdown(view)
    lines += ["", "Full report: `report.html` (self-contained; open it in a browser or print it to PDF).", ""]
    return "\n".join(lines)


def _code(text: Any) -> str:
    """Inside backticks only a backtick needs care; newlines would end the span."""
    return " ".join(str(text).replace("`", "'").split())


# ============================================================================ groups.csv
CSV_COLUMNS = (
    "run_id",
    "target",
    "draft",
    "dimension",
    "group",
    "is_reference",
    "kind",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n_prompts",
    "n_tokens",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "pvalue",
    "pvalue_holm",
    "status",
)


def _csv_text(value: Any) -> str:
    # A cell starting with = + - @ is run as a formula by spreadsheets (CSV injection): quote it.
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv_number(value: Any) -> str:
    return repr(float(value)) if finite(value) else ""


def groups_rows(snapshot: Snapshot | Mapping[str, Any] | str | Path) -> list[dict[str, str]]:
    """One row per dimension × group × metric (the overall population has kind 'overall'), with the
    group's ratio to its reference, the test's p and Holm p and its DisparityStatus where compared."""
    from specaudit.report.view.statuses import band_of, comparison_status
    from specaudit.report.view.subject import subject_ids

    snapshot = read_snapshot(snapshot)
    target, draft = (_csv_text(text) for text in subject_ids(snapshot))
    run_id = _csv_text(snapshot.run.id or "")
    rows = []
    for dimension, part in snapshot.groups.items():
        disparity = snapshot.disparities.get(dimension) or DimensionDisparities()
        reference = disparity.reference or part.reference
        band = band_of(disparity)
        entries = [("overall", "overall", part.overall or GroupEntry(metrics={}))]
        entries += [(group, "group", entry) for group, entry in part.by_group.items()]
        for group, kind, entry in entries:
            for metric, block in entry.metrics.items():
                compared_metric = disparity.metrics.get(metric)
                compared = compared_metric.pairwise.get(group) if compared_metric is not None and kind == "group" else None
                is_reference = kind == "group" and str(group) == str(reference)
                ratio = (compared.ratio if compared is not None else None) or MetricEstimate(value=None)
                status = (
                    comparison_status(compared, band).value
                    if compared is not None
                    else "reference"
                    if is_reference and compared_metric is not None
                    else ""
                )
                rows.append(
                    {
                        "run_id": run_id,
                        "target": target,
                        "draft": draft,
                        "dimension": _csv_text(dimension),
                        "group": _csv_text(group),
                        "is_reference": "true" if is_reference else "false",
                        "kind": kind,
                        "metric": _csv_text(metric),
                        "value": _csv_number(block.value),
                        "ci_low": _csv_number(block.ci_low),
                        "ci_high": _csv_number(block.ci_high),
                        "n_prompts": str(block.n_prompts) if block.n_prompts is not None else "",
                        "n_tokens": str(block.n_tokens) if block.n_tokens is not None else "",
                        "ratio": _csv_number(ratio.value),
                        "ratio_ci_low": _csv_number(ratio.ci_low),
                        "ratio_ci_high": _csv_number(ratio.ci_high),
                        "pvalue": _csv_number(compared.pvalue if compared is not None else None),
                        "pvalue_holm": _csv_number(compared.pvalue_holm if compared is not None else None),
                        "status": status,
                    }
                )
    return rows


def groups_csv(snapshot: Snapshot | Mapping[str, Any] | str | Path) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(groups_rows(snapshot))
    return buffer.getvalue()


# ============================================================================ junit.xml
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(value: Any) -> str:
    """XML 1.0 cannot carry most control characters even escaped; token strings can hold them."""
    return _XML_INVALID.sub("\ufffd", str(value))


INSUFFICIENT = DisparityStatus.INSUFFICIENT


def _junit_status(check: GateCheckEntry) -> CheckStatus | DisparityStatus:
    """The check's CheckStatus, or INSUFFICIENT for a check that could not judge (it says it was
    not run, or its comparisons are INSUFFICIENT): CI shows those as skipped, with the reason."""
    details = check.details or CheckDetails()
    if check.status is not CheckStatus.FAIL and (details.not_run or str(details.written("status", "")).upper() == INSUFFICIENT):
        return INSUFFICIENT
    return check.status


def junit_xml(snapshot: Snapshot | Mapping[str, Any] | str | Path, *, suite: str = "specaudit gate") -> str:
    """One test case per check of the snapshot's gate. FAIL → <failure>; WARN → a passed case (CI
    must not read a warning as "not run") with a `status` property and the finding in system-out; a
    check that could not judge (INSUFFICIENT, not run) → <skipped> with its reason; PASS → a plain
    case. The suite carries target, draft, seed and commit as properties, a timestamp and a time."""
    from specaudit.report.view.subject import subject, subject_ids

    snapshot = read_snapshot(snapshot)
    gate, run = snapshot.gate, snapshot.run
    checks = gate.checks if gate is not None else []
    root = ET.Element("testsuites", name="specaudit")
    statuses = [_junit_status(c) for c in checks]
    failures = statuses.count(CheckStatus.FAIL)
    skipped = statuses.count(INSUFFICIENT) if checks else 1
    tests = len(checks) or 1
    seconds = run.analysis.seconds if run.analysis is not None else None
    suite_el = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(tests),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        timestamp=_xml_text(run.created or ""),
        time=f"{float(seconds):.3f}" if finite(seconds) else "0",
    )
    root.set("tests", str(tests))
    root.set("failures", str(failures))
    about = dict(subject(snapshot))
    target, draft = subject_ids(snapshot)
    properties = ET.SubElement(suite_el, "properties")
    for name, value in (
        ("run_id", run.id),
        ("target", target),
        ("draft", draft),
        ("seed", about["Seed"]),
        ("commit", about["specaudit"]),
        ("gate_status", gate.status if gate is not None else EquivalenceStatus.NOT_RUN),
    ):
        ET.SubElement(properties, "property", name=name, value=_xml_text(recorded(value)))
    if not checks:
        case = ET.SubElement(suite_el, "testcase", classname="specaudit.gate", name="gate")
        ET.SubElement(case, "skipped", message="gate not run: run `specaudit gate SNAPSHOT --write` to judge this snapshot")
    for check, status in zip(checks, statuses):
        name = str(recorded(check.name))
        family = name.split("[", 1)[0]
        case = ET.SubElement(suite_el, "testcase", classname=_xml_text(f"specaudit.gate.{family}"), name=_xml_text(name), time="0")
        message = _xml_text(recorded(check.message, ""))
        title = recorded(check.title, name)
        ET.SubElement(
            ET.SubElement(case, "properties"),
            "property",
            name="status",
            value=status,
        )
        if status is CheckStatus.FAIL:
            failure = ET.SubElement(case, "failure", message=message, type=CheckStatus.FAIL)
            failure.text = _xml_text(f"{title}: {message}")
        elif status in (CheckStatus.WARN, CheckStatus.PASS):
            ET.SubElement(case, "system-out").text = _xml_text(f"{status} {title}: {message}")
        else:
            ET.SubElement(case, "skipped", message=_xml_text(f"INSUFFICIENT: {message}"))
            ET.SubElement(case, "system-out").text = _xml_text(f"INSUFFICIENT {title}: {message}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


__all__ = ["CSV_COLUMNS", "groups_csv", "groups_rows", "junit_xml", "md_escape", "summary_markdown"]
