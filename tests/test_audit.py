"""`specaudit audit` end to end on tiny models: config file, flags, outputs, exit codes."""

import json

import yaml

from specaudit.cli import main


def _config(tmp_path, tiny_pair_dir, tiny_prompts_file, **extra):
    target, draft = tiny_pair_dir
    options = {
        "target": str(target),
        "draft": str(draft),
        "prompts": str(tiny_prompts_file),
        "engines": "vanilla,speculative",
        "samples": 3,
        "max_new_tokens": 16,
        "device": "cpu",
        "analysis": {"n_boot": 100, "band": "0.5,2.0"},
        "gate": {"min_group_size": 1},
    }
    options.update(extra)
    path = tmp_path / "audit.yaml"
    path.write_text(yaml.safe_dump(options))
    return path


def test_audit_writes_everything_and_exit_code_follows_the_gate(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys, monkeypatch):
    from specaudit.contracts.snapshot import GateSection, Snapshot
    from specaudit.report import OUTPUT_FILES, render_report

    validated = []  # the contract validates the snapshot once in analyze, and the gate's section alone
    for section in (Snapshot, GateSection):
        real = section.model_validate.__func__
        monkeypatch.setattr(
            section, "model_validate", classmethod(lambda cls, *a, _real=real, **k: validated.append(cls) or _real(cls, *a, **k))
        )
    config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    out = tmp_path / "report"
    code = main(["audit", "--config", str(config), "--out", str(out), "--quiet", "--max-new-tokens", "12"])
    printed = capsys.readouterr().out
    assert validated == [Snapshot, GateSection]
    for name in ("records.jsonl", "manifest.json", "snapshot.json", "report.html", "summary.md", "groups.csv", "junit.xml"):
        assert (out / name).is_file(), name
    # the typed snapshot the audit rendered is the one snapshot.json reads back as
    render_report(out / "snapshot.json", tmp_path / "again")
    for name in OUTPUT_FILES.values():
        assert (tmp_path / "again" / name).read_text() == (out / name).read_text(), name
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert snapshot["run"]["config"]["max_new_tokens"] == 12  # the flag beat the config file
    assert snapshot["run"]["analysis"]["tolerance"] == [0.5, 2.0]  # the config's analysis section was used
    assert snapshot["gate"]["status"] in ("PASS", "WARN", "FAIL")
    assert code == (1 if snapshot["gate"]["status"] == "FAIL" else 0)
    assert "report.html" in printed and snapshot["gate"]["status"].upper() in printed


