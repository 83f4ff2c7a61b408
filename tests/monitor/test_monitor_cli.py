"""`specaudit monitor` (alias `specaudit history`): the scheduled-job flow end to end, exit codes
0 / 1 / 2, and bad input as one sentence with nothing stored lost."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from monitor_factory import base_snapshot, edited, history, noisy_run, write

from specaudit.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("specaudit: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    for i, snap in enumerate(history(seed=41, n=5)):
        write(snap, tmp_path / "runs" / f"run-{i}" / "snapshot.json")
    write(noisy_run(random.Random(2), 5, shift={("aave", "acceptance_rate"): -0.35}), tmp_path / "runs" / "run-5" / "snapshot.json")
    return tmp_path / "runs"


def test_scheduled_job_flow(capsys, tmp_path, runs_dir, store_url):
    store = ["--store", store_url, "--environment", "prod"]
    for i in range(5):
        code, out, _ = _run(capsys, "monitor", "add", str(runs_dir / f"run-{i}"), *store, "--tag", "region=eu")
        assert code == 0 and out.startswith(f"stored: run #{i + 1} run-{i} ")
    code, out, _ = _run(capsys, "monitor", "add", str(runs_dir / "run-4" / "snapshot.json"), *store)
    assert code == 0 and out.startswith("already stored (same snapshot): run #5")

    code, out, _ = _run(capsys, "monitor", "check", *store)
    assert code == 0 and out.splitlines()[-1].startswith("PASS: run #5 run-4 vs the last 4 runs")

    alerts, prom = tmp_path / "alerts.jsonl", tmp_path / "textfile" / "specaudit.prom"
    code, out, _ = _run(
        capsys, "monitor", "check", str(runs_dir / "run-5"), *store, "--alert-file", str(alerts), "--metrics-file", str(prom)
    )
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith("FAIL drift dialect=aave acceptance_rate: ")
    assert lines[-1].startswith("FAIL: run #6 run-5 vs")
    assert all(line.split()[0] in ("FAIL", "WARN") for line in lines[:-1])  # alerts only, one per line
    logged = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert len(logged) == len(lines) - 1 and logged[0]["group"] == "aave" and logged[0]["environment"] == "prod"
    assert 'specaudit_acceptance_rate{dimension="dialect",group="aave"} ' in prom.read_text()
    assert "specaudit_monitor_status 2.0" in prom.read_text()

    code, out, _ = _run(capsys, "monitor", "drift", *store, "--format", "json")  # the alias, JSON output
    payload = json.loads(out)
    assert code == 1 and payload["status"] == "FAIL" and payload["run"] == "#6 run-5"
    assert any(c["group"] == "aave" and c["status"] == "FAIL" for c in payload["checks"])

    code, out, _ = _run(capsys, "monitor", "report", *store, "--out", str(tmp_path / "trend"))
    assert code == 0 and "6 run(s), 2 chart(s)" in out
    assert (tmp_path / "trend" / "trend.html").is_file() and (tmp_path / "trend" / "trend.csv").is_file()

    code, out, _ = _run(capsys, "monitor", "export", "3", *store)
    assert code == 0 and 'specaudit_run_info{run="run-2",run_id="3"' in out

    code, out, _ = _run(capsys, "history", "list", *store)
    rows = out.splitlines()
    assert code == 0 and rows[0].split()[:3] == ["id", "created", "(UTC)"] and len(rows) == 7
    assert rows[-1].split()[0] == "6" and rows[-1].split()[-1] == str(payload["counts"]["FAIL"])  # FAIL alerts of run 6

    code, out, _ = _run(capsys, "history", "show", "run-5", *store)
    assert code == 0 and "aave" in out and "region=eu" not in out  # tags are per add; run-5 was added by check
    code, out, _ = _run(capsys, "history", "show", "2", "--store", store_url, "--format", "json")
    assert json.loads(out) == history(seed=41, n=5)[1]

    code, out, _ = _run(capsys, "history", "baseline", "set", "2", *store)
    assert code == 0 and out.strip() == "baseline of environment prod: run #2 run-1"
    code, out, _ = _run(capsys, "monitor", "check", *store)
    assert code == 1 and "vs pinned baseline #2 run-1" in out.splitlines()[-1]
    code, out, _ = _run(capsys, "history", "list", *store)
    assert "2*" in out.split() and "pinned baseline" in out
    code, out, _ = _run(capsys, "history", "baseline", "clear", *store)
    assert code == 0 and out.strip() == "baseline of environment prod cleared"
    code, out, _ = _run(capsys, "history", "baseline", "show", *store)
    assert "none (checks use rolling:5)" in out


def test_exit_code_1_through_the_installed_entry_point(tmp_path, runs_dir, store_url):
    for i in range(5):
        assert main(["monitor", "add", str(runs_dir / f"run-{i}"), "--store", store_url]) == 0
    result = subprocess.run(
        [sys.executable, "-m", "specaudit.cli", "monitor", "check", str(runs_dir / "run-5"), "--store", store_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stdout.startswith("FAIL drift dialect=aave acceptance_rate")
    assert result.stderr == ""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bad_input_is_one_sentence_exit_2_and_nothing_stored_is_lost(capsys, tmp_path, runs_dir, store_url):
    assert main(["monitor", "add", str(runs_dir / "run-0"), "--store", store_url]) == 0
    db = tmp_path / "history.db"
    capsys.readouterr()

    def fails(*argv, match):
        code, _, err = _run(capsys, *argv)
        assert code == 2, err
        assert match in _one_error_line(err)

    fails("monitor", "add", str(runs_dir / "run-1"), "--store", "mysql://u@h/db", match="unknown scheme 'mysql'")
    fails("monitor", "add", str(tmp_path / "nope.json"), "--store", store_url, match="does not exist")
    future = write(edited(base_snapshot(), schema_version=2), tmp_path / "future.json")
    fails("monitor", "add", str(future), "--store", store_url, match="schema_version 2 but this specaudit reads version 1")
    fails("monitor", "check", str(future), "--store", store_url, match="schema_version 2")
    fails("monitor", "add", str(runs_dir / "run-1"), "--store", store_url, "--tag", "novalue", match="--tag 'novalue': write KEY=VALUE")
    fails("monitor", "check", "--store", store_url, "--baseline", "rolling:x", match="rolling:N")
    fails("monitor", "check", "--store", store_url, "--metrics", "speed", match="--metrics speed")
    fails("monitor", "show", "99", "--store", store_url, match="no run '99'")
    fails("monitor", "baseline", "set", "--store", store_url, match="needs a RUN")
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM specaudit_runs").fetchone()[0] == 1  # nothing lost, nothing half-added

    missing = tmp_path / "elsewhere" / "h.db"
    fails("monitor", "list", "--store", f"sqlite:///{missing}", match="no history store at")
    assert not missing.parent.exists()

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00\x01 definitely not sqlite " * 500)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as con:
        con.execute("CREATE TABLE invoices (id INTEGER)")
    before = {p: _sha(p) for p in (garbage, foreign)}
    for action in (["add", str(runs_dir / "run-1")], ["list"], ["check"], ["report", "--out", str(tmp_path / "r")]):
        fails("monitor", *action, "--store", f"sqlite:///{garbage}", match="not a SQLite database")
        fails("monitor", *action, "--store", f"sqlite:///{foreign}", match="not a specaudit history store")
    assert {p: _sha(p) for p in (garbage, foreign)} == before
    assert not (tmp_path / "r").exists()
