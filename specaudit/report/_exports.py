"""summary.md, groups.csv and junit.xml: the report's headline for pull requests, its numbers
for spreadsheets, and the gate's checks for CI systems."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from specaudit.report._format import MISSING, finite, get

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


def summary_markdown(view: Mapping[str, Any]) -> str:
    run, summary = view["run"], view["summary"]
    lines = [f"# specaudit: {md_escape(run.get('id', 'run'))}", ""]
    lines.append(f"Target `{_code(run.get('target'))}`, draft `{_code(run.get('draft'))}`; engines {md_escape(run.get('engines'))}; "
                 f"{md_escape(run.get('n_prompts'))} prompts, {md_escape(run.get('n_output_tokens'))} output tokens; "
                 f"{md_escape(run.get('sampling'))}, k = {md_escape(run.get('k'))}.")
    lines.append("")
    if summary.get("broken"):
        return "\n".join([*lines, md_escape(summary.get("reason")), ""])
    lines += ["| verdict | status | finding |", "|---|---|---|"]
    for b in summary["badges"]:
        lines.append(f"| {b['label']} | **{b['badge']['symbol']} {b['badge']['text']}** | {md_escape(b['line'])} |")
    lines += ["", "## What to do", ""]
    for action in summary["actions"]:
        word = {"fail": "MUST", "warn": "SHOULD", "pass": "OK"}.get(action["level"], action["level"].upper())
        lines.append(f"- **{word}**: {md_escape(action['text'])}")
    if summary["headline"]:
        lines += ["", "## Headline numbers", "", "| measure | value [95% CI] | context |", "|---|---:|---|"]
        for row in summary["headline"]:
            lines.append(f"| {md_escape(row['what'])} | {md_escape(row['value'])} | {md_escape(row['note'])} |")
    gate = view["gate"]
    if gate.get("ran"):
        lines += ["", "## Gate checks", "", "| status | check | finding |", "|---|---|---|"]
        for check in gate["checks"]:
            lines.append(f"| {check['badge']['text']} | `{_code(check['name'])}` | {md_escape(check['message'])} |")
    lines += ["", "Full report: `report.html` (self-contained; open it in a browser or print it to PDF).", ""]
    return "\n".join(lines)


def _code(text: Any) -> str:
    """Inside backticks only a backtick needs care; newlines would end the span."""
    return " ".join(str(text).replace("`", "'").split())


# ============================================================================ groups.csv
CSV_COLUMNS = ("dimension", "group", "kind", "metric", "value", "ci_low", "ci_high", "n_prompts", "n_tokens")


def _csv_text(value: Any) -> str:
    # A cell starting with = + - @ is run as a formula by spreadsheets (CSV injection): quote it.
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv_number(value: Any) -> str:
    return repr(float(value)) if finite(value) else ""


def groups_rows(snapshot: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per dimension × group × metric (the overall population has kind 'overall')."""
    rows = []
    for dimension, part in (get(snapshot, "groups", default={}) or {}).items():
        entries = [("overall", "overall", get(part, "overall", default={}))]
        entries += [(group, "group", entry) for group, entry in (get(part, "by_group", default={}) or {}).items()]
        for group, kind, entry in entries:
            for metric, block in (get(entry, "metrics", default={}) or {}).items():
                rows.append({
                    "dimension": _csv_text(dimension), "group": _csv_text(group), "kind": kind, "metric": _csv_text(metric),
                    "value": _csv_number(get(block, "value")), "ci_low": _csv_number(get(block, "ci_low")),
                    "ci_high": _csv_number(get(block, "ci_high")),
                    "n_prompts": str(int(block["n_prompts"])) if finite(get(block, "n_prompts")) else "",
                    "n_tokens": str(int(block["n_tokens"])) if finite(get(block, "n_tokens")) else "",
                })
    return rows


def groups_csv(snapshot: Mapping[str, Any]) -> str:
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


def junit_xml(gate: Any, *, suite: str = "specaudit gate") -> str:
    """One test case per gate check: FAIL → <failure>, WARN → <skipped> (with the reason in
    system-out too), PASS → a plain test case. No gate yet → one skipped case saying so."""
    checks = [c for c in (gate.get("checks") or []) if isinstance(c, Mapping)] if isinstance(gate, Mapping) else []
    root = ET.Element("testsuites", name="specaudit")
    failures = sum(c.get("status") == "fail" for c in checks)
    skipped = sum(c.get("status") not in ("pass", "fail") for c in checks)
    tests = len(checks) or 1
    suite_el = ET.SubElement(root, "testsuite", name=suite, tests=str(tests), failures=str(failures), errors="0",
                             skipped=str(skipped if checks else 1))
    root.set("tests", str(tests))
    root.set("failures", str(failures))
    if not checks:
        case = ET.SubElement(suite_el, "testcase", classname="specaudit.gate", name="gate")
        ET.SubElement(case, "skipped", message="gate not run: run `specaudit gate SNAPSHOT --write` to judge this snapshot")
    for check in checks:
        name = str(check.get("name", MISSING))
        family = name.split("[", 1)[0]
        case = ET.SubElement(suite_el, "testcase", classname=_xml_text(f"specaudit.gate.{family}"), name=_xml_text(name))
        message = _xml_text(check.get("message", ""))
        status = check.get("status")
        if status == "fail":
            failure = ET.SubElement(case, "failure", message=message, type="FAIL")
            failure.text = _xml_text(f"{check.get('title', name)}: {message}")
        elif status != "pass":
            ET.SubElement(case, "skipped", message=f"WARN: {message}")
            ET.SubElement(case, "system-out").text = _xml_text(f"WARN {check.get('title', name)}: {message}")
        else:
            ET.SubElement(case, "system-out").text = _xml_text(f"PASS {check.get('title', name)}: {message}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


__all__ = ["CSV_COLUMNS", "groups_csv", "groups_rows", "junit_xml", "md_escape", "summary_markdown"]
