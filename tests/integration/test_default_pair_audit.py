"""The real default pair: SmolLM2-135M-Instruct (embedded GGUF) with its int8 self-draft, on CPU. The quick default audit.

One test a file: each runs minutes, and the test workers take a file at a time."""

import pytest

from specaudit.execution.records import read_records

pytestmark = pytest.mark.integration


def test_quick_default_audit_screens_every_group_and_predicts_speed(tmp_path):
    """`specaudit audit --quick` as a user runs it: the screen on 3 prompts per core group, the engines
    on 8 of them, the cost model and both checks, a report and a gate verdict."""
    import json

    from specaudit.cli import main

    code = main(["audit", "--quick", "--out", str(tmp_path / "audit"), "--quiet"])
    assert code in (0, 1)  # the gate's verdict on this pair, not a crash or bad input
    snapshot = json.loads((tmp_path / "audit" / "snapshot.json").read_text())
    records = read_records(tmp_path / "audit" / "records.jsonl")
    screened = {r["prompt_id"] for r in records if r["engine"] == "screen"}
    decoded = {r["prompt_id"] for r in records if r["engine"] == "speculative"}
    assert len(screened) == 132 and len(decoded) == 8 and decoded <= screened
    assert snapshot["run"]["disparity_engine"] == "screen"
    assert snapshot["speed"]["source"] == "cost model" and snapshot["speed"]["cost_model"]["n_prompts"] == 8
    assert "engine_over_screen_acceptance" in snapshot["screen"]
    groups = [g for part in snapshot["groups"].values() for g in part["by_group"].values()]
    assert len(groups) == 43 and all(g["metrics"]["speedup"]["value"] > 0 for g in groups)
    assert {c["name"] for c in snapshot["gate"]["checks"]} >= {"screen-agreement", "cost-model"}
    assert (tmp_path / "audit" / "report.html").stat().st_size > 0
