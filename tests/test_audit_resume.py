"""`specaudit audit --resume [RUN_DIR]`: a real audit subprocess of the tiny pair killed mid-run
(SIGKILL) is continued by `audit --resume` (the last run under the config's `out:`): the dry run
counts the records already there, the resumed audit adds only the rest (no record twice), says that
it resumed and completes the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import yaml

from specaudit.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]  # two-prompt groups warn


def test_a_killed_audit_resumes_without_a_record_twice(tmp_path, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    target, draft = tiny_pair_dir
    config = tmp_path / "audit.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "target": str(target),
                "draft": str(draft),
                "prompts": str(tiny_prompts_file),
                "engines": "vanilla,speculative",
                "samples": 6,
                "max_new_tokens": 24,
                "device": "cpu",
                "out": "runs",
                "analysis": {"n_boot": 100},
            }
        ),
        encoding="utf-8",
    )
    planned = 4 * 2 * 6  # prompts x engines x samples
    argv = [sys.executable, "-m", "specaudit.cli", "audit", "--config", str(config), "--quiet"]
    process = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    records = []
    while time.time() < deadline and process.poll() is None:
        records = list((tmp_path / "runs").glob("*/records.jsonl"))
        if records and records[0].read_text(encoding="utf-8").count("\n") >= 10:
            break
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert len(records) == 1, "the audit wrote one run folder under the config's `out:`"
    run_dir = records[0].parent
    partial = records[0].read_text(encoding="utf-8").count("\n")
    assert 10 <= partial < planned, "the kill must land mid-run for this test to mean anything"
    assert not (run_dir / "snapshot.json").exists()

    monkeypatch.chdir(tmp_path)
    # the dry run counts what is there and predicts only the rest
    assert main(["audit", "--resume", "--config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"continue {run_dir.relative_to(tmp_path)}/" in out
    assert f"resumed: {partial} of {planned} items are recorded in {run_dir.relative_to(tmp_path)}/; {planned - partial} left" in out
    # decoding flags belong to the run being resumed: refused, nothing touched
    assert main(["audit", "--resume", str(run_dir), "--samples", "2"]) == 2
    assert "drop --samples" in capsys.readouterr().err
    assert records[0].read_text(encoding="utf-8").count("\n") == partial

    code = main(["audit", "--resume", "--config", str(config), "--quiet"])
    out = capsys.readouterr().out
    assert f"resumed {run_dir.relative_to(tmp_path)}: {partial} records were already there, {planned - partial} decoded now" in out
    assert out.splitlines()[-1].startswith("decision: ") and f"(exit {code}" in out.splitlines()[-1]
    lines = [json.loads(line) for line in records[0].read_text(encoding="utf-8").splitlines()]
    keys = Counter(line["key"] for line in lines)
    assert len(lines) == planned and max(keys.values()) == 1  # complete, no record twice
    snapshot = json.loads((run_dir / "snapshot.json").read_text(encoding="utf-8"))
    assert snapshot["run"]["n_records"] == planned and (run_dir / "report.html").is_file()
    assert json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["invocations"] == 2
    assert list((tmp_path / "runs").iterdir()) == [run_dir]  # resumed in place, no new folder
    # the last run is now finished: --resume alone says so rather than analyse it again
    assert main(["audit", "--resume", "--config", str(config)]) == 2
    assert "is finished (snapshot.json written)" in capsys.readouterr().err


def test_resume_without_a_run_to_resume_is_one_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("specaudit: error:") == 1 and "no audit run in reports/ to resume" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    assert main(["audit", "--resume", "empty"]) == 2
    err = capsys.readouterr().err
    assert "--resume empty: no audit run there (no manifest.json)" in err and "Traceback" not in err
