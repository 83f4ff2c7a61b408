"""Command-line options a newcomer meets first (issue 40): `--version`, one default per option, the
endpoint flags (flags win over the config file), `--concurrency` for every engine that serves
requests, no flag silently ignored, and `--dry-run`'s plan and predicted time."""

from __future__ import annotations

import re

import pytest
import yaml

from specaudit.audit import DEFAULT_BUDGET, QUICK_BUDGET
from specaudit.cli import build_parser, main
from specaudit.cli.dry_run import DEFAULT_PAIR, predicted_seconds
from specaudit.cli.run import _run_config, _within_budget
from specaudit.config import RunConfig

SPEC, PLAIN = "http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"


def _config(argv: list[str]) -> RunConfig:
    return _run_config(build_parser().parse_args(["run", "--out", "unused", *argv]))


def _one_sentence_exit_2(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_version_names_the_installed_package(capsys):
    from specaudit import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"specaudit {__version__}"


def test_run_and_audit_share_one_default_for_new_tokens():
    assert RunConfig().max_new_tokens == DEFAULT_BUDGET["max_new_tokens"] == QUICK_BUDGET["max_new_tokens"] == 32


def test_server_flags_make_an_endpoint_audit_and_win_over_the_config_file(tmp_path):
    config = tmp_path / "endpoint.yaml"
    config.write_text(
        yaml.safe_dump({"endpoint": {"speculative_url": "http://old:1/v1", "vanilla_url": PLAIN, "logprobs": 5}, "engines": "endpoint"})
    )
    with pytest.warns(FutureWarning, match="`endpoint:` is deprecated"):  # the old top-level section, still read
        cfg = _config(
            ["--config", str(config), "--speculative-url", SPEC, "--model", "served", "--api-key-env", "KEY_VAR", "--target", "t"]
        )
    assert cfg.engines == ("endpoint",)
    assert cfg.engine_settings("endpoint")["speculative_url"] == SPEC.rstrip("/")  # the flag won
    assert (
        cfg.engine_settings("endpoint")["vanilla_url"] == PLAIN and cfg.engine_settings("endpoint")["logprobs"] == 5
    )  # the file's other keys kept
    assert cfg.engine_settings("endpoint")["speculative_model"] == cfg.engine_settings("endpoint")["vanilla_model"] == "served"
    assert cfg.engine_settings("endpoint")["api_key_env"] == "KEY_VAR"
    assert _config(["--speculative-url", SPEC, "--vanilla-url", PLAIN, "--target", "t"]).engines == ("endpoint",)  # no file needed


@pytest.mark.parametrize(
    ("flag", "expected"),
    [("4", {"concurrency": 4, "concurrency_levels": None}), ("1,4", {"concurrency": 4, "concurrency_levels": (1, 4)})],
)
def test_concurrency_applies_to_endpoints_as_to_llama_server(flag, expected):
    cfg = _config(["--speculative-url", SPEC, "--vanilla-url", PLAIN, "--target", "t", "--concurrency", flag])
    assert {key: cfg.engine_settings("endpoint")[key] for key in expected} == expected
    server = _config(["--engines", "llama-server", "--concurrency", "1,2"])
    assert server.extra["llama_server"]["concurrency_levels"] == (1, 2)  # set by the llama-server settings


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["run", "--out", "x", "--engine-prompts", "1"], "--engine-prompts 1"),
        (["run", "--out", "x", "--concurrency", "4"], "--concurrency"),
        (["run", "--out", "x", "--speculative-url", SPEC, "--target", "t"], "--vanilla-url"),
        (["run", "--out", "x", "--speculative-url", SPEC, "--vanilla-url", PLAIN], "--target"),
        (["run", "--out", "x", "--speculative-url", SPEC, "--vanilla-url", PLAIN, "--engines", "screen"], "--engines screen"),
        (
            ["run", "--out", "x", "--speculative-url", SPEC, "--vanilla-url", PLAIN, "--target", "t", "--concurrency", "1,x"],
            "--concurrency",
        ),
    ],
)
def test_a_flag_that_cannot_apply_is_refused_in_one_sentence(argv, names, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _one_sentence_exit_2(argv, capsys)
    assert line.startswith("specaudit: error:") and names in line
    assert not (tmp_path / "x").exists()


def test_monitor_report_refuses_a_negative_count(capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:  # argparse refuses it: exit 2 and the usage line
        main(["monitor", "report", "--store", f"sqlite:///{tmp_path}/h.db", "--last", "-1"])
    assert stop.value.code == 2
    assert "--last" in capsys.readouterr().err


def test_repeated_sampling_flags_accumulate():
    args = build_parser().parse_args(["audit", "--sampling", "t=1", "--sampling", "t=0.7,top_p=0.9", "greedy"])
    assert args.sampling == ["t=1", "t=0.7,top_p=0.9", "greedy"]


def test_equivalence_alpha_has_its_own_name_and_the_old_spelling_still_works(capsys):
    assert build_parser().parse_args(["analyze", "r", "--equivalence-alpha", "0.01"]).alpha == 0.01
    assert capsys.readouterr().err == ""
    assert build_parser().parse_args(["analyze", "r", "--alpha", "0.02"]).alpha == 0.02
    assert "--alpha is now --equivalence-alpha" in capsys.readouterr().err


def test_a_budget_caps_the_engines_only_beside_the_screen():
    assert "engine_prompts" not in _within_budget(QUICK_BUDGET, {"engines": "endpoint"})
    assert "engine_prompts" not in _within_budget(QUICK_BUDGET, {"engines": ["llama-server"]})
    assert _within_budget(QUICK_BUDGET, {"engines": "screen,vanilla,speculative"})["engine_prompts"] == 8
    assert _within_budget(QUICK_BUDGET, {})["engine_prompts"] == 8


def test_dry_run_prints_the_plan_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--dry-run", "--quick", "--out", "plan-only"]) == 0
    out = capsys.readouterr().out
    assert "132 of core" in out and "the engines decode 8 of them" in out and "screen 132, speculative 8, vanilla 8" in out
    assert "predicted time: about 1 min 5" in out
    assert not (tmp_path / "plan-only").exists()
    assert main(["audit", "--dry-run", "--target", "some/other-model", "--dimensions", "language", "--out", "plan-only"]) == 0
    assert "predicted time: unknown" in capsys.readouterr().out


def test_dry_run_of_a_resumed_audit_counts_what_is_there_and_predicts_the_rest(tmp_path, monkeypatch, capsys):
    """A --quick audit of the default pair killed after its screen: `--resume --dry-run` counts the
    132 screen records there and predicts the engines and analysis only (no model is loaded)."""
    import json

    from specaudit.execution.folder import load_run_prompts
    from specaudit.execution.plan import engine_subset, plan_items

    monkeypatch.chdir(tmp_path)
    cfg = RunConfig(**QUICK_BUDGET)
    run_dir = tmp_path / "reports" / "killed"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"created": "2026-01-01T00:00:00+00:00", "config": cfg.to_dict()}))
    prompts = load_run_prompts(cfg)
    items = plan_items(list(prompts.prompts), cfg, cfg.engines, engine_subset(prompts, cfg))
    with open(run_dir / "records.jsonl", "w", encoding="utf-8") as records:  # what the screen had written
        for item in items:
            if item.engine == "screen":
                records.write(json.dumps({"key": item.key, "engine": item.engine, "prompt_id": item.prompt.id}) + "\n")
    assert main(["audit", "--quick", "--dry-run", "--out", str(run_dir)]) == 0
    whole = capsys.readouterr().out
    assert main(["audit", "--resume", "--dry-run"]) == 0  # the last run under reports/
    resumed = capsys.readouterr().out
    assert "resumed: 132 of 148 items are recorded in reports/killed/; 16 left to decode" in resumed
    seconds = [int(m) * 60 + int(s) for m, s in (re.search(r"about (\d+) min (\d+) s", text).groups() for text in (whole, resumed))]
    # the screen's share is left out (132 prompts at 180/440 s each): the engines and the analysis remain
    assert seconds[1] == pytest.approx(seconds[0] - 132 * DEFAULT_PAIR.screen_per_prompt, abs=1)


