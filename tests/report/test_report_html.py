"""report.html, summary.md, groups.csv and junit.xml from a real snapshot and from edited ones."""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import json
import re
import xml.etree.ElementTree as ET
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_inputs import HOSTILE_GROUP, HOSTILE_ID, HOSTILE_TOKEN

from specaudit.cli import main
from specaudit.contracts import CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.contracts.snapshot import BatteryTest, Comparison, EngineEquivalence, load_snapshot, read_snapshot
from specaudit.errors import InputError
from specaudit.gate import GateThresholds, evaluate_gate
from specaudit.report import OUTPUT_FILES, groups_rows, junit_xml, render_html, render_report, render_summary
from specaudit.report.charts import GROUP_COLOURS, STATUS_STYLE, contrast_ratio
from specaudit.report.exports import CSV_COLUMNS, md_escape
from specaudit.report.view.statuses import comparison_status, engine_status, not_run_reason
from specaudit.report.view.subject import with_flags

MAX_BYTES = 2 * 1024 * 1024
BARE = {"schema_version": 1, "run": {}, "equivalence": {"status": "not run"}, "groups": {}}  # the least a snapshot holds


class _Elements(HTMLParser):
    """Tags (with attributes) and the text inside each <section id=...>, from the real parser."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.section: str | None = None
        self.section_text: dict[str, list[str]] = {}
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "section":
            self.section = attrs.get("id")
            self.section_text.setdefault(self.section, [])

    def handle_endtag(self, tag):
        if tag == "section":
            self.section = None

    def handle_data(self, data):
        if self.section:
            self.section_text[self.section].append(data)


def _parse(html: str) -> _Elements:
    parser = _Elements()
    parser.feed(html)
    return parser


def _section(parsed: _Elements, name: str) -> str:
    return " ".join(" ".join(parsed.section_text.get(name, [])).split())


def _gated(snapshot, thresholds=None):
    snapshot["gate"] = evaluate_gate(snapshot, thresholds).to_dict()
    return snapshot


# ---------------------------------------------------------------------------- the four files
def test_render_report_writes_all_outputs(tmp_path, snapshot):
    paths = render_report(_gated(snapshot), tmp_path / "out")
    assert set(paths) == set(OUTPUT_FILES) and all(p.parent == tmp_path / "out" for p in paths.values())
    html = paths["html"].read_text(encoding="utf-8")
    assert 20_000 < len(html.encode()) < MAX_BYTES
    assert "could not be rendered" not in html  # every section understood the real snapshot
    assert not list((tmp_path / "out").glob(".*.tmp"))  # staging files renamed into place
    assert render_html(snapshot) == html  # deterministic: same snapshot, same bytes


def test_report_shows_every_required_part(snapshot):
    html = render_html(_gated(snapshot))
    parsed = _parse(html)
    summary, equivalence = _section(parsed, "summary"), _section(parsed, "equivalence")
    disparity, gate, actions = _section(parsed, "disparity"), _section(parsed, "gate"), _section(parsed, "actions")
    repro, method, about = _section(parsed, "reproducibility"), _section(parsed, "methodology"), _section(parsed, "subject")
    # the decision first, from the gate: the fixture's hf-assisted engine violates the target distribution
    assert summary.startswith("Decision ")
    engines = snapshot["equivalence"]["engines"]
    assert engines["hf-assisted"]["verdict"] == CheckStatus.FAIL and snapshot["gate"]["status"] == CheckStatus.FAIL
    assert "Do not enable" in summary and "Gate: FAIL (exit 1)" in summary
    assert "hf-assisted: its output is not distributed as the target's" in summary
    for card in ("Correctness", "Fairness", "Speed", "Timed under:", "CPU thread"):
        assert card in summary, card
    assert re.search(r"Measured overall speed-up \d\.\d\d× \[\d\.\d\d, \d\.\d\d\]", summary)
    assert "Do not ship hf-assisted" in actions and "MUST" in actions
    # the audit subject: target and its hash, the draft as what it is, decoding, hardware, seed, prompt set, version, date
    run = snapshot["run"]
    for words in (
        "Target",
        "Draft",
        "Decoding",
        "Hardware",
        "Seed",
        "Prompt set",
        "specaudit",
        "Date",
        run["prompt_set"]["checksum"],
        run["created"],
        "k = 4",
    ):
        assert str(words) in about, words
    assert next(iter(run["models"]["target"]["sha256"].values())) in about
    # correctness: every engine, each test with statistic, p, Holm p; bound, power, PIT chart
    for engine in engines:
        assert engine in equivalence
    for words in (
        "PIT uniformity (Anderson–Darling)",
        "surprisal martingale",
        "Holm p",
        "Equivalence bound",
        "What this budget could detect",
        "Two-sample tests against vanilla",
        "REJECTED",
    ):
        assert words in equivalence, words
    assert "PASS" not in equivalence.replace("PASSES", "")  # a test that does not reject is "not rejected", never PASS
    spec_p = engines["speculative"]["goodness_of_fit"]["tests"]["surprisal"]["pvalue"]
    assert f"{spec_p:.3f}" in equivalence or spec_p < 0.001
    # fairness: one forest per dimension, group sizes, tests, drill-down, fallback
    for words in (
        "ratio to",
        "each group against",
        "Holm p",
        "Token-level drill-down",
        "Acceptance by draft position",
        "Fallback simulation",
        "Recommendations",
        "Most-corrected tokens",
    ):
        assert words in disparity, words
    assert "plain (3)" in html
    # gate: one row per check
    assert all(c["name"] in gate for c in snapshot["gate"]["checks"])
    # reproducibility: command, model hashes, versions, seeds, prompt-set checksum
    assert run["command"] in repro and run["prompt_set"]["checksum"] in repro
    assert run["versions"]["torch"] in repro and "seed: run" in repro
    assert "Holm" in method and "bootstrap" in method
    # charts: inline SVG, each with a title, a description and an aria-label
    svgs = [attrs for tag, attrs in parsed.tags if tag == "svg"]
    assert len(svgs) >= len(engines) + 1 + 1  # PIT per engine, one forest per dimension, drill-down panels
    assert all(a.get("role") == "img" and a.get("aria-label") and a.get("aria-labelledby") for a in svgs)
    ids = {a.get("id") for _, a in parsed.tags if a.get("id")}
    for a in svgs:
        assert all(part in ids for part in a["aria-labelledby"].split())
    assert html.count("<title id=") == html.count("<desc id=") == len(svgs)


def test_report_is_self_contained_and_printable(snapshot):
    html = render_html(_gated(snapshot))
    parsed = _parse(html)
    assert not [t for t, _ in parsed.tags if t in ("script", "iframe", "object", "embed", "link", "img", "base")]
    for tag, attrs in parsed.tags:
        for name, value in attrs.items():
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
                assert value is None or value.startswith("#"), (tag, name, value)  # only in-page anchors
    assert not re.search(r"url\(|@import|@font-face", html)
    csp = [a for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0]["content"].startswith("default-src 'none'")
    assert "@media print" in html and "@page" in html and "break-inside: avoid" in html
    # status also as text next to every badge colour; drill-downs folded; a glossary
    badges = re.findall(r'<span class="badge (\w+)"><span class="sym" aria-hidden="true">.</span>([A-Zα ]+)</span>', html)
    assert badges and all(text.strip() for _, text in badges)
    assert html.count("<details>") >= 3 and "Glossary" in html


# ---------------------------------------------------------------------------- escaping
def test_html_in_prompt_ids_groups_and_tokens_renders_as_text(tmp_path, snapshot):
    dim = next(iter(snapshot["groups"]))
    assert HOSTILE_GROUP in snapshot["groups"][dim]["by_group"]  # the real pipeline carried it through
    assert HOSTILE_ID in json.dumps(snapshot)
    paths = render_report(_gated(snapshot), tmp_path)
    html = paths["html"].read_text(encoding="utf-8")
    assert not re.search(r"<script", html, re.I)
    assert "<b " not in html and "<b>" not in html
    parsed = _parse(html)
    assert not [t for t, _ in parsed.tags if t in ("script", "b")]
    assert not [(t, a) for t, attrs in parsed.tags for a in attrs if a.startswith("on")]  # no event handler attributes
    text = " ".join(" ".join(v) for v in parsed.section_text.values())
    assert HOSTILE_GROUP in text and HOSTILE_ID in text and HOSTILE_TOKEN in text  # shown, as text
    # inside SVG too (forest plot labels are group names)
    svg_text = re.findall(r"<svg.*?</svg>", html, re.S)
    assert any("&lt;b onmouseover=alert(1)&gt;bold&lt;/b&gt;" in s for s in svg_text)
    summary = paths["summary"].read_text(encoding="utf-8")
    assert "<script" not in summary and "<b " not in summary and "&lt;b onmouseover" in summary


def test_markdown_escape():
    assert md_escape("<script>|x*_`") == "&lt;script&gt;\\|x\\*\\_\\`"
    assert md_escape("two\nlines") == "two lines"


# ---------------------------------------------------------------------------- missing and odd sections
# the sections the contract requires, at their least: what a snapshot holds where they did not run
NOT_RUN_SECTIONS = {"equivalence": {"status": "not run"}, "groups": {}, "run": {}}


@pytest.mark.parametrize(
    "drop",
    [
        ("equivalence", "groups", "disparities", "recommendations", "gate", "run"),
        ("groups", "disparities", "recommendations"),
        ("equivalence",),
        ("gate",),
    ],
)
def test_missing_sections_render_as_not_run(tmp_path, snapshot, drop):
    _gated(snapshot)
    for key in drop:
        snapshot.pop(key, None)
        if key in NOT_RUN_SECTIONS:
            with pytest.raises(InputError, match=f"has no '{key}' section"):  # the contract's sections are never guessed
                render_report(snapshot, tmp_path)
            snapshot[key] = NOT_RUN_SECTIONS[key]
    paths = render_report(snapshot, tmp_path)
    html = paths["html"].read_text(encoding="utf-8")
    parsed = _parse(html)
    assert "could not be rendered" not in html
    if "equivalence" in drop:
        assert "Equivalence tests: not run" in _section(parsed, "equivalence")
    if "disparities" in drop:
        assert "Disparity analysis: not run" in _section(parsed, "disparity")
    if "gate" in drop:
        assert "Gate: not run" in _section(parsed, "gate")
        root = ET.fromstring(paths["junit"].read_text(encoding="utf-8"))
        assert len(root.iter("testcase").__next__().findall("skipped")) == 1
    if "run" in drop:
        assert "Reproducibility record: not run" in _section(parsed, "reproducibility")
    summary = _section(parsed, "summary")
    if "gate" in drop:
        assert "Insufficient evidence" in summary and "Gate: not run" in summary
    assert summary.count("NOT RUN") >= sum(k in drop for k in ("equivalence", "disparities"))
    assert "not run" in paths["summary"].read_text(encoding="utf-8").lower() or len(drop) == 0


def test_equivalence_marked_not_run_and_odd_shapes_refused(tmp_path, snapshot):
    snapshot["equivalence"] = {"status": "not run"}
    snapshot.pop("gate")
    html = render_html(snapshot)
    parsed = _parse(html)
    assert "Equivalence tests: not run" in _section(parsed, "equivalence")
    assert "Gate: not run" in _section(parsed, "gate")
    assert "Fairness" in _section(parsed, "disparity") and "Insufficient evidence" in _section(parsed, "summary")
    # a snapshot that breaks the contract is refused with one sentence naming the first problem, never half-rendered
    for odd, problem in (
        ({"disparities": {"style": ["not", "a", "mapping"]}}, "disparities.style must be an object, got a list"),
        ({"recommendations": "garbage"}, "recommendations must be an object, got a string"),
        ({"gate": {"checks": []}}, "has no 'gate.status'"),
    ):
        with pytest.raises(InputError, match=re.escape(problem)):
            render_html({**snapshot, **odd})
    for empty in ({}, {"schema_version": 1}, {"schema_version": 1, "run": None, "groups": None}):
        with pytest.raises(InputError, match="not a specaudit snapshot|has no|run must be an object"):
            render_html(empty)
    with pytest.raises(InputError):
        render_report(["not a snapshot"], tmp_path)


def test_greedy_equivalence_section_attributes_divergences(snapshot):
    snapshot["equivalence"] = {
        "status": "fail",
        "mode": "greedy",
        "alpha": 0.05,
        "delta": 0.05,
        "control": "vanilla",
        "family_rule": "exact match",
        "engines": {
            "speculative": {
                "verdict": "fail",
                "greedy": {
                    "engine": "speculative",
                    "reference": "vanilla",
                    "n_pairs": 20,
                    "n_matches": 18,
                    "match_rate": 0.9,
                    "ci_low": 0.68,
                    "ci_high": 0.99,
                    "verdict": "fail",
                    "divergences": [
                        {
                            "key": "a|speculative|0",
                            "prompt_id": "<i>a</i>",
                            "position": 5,
                            "token": 11,
                            "reference_token": 12,
                            "logit_gap": 1e-6,
                            "top2_gap": 1e-6,
                            "scale": 9.0,
                            "tolerance": 9e-3,
                            "classification": "near-tie",
                        },
                        {
                            "key": "b|speculative|0",
                            "prompt_id": "b",
                            "position": 2,
                            "token": 3,
                            "reference_token": 4,
                            "logit_gap": 1.7,
                            "top2_gap": 1.7,
                            "scale": 9.0,
                            "tolerance": 9e-3,
                            "classification": "clear",
                        },
                    ],
                },
            }
        },
    }
    html = render_html(_gated(snapshot))
    equivalence = _section(_parse(html), "equivalence")
    assert "Mode greedy" in equivalence and "18 of 20 prompts" in equivalence and "90% [68%, 99%]" in equivalence
    assert "NEAR-TIE" in equivalence and "CLEAR" in equivalence and "&lt;i&gt;a&lt;/i&gt;" in html
    assert "Do not ship speculative" in _section(_parse(html), "actions")
    assert "Do not enable" in _section(_parse(html), "summary")


# ---------------------------------------------------------------------------- size
def test_report_stays_small_for_a_default_sized_audit(tmp_path, snapshot):
    """The default audit has four dimensions and 28 groups (prompt_sets/core); size grows with
    groups and engines, not prompts. Clone the real per-group results to that shape."""
    dim = next(iter(snapshot["groups"]))
    template_group = next(iter(snapshot["groups"][dim]["by_group"].values()))
    layout = {"vocabulary": 2, "domain": 8, "dialect": 8, "language": 10}
    for name, count in layout.items():
        groups = copy.deepcopy(snapshot["groups"][dim])
        groups["by_group"] = {f"{name}-{i}": copy.deepcopy(template_group) for i in range(count)}
        snapshot["groups"][name] = groups
        part = copy.deepcopy(snapshot["disparities"][dim])
        for metric in part["metrics"].values():
            if "pairwise" in metric:
                row = next(iter(metric["pairwise"].values()))
                metric["pairwise"] = {f"{name}-{i}": copy.deepcopy(row) for i in range(1, count)}
        drill = part.get("drilldown") or {}
        for key in ("by_position", "by_rarity", "corrections", "below_threshold"):
            rows = drill.get(key) or []
            drill[key] = [dict(r, group=f"{name}-{i}") for i in range(count) for r in rows[: max(1, len(rows) // 2)]]
        snapshot["disparities"][name] = part
        advice = copy.deepcopy(snapshot["recommendations"][dim])
        one = next(iter(advice["by_group"].values()))
        advice["by_group"] = {f"{name}-{i}": copy.deepcopy(one) for i in range(count)}
        snapshot["recommendations"][name] = advice
    paths = render_report(_gated(snapshot), tmp_path)
    size = paths["html"].stat().st_size
    assert size < MAX_BYTES / 2, f"report.html is {size / 1024:.0f} KiB for 28 groups"
    assert len(list(csv.DictReader(io.StringIO(paths["groups"].read_text())))) > 28 * 11


# ---------------------------------------------------------------------------- groups.csv
def test_groups_csv_one_row_per_dimension_group_metric(tmp_path, snapshot):
    dim = next(iter(snapshot["groups"]))
    snapshot["groups"][dim]["by_group"]["=HYPERLINK(1)"] = copy.deepcopy(next(iter(snapshot["groups"][dim]["by_group"].values())))
    paths = render_report(snapshot, tmp_path)
    rows = list(csv.DictReader(io.StringIO(paths["groups"].read_text(encoding="utf-8"))))
    assert tuple(rows[0]) == CSV_COLUMNS
    expected = sum(len(e["metrics"]) for part in snapshot["groups"].values() for e in [part["overall"], *part["by_group"].values()])
    assert len(rows) == expected == len(groups_rows(snapshot))
    keys = {(r["dimension"], r["group"], r["kind"], r["metric"]) for r in rows}
    assert len(keys) == len(rows)  # one row per dimension × group × metric
    group, entry = next((g, e) for g, e in snapshot["groups"][dim]["by_group"].items() if g != "=HYPERLINK(1)")
    row = next(r for r in rows if r["group"] == group and r["metric"] == "acceptance_rate")
    block = entry["metrics"]["acceptance_rate"]
    assert float(row["value"]) == block["value"] and float(row["ci_low"]) == block["ci_low"]
    assert int(row["n_prompts"]) == block["n_prompts"] and int(row["n_tokens"]) == block["n_tokens"]
    assert any(r["group"] == HOSTILE_GROUP for r in rows)  # csv quoting, not HTML escaping
    assert any(r["group"] == "'=HYPERLINK(1)" for r in rows) and not any(r["group"].startswith("=") for r in rows)
    missing = [r for r in rows if r["value"] == ""]
    assert all(r["ci_low"] == "" for r in missing)  # null in the snapshot → empty cell, never "None"
    # the comparison with the reference beside each group's value: ratio, its interval, p, Holm p and status
    reference = snapshot["disparities"][dim]["reference"]
    compared = snapshot["disparities"][dim]["metrics"]["acceptance_rate"]["pairwise"]
    other = next(g for g in compared)
    row = next(r for r in rows if r["group"] == other and r["metric"] == "acceptance_rate")
    assert float(row["ratio"]) == compared[other]["ratio"]["value"] and float(row["ratio_ci_high"]) == compared[other]["ratio"]["ci_high"]
    assert float(row["pvalue_holm"]) == compared[other]["pvalue_holm"] and row["is_reference"] == "false"
    assert row["status"] in ("FLAG", "WITHIN", "INCONCLUSIVE", "INSUFFICIENT")
    ref_row = next(r for r in rows if r["group"] == reference and r["metric"] == "acceptance_rate")
    assert ref_row["is_reference"] == "true" and ref_row["status"] == "reference" and ref_row["ratio"] == ""
    assert {r["run_id"] for r in rows} == {snapshot["run"]["id"]} and all(r["target"] and r["draft"] for r in rows)


# ---------------------------------------------------------------------------- junit.xml
def test_junit_has_one_case_per_gate_check(tmp_path, snapshot):
    result = evaluate_gate(snapshot, GateThresholds(min_speedup=1000.0, slowdown_severity="fail"))
    snapshot["gate"] = result.to_dict()
    snapshot["gate"]["checks"][0]["message"] += " token \x07\x00 <&> ⟦x⟧"  # control characters from token strings
    text = render_report(snapshot, tmp_path)["junit"].read_text(encoding="utf-8")
    root = ET.fromstring(text.encode("utf-8"))
    cases = list(root.iter("testcase"))
    assert [c.get("name") for c in cases] == [c.name for c in result.checks]
    failed = [c for c in cases if c.find("failure") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None]
    status = {c.get("name"): c.find("properties/property[@name='status']").get("value") for c in cases}
    warned = [c for c in cases if status[c.get("name")] == "WARN"]
    not_run = [c for c in result.checks if c.details.get("not_run")]
    assert len(failed) == result.counts[CheckStatus.FAIL] >= 1 and len(warned) == result.counts[CheckStatus.WARN] >= 1
    # a warning is a passed test case (CI must not read it as "not run"); only a check that could not judge is skipped
    assert all(
        c.find("skipped") is None and c.find("failure") is None and c.find("system-out").text.startswith("WARN")
        for c in warned
        if c.get("name") not in {n.name for n in not_run}
    )
    assert [c.get("name") for c in skipped] == [c.name for c in not_run]
    suite = root.find("testsuite")
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == len(failed)
    assert int(suite.get("skipped")) == len(skipped) and suite.get("errors") == "0"
    assert suite.get("timestamp") == snapshot["run"]["created"] and float(suite.get("time")) >= 0
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert {"target", "draft", "seed", "commit"} <= set(properties) and properties["seed"] == str(snapshot["run"]["seeds"]["run"])
    assert all(c.find("system-out") is not None for c in cases if c.find("failure") is None)
    first = " ".join([*(e.text or "" for e in cases[0].iter()), *(v for e in cases[0].iter() for v in e.attrib.values())])
    assert "<&> ⟦x⟧" in first and "\x07" not in first  # escaped by the XML writer; control characters replaced
    assert all(c.get("classname").startswith("specaudit.gate.") for c in cases)


def test_junit_without_a_gate_is_valid_and_says_so():
    root = ET.fromstring(junit_xml(BARE))
    cases = list(root.iter("testcase"))
    assert len(cases) == 1 and "not run" in cases[0].find("skipped").get("message")


# ---------------------------------------------------------------------------- summary.md and CLI
def test_summary_markdown_starts_with_the_decision(snapshot):
    _gated(snapshot)
    markdown = render_summary(snapshot)
    html = render_html(snapshot)
    first = markdown.splitlines()[:3]
    assert first[0] == "# Decision: Do not enable" and first[2] == "**Gate: FAIL (exit 1)**"
    for line in ("| Correctness |", "| Fairness |", "| Speed |", "## What to do", "## Audit subject", "## Gate checks"):
        assert line in markdown
    assert ">Do not enable</h2>" in html and "Gate: FAIL (exit 1)" in html


def test_report_cli(tmp_path, audit_run, capsys):
    assert main(["report", str(audit_run), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "report.html" in out and (tmp_path / "r" / "junit.xml").is_file()
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "x.json").write_text(json.dumps({"no": "schema"}))
    assert main(["report", str(tmp_path / "x.json")]) == 2
    with pytest.raises(InputError, match="not a specaudit snapshot"):
        load_snapshot(tmp_path / "x.json")


def test_a_control_rejected_only_at_alpha_is_shown_with_what_to_do(snapshot):
    snapshot = copy.deepcopy(snapshot)
    snapshot["equivalence"]["control_warning"] = (
        "the vanilla control was rejected at alpha = 0.05 (Holm p = 0.04) but not at the "
        "control level 0.001: a correct control is rejected at alpha in 1 audit of 20; rerun"
    )
    html = render_html(_gated(snapshot))
    parsed = _parse(html)
    assert "the vanilla control was rejected at alpha = 0.05" in _section(parsed, "equivalence")  # the callout
    actions = _section(parsed, "actions")
    assert actions.count("Rerun with another seed: the vanilla control was rejected") == 1 and "--seed 2" in actions


# ---------------------------------------------------------------------------- statuses, decision, actions

EXAMPLE = Path(__file__).resolve().parents[2] / "reports" / "example" / "snapshot.json"
needs_example = pytest.mark.skipif(not EXAMPLE.is_file(), reason="reports/example/snapshot.json is not in this checkout")


def _ratio(low, high, **extra):
    return Comparison.model_validate({"ratio": {"value": (low * high) ** 0.5, "ci_low": low, "ci_high": high}, **extra})


def test_comparison_status_uses_the_carried_status_or_the_interval_never_ok():
    band = (0.8, 1.25)
    # the example: an interval straddling the band is INCONCLUSIVE; an old snapshot's "ok" breaks the contract
    assert comparison_status(_ratio(0.46, 1.52), band) == DisparityStatus.INCONCLUSIVE
    with pytest.raises(ValueError, match="'ok' is not a DisparityStatus"):
        _ratio(0.46, 1.52, status="ok")
    assert comparison_status(_ratio(0.85, 1.2), band) == DisparityStatus.WITHIN
    assert comparison_status(_ratio(0.3, 0.7), band) == DisparityStatus.FLAG
    assert comparison_status(_ratio(1.3, 1.9), band) == DisparityStatus.FLAG
    # a design that cannot detect a ratio at the band's edges cannot decide, even with a narrow interval
    assert (
        comparison_status(_ratio(0.85, 1.2, min_detectable_ratio_low=0.6, min_detectable_ratio_high=1.4), band)
        == DisparityStatus.INSUFFICIENT
    )
    assert comparison_status(_ratio(0.85, 1.2, mdr={"low": 0.7, "high": 1.3}), band) == DisparityStatus.INSUFFICIENT
    assert comparison_status(Comparison.model_validate({"ratio": {"value": None}}), band) == DisparityStatus.INSUFFICIENT
    # the decisive-audits vocabulary, when a snapshot carries it, is used as it is
    assert comparison_status(_ratio(0.46, 1.52, status="WITHIN"), band) == DisparityStatus.WITHIN


def test_engine_status_and_tests_that_cannot_reject():
    def status(entry):
        return engine_status(EngineEquivalence.model_validate(entry))

    assert status({"verdict": "pass", "goodness_of_fit": {"tests": {}}}) == EquivalenceStatus.NO_VIOLATION_FOUND
    assert status({"verdict": "fail", "goodness_of_fit": {}, "two_sample": {"x": 1}}) == EquivalenceStatus.VIOLATION
    assert status({"verdict": "pass", "goodness_of_fit": {"impossible_tokens": {"statistic": 2}}}) == EquivalenceStatus.VIOLATION
    assert status({"goodness_of_fit": {"n": 1}, "tv_bound": {"verdict": "equivalent within delta"}}) == EquivalenceStatus.EQUIVALENT
    assert status({}) == EquivalenceStatus.NOT_RUN
    assert status({"status": "equivalent within delta"}) == EquivalenceStatus.EQUIVALENT
    assert "p = 1 by construction" in not_run_reason(BatteryTest(pvalue=1.0), two_sample=True, samples=1)
    assert not_run_reason(BatteryTest(pvalue=1.0), two_sample=True, samples=5) is None
    assert not_run_reason(BatteryTest(not_run_reason="no vanilla samples"), two_sample=True, samples=5) == "no vanilla samples"


def test_commands_rerun_the_audit_with_the_flag_changed():
    assert with_flags("specaudit audit --out reports/x --k 4", {"--k": 2}) == "specaudit audit --out reports/x-rerun --k 2"
    assert with_flags(None, {"--samples": 8}) == "specaudit audit --samples 8"
    assert with_flags("python run.py", {"--seed": 1}) == "specaudit audit --seed 1"


def test_the_draft_length_advice_names_the_option_of_the_engines_that_ran():
    from specaudit.contracts.snapshot import RunConfigBlock
    from specaudit.report.view.verdicts import _draft_length_flag

    def flag(config: dict, best_k: int) -> dict | None:
        return _draft_length_flag(RunConfigBlock.model_validate(config), best_k)

    assert flag({"engines": ["screen", "vanilla", "speculative"], "k": 4}, 2) == {"--k": 2}
    assert flag({"engines": ["vanilla", "speculative", "staged"], "k": 2}, 2) is None  # --k is best already
    assert flag({"engines": ["vanilla", "staged"], "k": 4, "level_k": "2,3"}, 2) == {"--level-k": "2,2"}
    assert flag({"engines": ["vanilla", "staged"], "level_k": "2,3"}, 3) is None
    assert flag({"engines": ["vanilla", "tree"], "k": 4}, 2) is None  # a tree's depth is its shape


@needs_example
def test_default_audit_decision_cards_and_deduplicated_actions(tmp_path):
    snapshot = load_snapshot(EXAMPLE)
    paths = render_report(snapshot, tmp_path)
    html = paths["html"].read_text(encoding="utf-8")
    parsed = _parse(html)
    summary, actions = _section(parsed, "summary"), _section(parsed, "actions")
    speed = [g["metrics"]["speedup"]["value"] for part in snapshot["groups"].values() for g in part["by_group"].values()]
    slower = sum(v < 1 for v in speed)
    assert slower == len(speed) > 0  # the real audit: every group decoded slower than vanilla
    assert "Do not enable" in summary and "Gate: WARN (exit 0)" in summary
    assert f"{slower} of {len(speed)} groups run slower than vanilla" in summary
    assert "1 CPU thread" in summary and "no repeats" in summary
    # correctness is not claimed: no test found a violation, equivalence within delta is not shown
    assert "NO VIOLATION FOUND" in summary and "PASS" not in summary
    # one item per problem across the four dimensions, MUST before SHOULD, each with a command to paste
    items = [li for li in re.findall(r'<ol class="actions">(.*?)</ol>', html, re.S)[0].split("<li ")[1:]]
    assert 2 <= len(items) <= 6
    undecided = any(
        row["status"] in ("INCONCLUSIVE", "INSUFFICIENT")
        for part in snapshot["disparities"].values()
        for metric in part["metrics"].values()
        for row in (metric.get("pairwise") or {}).values()
    )
    assert sum("slower than vanilla" in i for i in items) == 1 and sum("cannot be decided" in i for i in items) == int(undecided)
    levels = [re.search(r'class="(\w+)"', i).group(1) for i in items]
    assert levels == sorted(levels, key=["fail", "warn", "pass"].index)
    # a command wherever there is one to paste (no better k for the slow draft: none for that item)
    assert all('<pre class="cmd"><code>specaudit ' in i for i in items if '<pre class="cmd">' in i)
    assert ("--per-group" in actions) == undecided  # more prompts only where a comparison is undecided
    # equivalence within delta is not shown, and showing it takes months: no command over the 24 h budget,
    # the item says what the audit did show instead
    assert "--samples " not in actions and "No rerun within 24 h shows it" in actions and "What this audit did show" in actions
    # the decision blocks while this snapshot's gate (judged under --fail-on fail) exits 0: how to make them agree
    assert "--fail-on do-not-enable" in summary
    # the audit subject: the target's GGUF hash from the models entry, the draft described as what it is
    about = _section(parsed, "subject")
    assert snapshot["run"]["models"]["target"]["gguf_sha256"] in about
    assert "int8: int8 weights of default" in about and "—" not in about
    # terms explained at their first use (so also on paper), then linked to the glossary
    for term in ("PIT", "TV", "Holm", "δ"):
        assert f"<dfn>{term}</dfn>" in html and html.index(f"<dfn>{term}</dfn>") < html.index('id="glossary"')
    markdown = paths["summary"].read_text(encoding="utf-8")
    assert markdown.startswith("# Decision: Do not enable\n\n**Gate: WARN (exit 0)**")


@needs_example
def test_forest_plots_show_every_group_unclipped_with_one_colour_per_group():
    snapshot = load_snapshot(EXAMPLE)
    html = render_html(snapshot)
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    forests = [s for s in svgs if 'aria-labelledby="forest' in s]
    speed = [s for s in svgs if 'aria-labelledby="speed' in s]
    assert len(speed) == 1 and speed[0].count("SLOWER") >= 28 + 1  # every group's speed-up against vanilla, and the legend
    bars = [s for s in svgs if 'class="chart bars"' in s]
    assert len(forests) == len(snapshot["groups"])  # one per dimension
    for dimension, forest in zip(snapshot["groups"], forests):
        groups = snapshot["groups"][dimension]["by_group"]
        labels = {
            unescape(name): colour for colour, name in re.findall(r'fill="(#[0-9A-Fa-f]{6})"/><text[^>]*>([^<]+?) \(\d+\)</text>', forest)
        }  # group names as written (the context band "<256" is escaped in the SVG)
        assert set(labels) == set(groups)  # nothing dropped
        assert len(set(labels.values())) == len(groups)  # a colour per group
        # fixed band lines and parity, labelled, on a log axis
        for tick in ("0.8", "1", "1.25"):
            assert re.search(rf'font-weight="bold"[^>]*>{re.escape(tick)}</text>', forest)
        assert "log scale" in forest
        # each interval's ends inside the drawn width: nothing clipped
        xs = [float(x) for x in re.findall(r'<line x1="([\d.]+)" y1="[\d.]+" x2="[\d.]+" y2="[\d.]+" stroke="#(?!d9d9d9)', forest)]
        assert xs and min(xs) >= 170 - 24 and max(xs) <= 1000
        # the drill-down panels give each group the same colour, every group present
        for chart in [b for b in bars if f", {dimension}<" in b or f"{dimension}</title>" in b]:
            panels = {
                name: colour
                for colour, name in re.findall(r'fill="(#[0-9A-Fa-f]{6})"/><text[^>]*font-weight="bold"[^>]*>([^<]+)</text>', chart)
            }
            assert {g: panels.get(g) for g in groups} == {g: labels[g] for g in groups}


def test_palette_and_badges_meet_wcag_contrast():
    assert all(contrast_ratio(c) >= 3.0 for c in GROUP_COLOURS)  # graphics: 3:1 on white
    assert all(contrast_ratio(colour) >= 3.0 for _, colour in STATUS_STYLE.values())
    css = (Path(__file__).resolve().parents[2] / "specaudit" / "report" / "templates" / "report.css").read_text()
    var = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", css))
    for kind in ("pass", "warn", "fail", "none"):  # badge text on its own background: 4.5:1 (small bold text)
        assert contrast_ratio(var[kind], var[f"{kind}-bg"]) >= 4.5, kind
        assert contrast_ratio(var[kind]) >= 4.5, kind


def test_report_compare_shows_what_changed_per_group(tmp_path, snapshot, capsys):
    _gated(snapshot)
    snapshot.pop("prompts")  # compared through the groups' intervals (the monitor's path for snapshots without prompt values)
    measured = snapshot["groups"][next(iter(snapshot["groups"]))]["by_group"]["plain"]["metrics"]["acceptance_rate"]
    measured.update(ci_low=measured["value"] - 0.01, ci_high=measured["value"] + 0.01)  # a precisely measured baseline
    before = tmp_path / "before.json"
    before.write_text(json.dumps(snapshot), encoding="utf-8")
    after = copy.deepcopy(snapshot)
    dim = next(iter(after["groups"]))
    group = "plain"
    block = after["groups"][dim]["by_group"][group]["metrics"]["acceptance_rate"]
    for key in ("value", "ci_low", "ci_high"):
        block[key] -= 0.1  # then acceptance drops by 0.1, as precisely measured
    (tmp_path / "now").mkdir()
    (tmp_path / "now" / "snapshot.json").write_text(json.dumps(after), encoding="utf-8")
    assert main(["report", str(tmp_path / "now"), "--compare", str(before)]) == 0
    html = (tmp_path / "now" / "report.html").read_text(encoding="utf-8")
    compare = _section(_parse(html), "compare")
    assert compare.startswith("Compared with") and "Holm" in compare
    row = re.search(rf"<tr><td>{re.escape(dim)}</td><td>{group}</td><td>acceptance rate</td><td>(.*?)</td>", html)
    assert row and "WORSE" in row.group(1)  # significant and beyond the practical threshold
    assert "## Compared with" in (tmp_path / "now" / "summary.md").read_text(encoding="utf-8")
    assert main(["report", str(tmp_path / "now"), "--compare", str(tmp_path / "missing")]) == 2


def test_junit_marks_checks_that_could_not_judge_as_skipped_with_the_reason():
    gate = {
        "status": "warn",
        "checks": [
            {
                "name": "disparity[d/speedup]",
                "title": "d",
                "status": "warn",
                "message": "3 prompts per group: cannot decide",
                "details": {"status": "INSUFFICIENT"},
            },
            {"name": "min-speedup[d]", "title": "m", "status": "warn", "message": "not run: no timings", "details": {"not_run": True}},
            {"name": "tv-bound[spec]", "title": "t", "status": "warn", "message": "TV bound 0.9 > δ"},
            {"name": "impossible-tokens", "title": "i", "status": "pass", "message": "none"},
        ],
    }
    root = ET.fromstring(junit_xml({**BARE, "gate": gate}))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    for name in ("disparity[d/speedup]", "min-speedup[d]"):
        assert cases[name].find("skipped").get("message").startswith("INSUFFICIENT: ")
    assert cases["disparity[d/speedup]"].find("properties/property").get("value") == "INSUFFICIENT"
    warn = cases["tv-bound[spec]"]
    assert warn.find("skipped") is None and warn.find("failure") is None
    assert warn.find("properties/property").get("value") == "WARN" and "TV bound 0.9" in warn.find("system-out").text
    suite = root.find("testsuite")
    assert suite.get("skipped") == "2" and suite.get("failures") == "0" and suite.get("tests") == "4"


def test_decision_follows_the_gate_and_the_evidence(snapshot):
    from specaudit.report.view.statuses import comparisons, speed_summary
    from specaudit.report.view.verdicts import decide as decide_typed

    snapshot = _gated(snapshot)
    for part in snapshot["groups"].values():  # a draft that pays off everywhere, measured precisely
        for entry in [part["overall"], *part["by_group"].values()]:
            entry["metrics"]["speedup"].update(value=1.8, ci_low=1.7, ci_high=1.9)
    for part in snapshot["disparities"].values():
        for block in part["metrics"].values():
            for row in block.get("pairwise", {}).values():
                row["status"] = "WITHIN"
    comps, speed = comparisons(read_snapshot(snapshot)), speed_summary(read_snapshot(snapshot))
    ok = [("speculative", EquivalenceStatus.EQUIVALENT)]

    def decide(snapshot, engines, comps, speed):
        return decide_typed(read_snapshot(snapshot), engines, comps, speed)

    snapshot["gate"] = {"status": "pass", "exit_code": 0, "checks": [{"name": "impossible-tokens", "status": "pass"}]}
    assert decide(snapshot, ok, comps, speed)["title"] == "Enable"
    snapshot["gate"] = {
        "status": "warn",
        "exit_code": 0,
        "checks": [{"name": "group-size[style]", "status": "warn"}, {"name": "tv-bound[speculative]", "status": "warn"}],
    }
    decision = decide(snapshot, ok, comps, speed)
    assert decision["title"] == "Enable with conditions" and decision["gate"] == "Gate: WARN (exit 0)"
    assert "group-size (1), tv-bound (1)" in decision["reasons"][0]
    assert decide(snapshot, [("speculative", EquivalenceStatus.VIOLATION)], comps, speed)["title"] == "Do not enable"
    assert decide(snapshot, [("speculative", EquivalenceStatus.NOT_RUN)], comps, speed)["title"] == "Insufficient evidence"
    undecided = [dataclasses.replace(c, status=DisparityStatus.INSUFFICIENT) for c in comps]
    assert decide(snapshot, ok, undecided, speed)["title"] == "Insufficient evidence"
    slow = dataclasses.replace(speed, below_one=True)
    assert decide(snapshot, ok, comps, slow)["title"] == "Do not enable"
    snapshot["gate"] = None
    assert decide(snapshot, ok, comps, speed)["title"] == "Insufficient evidence"


def test_a_rejected_engine_is_stated_once_and_its_pit_bound_worded_as_a_bound_on_the_violation(snapshot):
    """The quick audit's case (issue 51): surprisal rejected after Holm, the PIT not. The card says
    VIOLATION; its PIT bound reads as an upper limit on the violation, never as "no distortion ...
    shown"; no item says "no test found a violation" nor asks for samples to show its equivalence."""
    from specaudit.report.view import build_view

    snapshot = copy.deepcopy(snapshot)
    entry = snapshot["equivalence"]["engines"]["speculative"]
    surprisal = next(row for row in entry["goodness_of_fit"]["gate"] if "surprisal" in row["test"])
    surprisal.update(pvalue=0.002, holm_pvalue=0.01, reject=True)
    entry["verdict"] = "FAIL"
    entry.pop("status", None)  # derived from the rejection, as for a snapshot that does not carry it
    snapshot["equivalence"]["status"] = "FAIL"
    assert entry["pit_bound"]["upper"] < 1  # the fixture's bound says something: the wording is tested
    gated = _gated(snapshot)
    view = build_view(gated)
    engine = next(e for e in view["equivalence"]["engines"] if e["name"] == "speculative")
    assert engine["status"] == EquivalenceStatus.VIOLATION and engine["pit_bound"].violation
    line = next(line for line in view["summary"]["cards"][0].lines if line.startswith("speculative:"))
    assert line.startswith("speculative: violation in ") and "distorts the PIT by at most" in line
    assert "no distortion of the PIT" not in line
    items = " ".join(item["text"] for item in view["summary"]["actions"])
    assert "Do not ship speculative" in items and "no test found a violation" not in items
    assert not any("speculative" in reason and "no test found a violation" in reason for reason in view["summary"]["decision"]["reasons"])
    html = render_html(gated)
    equivalence = _section(_parse(html), "equivalence")
    bound = entry["pit_bound"]["upper"]
    assert f"the violation distorts the PIT by at most {bound:.3f}" in equivalence
    assert f"no distortion of the PIT above {bound:.3f}" not in equivalence
    # the other engines, without a violation, keep the positive claim where they have one
    others = [e for e in view["equivalence"]["engines"] if e["name"] != "speculative" and e["pit_bound"].ran]
    assert all(
        e["pit_bound"].claim.startswith("no distortion of the PIT above") for e in others if e["status"] != EquivalenceStatus.VIOLATION
    )
