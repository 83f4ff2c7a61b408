"""`specaudit audit` end to end on tiny models: config file, flags, outputs, exit codes."""

import json

import yaml

from specaudit.cli import main


def _config(tmp_path, tiny_pair_dir, tiny_prompts_file, **extra):
    target, draft = tiny_pair_dir
    options = {"target": str(target), "draft": str(draft), "prompts": str(tiny_prompts_file), "engines": "vanilla,speculative",
               "samples": 3, "max_new_tokens": 16, "device": "cpu", "analysis": {"n_boot": 100, "band": "0.5,2.0"},
               "gate": {"min_group_size": 1}}
    options.update(extra)
    path = tmp_path / "audit.yaml"
    path.write_text(yaml.safe_dump(options))
    return path


def test_audit_writes_everything_and_exit_code_follows_the_gate(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    out = tmp_path / "report"
    code = main(["audit", "--config", str(config), "--out", str(out), "--quiet", "--max-new-tokens", "12"])
    printed = capsys.readouterr().out
    for name in ("records.jsonl", "manifest.json", "snapshot.json", "report.html", "summary.md", "groups.csv", "junit.xml"):
        assert (out / name).is_file(), name
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert snapshot["run"]["config"]["max_new_tokens"] == 12  # the flag beat the config file
    assert snapshot["run"]["analysis"]["tolerance"] == [0.5, 2.0]  # the config's analysis section was used
    assert snapshot["gate"]["status"] in ("pass", "warn", "fail")
    assert code == (1 if snapshot["gate"]["status"] == "fail" else 0)
    assert "report.html" in printed and snapshot["gate"]["status"].upper() in printed


def test_audit_config_errors_exit_2_before_any_decoding(tmp_path, tiny_pair_dir, tiny_prompts_file, capsys):
    out = tmp_path / "o"
    for bad in ({"analysis": {"alfa": 0.1}}, {"gate": {"min_speedup": -3}}, {"temprature": 1.0}):
        config = _config(tmp_path, tiny_pair_dir, tiny_prompts_file, **bad)
        assert main(["audit", "--config", str(config), "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.count("specaudit: error:") == 1 and "Traceback" not in err
        assert not (out / "records.jsonl").exists()