@pytest.mark.parametrize(
    ("per_group", "screened", "decoded", "measured_s"),
    [(10, 440, 44, 443), (3, 132, 8, 115), (30, 1320, 44, 760)],  # committed runs (docs/results.md)
)
def test_dry_run_prediction_is_within_ten_percent_of_the_measured_runs(per_group, screened, decoded, measured_s):
    cfg = RunConfig(engines="screen,vanilla,speculative", per_group=per_group, max_new_tokens=32)
    assert predicted_seconds(cfg, screened, decoded, DEFAULT_PAIR) == pytest.approx(measured_s, rel=0.10)


def test_per_prompt_numbers_written_as_strings_are_refused_by_report_compare(tmp_path, capsys):
    import json
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "reports" / "example"
    snapshot = json.loads((example / "snapshot.json").read_text())
    snapshot["prompts"][0]["acceptance_rate"] = str(snapshot["prompts"][0]["acceptance_rate"])
    (tmp_path / "snapshot.json").write_text(json.dumps(snapshot))
    line = _one_sentence_exit_2(["report", str(example), "--compare", str(tmp_path), "--out", str(tmp_path / "r")], capsys)
    assert f"prompts.0: acceptance_rate of prompt {snapshot['prompts'][0]['id']!r} must be a number or null, got a string" in line
    assert not (tmp_path / "r").exists()