def test_audit_config_errors_exit_2_before_any_decoding(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    out = tmp_path / "o"
    for bad in ({"analysis": {"alfa": 0.1}}, {"gate": {"min_speedup": -3}}, {"temprature": 1.0}):
        config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file, **bad)
        assert main(["audit", "--config", str(config), "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("specaudit: error:") == 1 and "Traceback" not in err
        assert not (out / "records.jsonl").exists()


def test_monitor_run_audits_stores_and_checks(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    """`monitor run` = the audit of `audit` (same config file and flags) + store + drift check.
    Three runs: the first starts the history, the second re-runs with another seed, the third
    plants a disparity in group b's draft; every run lands in the store with per-prompt values."""
    import sqlite3

    config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    store = f"sqlite:///{tmp_path / 'history.db'}"
    codes, outputs = [], []
    for i, extra in enumerate([[], ["--seed", "1"], ["--seed", "2", "--plant-disparity", "group=b:0.2"]]):
        code = main(
            [
                "monitor",
                "run",
                "--config",
                str(config),
                "--out",
                str(tmp_path / f"run{i}"),
                "--quiet",
                "--store",
                store,
                "--environment",
                "ci",
                "--format",
                "json",
                *extra,
            ]
        )
        codes.append(code)
        outputs.append(capsys.readouterr().out)
    results = [json.loads(out) for out in outputs]  # with --format json, stdout is the check alone
    assert results[0]["checks"][0]["kind"] == "baseline"  # nothing to compare with yet
    # the exit code: 1 where the drift check fails or the audit's own exit code (its decision) is 1
    audits = [json.loads((tmp_path / f"run{i}" / "snapshot.json").read_text())["gate"]["exit_code"] for i in range(3)]
    assert codes == [max(r["exit_code"], a) for r, a in zip(results, audits, strict=True)]
    drift = [c for c in results[2]["checks"] if c["kind"] == "drift" and c["group"] == "b" and c["metric"] == "acceptance_rate"]
    assert drift and drift[0]["details"]["method"] == "paired t-test on per-prompt differences"
    assert drift[0]["details"]["current"] < drift[0]["details"]["baseline"]
    with sqlite3.connect(tmp_path / "history.db") as db:
        assert db.execute("select count(*) from specaudit_runs where environment = 'ci'").fetchone()[0] == 3
    snapshot = json.loads((tmp_path / "run2" / "snapshot.json").read_text())
    assert {row["id"] for row in snapshot["prompts"]} == {"p1", "p2", "p3", "p4"}
    assert snapshot["run"]["config"]["plant_disparity"] == "group=b:0.2"


def test_monitor_run_refuses_a_foreign_store_before_decoding(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    foreign = tmp_path / "not-a-db.db"
    foreign.write_bytes(b"this is not sqlite" * 100)
    config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    code = main(["monitor", "run", "--config", str(config), "--out", str(tmp_path / "r"), "--quiet", "--store", f"sqlite:///{foreign}"])
    assert code == 2 and not (tmp_path / "r").exists()
    assert foreign.read_bytes() == b"this is not sqlite" * 100


def test_audit_over_sampling_settings_fails_if_any_setting_fails(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    """`--sampling` runs one whole audit per setting. A verifier that is silently greedy (SGLang
    PR #31214) is right at greedy decoding and wrong at t=1: the audit fails, the greedy setting
    passes and says it cannot show that class."""
    config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file, verify="specaudit.selftest.mutants:greedy_verification")
    out = tmp_path / "settings"
    code = main(["audit", "--config", str(config), "--out", str(out), "--quiet", "--sampling", "greedy", "t=1"])
    printed = capsys.readouterr().out
    rows = {r["setting"]: r for r in json.loads((out / "settings.json").read_text())["settings"]}
    assert set(rows) == {"greedy", "t=1"}
    for row in rows.values():
        assert (out / row["folder"] / "report.html").is_file()
    assert json.loads((out / "greedy" / "snapshot.json").read_text())["run"]["config"]["temperature"] == 0.0
    assert rows["t=1"]["correctness"] == "violation" and rows["t=1"]["exit_code"] == 1
    assert rows["greedy"]["correctness"] != "violation" and "verification silently greedy" in rows["greedy"]["blind_to"]
    assert code == 1 and "over 2 settings: gate FAIL" in printed
    assert printed.splitlines()[-1] == "decision: Do not enable  (exit 1) (the worst setting's)"
    # greedy is correct; it fails only on its decision (the tiny pair decodes slower than vanilla: Do not enable)
    greedy = json.loads((out / "greedy" / "snapshot.json").read_text())["gate"]
    assert [c["name"] for c in greedy["checks"] if c["status"] == "FAIL"] == ["decision"] and rows["greedy"]["decision"] == "do_not"
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# specaudit over 2 sampling settings: FAIL at ") and "t=1" in summary.splitlines()[0]
    assert "| verification silently greedy: " in summary and "SGLang PR #31214 | **no** | yes |" in summary
    # the greedy report's banner says the class was not tested there
    assert "verification silently greedy (SGLang PR #31214)" in (out / "greedy" / "summary.md").read_text()


def test_sampling_flag_errors_exit_2_before_any_decoding(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    out = tmp_path / "o"
    for flags, message in (
        (["--sampling", "t=0.7,top_q=0.9"], "'top_q' is not a sampling setting; did you mean top_p?"),
        (["--sampling", "greedy", "--top-p", "0.9"], "drop --top-p"),
        (["--sampling", "t=1", "temperature=1"], "repeats the setting t=1"),
    ):
        assert main(["audit", "--config", str(config), "--out", str(out), "--quiet", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("specaudit: error:") == 1 and message in err and "Traceback" not in err
        assert not out.exists()
