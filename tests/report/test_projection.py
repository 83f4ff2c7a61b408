"""Portable acceptance and a deployment projection, through `analyze` and `report` on the real
tiny-model audit: α and the engine's rule per group, the projected speed-up marked as one."""

from __future__ import annotations

import json
import shutil

from specaudit.cli import main


def test_analyze_projects_onto_a_described_deployment_and_the_report_marks_it(audit_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(audit_run, run)
    flags = ["--no-equivalence", "--n-boot", "50", "--deployment-cost-ratio", "0.05", "--deployment-verify-cost", "1.5"]
    assert main(["analyze", str(run), *flags]) == 0
    snapshot = json.loads((run / "snapshot.json").read_text())
    assert snapshot["run"]["analysis"]["deployment_cost_ratio"] == 0.05
    for advice in snapshot["recommendations"].values():
        assert advice["projection"]["verify_cost"] == 1.5
        assert advice["acceptance_rule"].startswith("rejection sampling")
        for row in advice["by_group"].values():
            assert row["alpha_portable"]["value"] is not None and row["projected_speedup"]["value"] is not None
    assert main(["report", str(run), "--out", str(tmp_path / "r")]) == 0
    html = (tmp_path / "r" / "report.html").read_text()
    assert "Acceptance is portable, speed-up is not" in html and "(a projection)" in html and "v = 1.5" in html


def test_an_impossible_deployment_cost_is_one_sentence(audit_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(audit_run, run)
    before = (run / "snapshot.json").read_bytes()
    assert main(["analyze", str(run), "--no-equivalence", "--deployment-cost-ratio", "0"]) == 2
    err = capsys.readouterr().err
    assert "--deployment-cost-ratio" in err and "Traceback" not in err
    assert (run / "snapshot.json").read_bytes() == before