def test_dry_run_of_a_server_audit_counts_requests_per_level(capsys, tmp_path, monkeypatch, tiny_prompts_file, reference_servers):
    monkeypatch.chdir(tmp_path)
    speculative, vanilla = reference_servers
    argv = ["audit", "--dry-run", "--speculative-url", speculative.url, "--vanilla-url", vanilla.url, "--target", "default"]
    assert main([*argv, "--concurrency", "1,4", "--prompts", str(tiny_prompts_file), "--samples", "2"]) == 0  # nothing decoded
    out = capsys.readouterr().out
    assert f"servers: speculation on {speculative.url} (" in out and "both answered" in out
    assert "items: speculative 8, vanilla 8; x 2 concurrency levels (1, 4)" in out
    assert not list(tmp_path.iterdir())


def test_the_endpoint_example_file_is_a_valid_config_and_flags_win_over_it():
    from pathlib import Path

    example = str(Path(__file__).resolve().parents[1] / "endpoint.example.yaml")
    cfg = _config(["--config", example])
    assert cfg.engines == ("endpoint",) and cfg.engine_settings("endpoint")["concurrency_levels"] == (1, 4)
    assert _config(["--config", example, "--concurrency", "8"]).engine_settings("endpoint")["concurrency"] == 8


# ----------------------------------------------------------------------------- engine settings sections
def test_engine_flags_fill_the_engine_sections_and_win_over_the_file(tmp_path):
    config = tmp_path / "shapes.yaml"
    config.write_text(yaml.safe_dump({"engines": "vanilla,tree,staged", "extra": {"tree": {"branching": "2,2", "children": "top-k"}}}))
    cfg = _config(["--config", str(config), "--tree", "3,1", "--level-k", "2,3"])
    assert cfg.engine_settings("tree") == {"branching": "3,1", "children": "top-k"}  # the flag won, the file's other key kept
    assert cfg.engine_settings("staged") == {"levels": "ngram,int8", "level_k": "2,3"}
    identity = cfg.decoding_identity()  # under the names run folders recorded before the sections
    assert (identity["tree"], identity["tree_children"], identity["levels"], identity["level_k"]) == ("3,1", "top-k", "ngram,int8", "2,3")


def test_old_top_level_engine_keys_are_read_with_one_deprecation_notice(tmp_path):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump({"engines": "vanilla,tree", "tree": "2,2,1", "tree_children": "top-k"}))
    new.write_text(yaml.safe_dump({"engines": "vanilla,tree", "extra": {"tree": {"branching": "2,2,1", "children": "top-k"}}}))
    with pytest.warns(FutureWarning) as notices:
        from_old = _config(["--config", str(old)])
    assert sorted(str(n.message) for n in notices) == [
        f"config file {old}: `tree:` is deprecated and is read until the next release; write it as `extra: {{tree: {{branching: ...}}}}`",
        f"config file {old}: `tree_children:` is deprecated and is read until the next release; write it as "
        "`extra: {tree: {children: ...}}`",
    ]
    from_new = _config(["--config", str(new)])
    assert from_old.extra == from_new.extra and from_old.decoding_identity() == from_new.decoding_identity()


def test_a_bad_engine_setting_is_one_sentence_naming_it(capsys, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"engines": "vanilla,tree", "extra": {"tree": {"branchs": "2,2"}}}))
    assert "extra.tree: unknown setting(s) branchs" in _one_sentence_exit_2(
        ["run", "--out", str(tmp_path / "o"), "--config", str(config)], capsys
    )
    assert "--tree '0,2'" in _one_sentence_exit_2(
        ["run", "--out", str(tmp_path / "o"), "--engines", "vanilla,tree", "--tree", "0,2"], capsys
    )
