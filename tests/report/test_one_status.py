"""One status vocabulary across the stages: analyze, gate, junit.xml, summary.md and the monitor
spell every status as the contracts do (specaudit.contracts.status), and a snapshot written with
the old lower-case spelling reads back as the same statuses."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from sqlalchemy import select

from specaudit.contracts import CheckStatus, DisparityStatus, EquivalenceStatus
from specaudit.contracts.snapshot import load_snapshot
from specaudit.gate import evaluate_gate
from specaudit.monitor import compare_snapshots, open_store
from specaudit.report import render_report

SPELLINGS = {s.value for enum in (CheckStatus, DisparityStatus, EquivalenceStatus) for s in enum} | {"skipped"}


def _on_disk(snapshot: dict, tmp_path) -> dict:
    """The snapshot gated as `specaudit gate --write` does, written and read back as plain JSON."""
    snapshot["gate"] = evaluate_gate(load_snapshot(snapshot)).to_dict()
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot), encoding="utf-8")
    return json.loads(path.read_text(encoding="utf-8"))


def _statuses(value, key=None):
    """Every value of a `status` or `verdict` key (a TV bound's verdict is its own scale, "not shown")."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("status", "verdict") and isinstance(v, str):
                yield k, v
            elif k != "tv_bound":
                yield from _statuses(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _statuses(v, key)


def _lower_case(snapshot: dict) -> dict:
    """The snapshot as analyze and gate spelt it before the contracts: "pass", "warn", "fail"."""
    old = json.loads(json.dumps(snapshot))
    for entry in old["equivalence"]["engines"].values():
        for block in (entry, *(entry.get(t) or {} for t in ("goodness_of_fit", "two_sample", "greedy"))):
            if "verdict" in block:
                block["verdict"] = block["verdict"].lower()
    old["equivalence"]["status"] = old["equivalence"]["status"].lower()
    old["gate"]["status"] = old["gate"]["status"].lower()
    old["gate"]["counts"] = {k.lower(): n for k, n in old["gate"]["counts"].items()}
    for check in old["gate"]["checks"]:
        check["status"] = check["status"].lower()
    return old


def _stage_outputs(snapshot: dict, tmp_path, name: str) -> dict:
    """The statuses each later stage wrote: junit.xml, summary.md and the monitor's history."""
    paths = render_report(load_snapshot(snapshot), tmp_path / name)
    junit = ET.fromstring(paths["junit"].read_text(encoding="utf-8"))
    summary = paths["summary"].read_text(encoding="utf-8")
    with open_store(f"sqlite:///{tmp_path / name / 'history.db'}") as store:
        run = store.add(snapshot).run
        verdicts = store.engine_verdicts([run])[run.id]
        runs, engines = store._t["runs"], store._t["equivalence"]
        with store._read() as conn:  # the history rows as stored, not as read back
            stored = conn.execute(select(runs.c.equivalence_status)).scalar_one()
            stored_verdicts = dict(conn.execute(select(engines.c.engine, engines.c.verdict)).all())
    return {
        "junit_gate": junit.find(".//property[@name='gate_status']").get("value"),
        "junit_checks": {
            case.get("name"): case.find("properties/property[@name='status']").get("value") for case in junit.iter("testcase")
        },
        "summary_checks": dict((name, status) for status, name in re.findall(r"^\| (\w+) \| `([^`]+)` \|", summary, re.M)),
        "monitor_equivalence": run.equivalence_status,
        "monitor_stored": stored,
        "monitor_verdicts": verdicts,
        "monitor_stored_verdicts": stored_verdicts,
        "monitor_checks": {c.status for c in compare_snapshots(snapshot, snapshot).checks},
    }


def test_every_stage_spells_each_status_as_the_contracts_do(snapshot, tmp_path):
    written = _on_disk(snapshot, tmp_path)
    found = list(_statuses({"equivalence": written["equivalence"], "gate": written["gate"]}))
    assert found and {v for _, v in found} <= SPELLINGS, sorted({v for _, v in found} - SPELLINGS)
    gate, equivalence = written["gate"], written["equivalence"]
    assert set(gate["counts"]) == {s.value for s in CheckStatus}
    outputs = _stage_outputs(written, tmp_path, "new")
    checks = {c["name"]: c["status"] for c in gate["checks"]}
    # junit and summary.md show the gate's own words; INSUFFICIENT only where a check could not judge
    assert outputs["junit_gate"] == gate["status"]
    for name, status in outputs["junit_checks"].items():
        assert status == checks[name] or (status == DisparityStatus.INSUFFICIENT and checks[name] != CheckStatus.FAIL), name
    assert outputs["summary_checks"] == checks
    # the monitor stores the analysis's statuses as they are, and its own checks are CheckStatus values
    assert outputs["monitor_equivalence"] == outputs["monitor_stored"] == equivalence["status"]
    verdicts = {e: entry["verdict"] for e, entry in equivalence["engines"].items()}
    assert outputs["monitor_verdicts"] == outputs["monitor_stored_verdicts"] == verdicts
    assert outputs["monitor_checks"] <= {s.value for s in CheckStatus}


def test_an_old_lower_case_snapshot_reads_as_the_same_statuses(snapshot, tmp_path):
    written = _on_disk(snapshot, tmp_path)
    old = _lower_case(written)
    assert old["gate"]["status"] != written["gate"]["status"]  # the spelling really differs
    assert load_snapshot(old)["gate"] == load_snapshot(written)["gate"]
    assert load_snapshot(old)["equivalence"] == load_snapshot(written)["equivalence"]
    assert _stage_outputs(old, tmp_path, "old") == _stage_outputs(written, tmp_path, "new")
    assert evaluate_gate(load_snapshot(old)).to_dict() == evaluate_gate(load_snapshot(written)).to_dict()
