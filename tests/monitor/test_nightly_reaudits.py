"""A scheduled monitor re-audits every time: the README's nightly command, taken from README.md as
written, with audit.example.yaml (its `out: reports/nightly` kept) shrunk to the tiny pair, run
twice, decodes and stores two runs in two folders; a snapshot of a run the store already holds is
flagged, never taken for a new audit."""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from pathlib import Path

import pytest
import yaml

from specaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,  # two whole audits of the tiny pair
    pytest.mark.filterwarnings("ignore::UserWarning"),  # two-prompt groups: the prompt-set warning is expected
]


def readme_nightly_command() -> list[str]:
    """The arguments of the README's `specaudit monitor run ...` command."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.DOTALL)
    commands = [" ".join(block.replace("\\\n", " ").split()) for block in blocks if "monitor run" in block]
    assert len(commands) == 1, "README has one nightly command"
    words = shlex.split(commands[0])
    assert words[:3] == ["specaudit", "monitor", "run"]
    return words[3:]


def _tiny_config(tmp_path: Path, tiny_pair_dir, tiny_prompts_file) -> dict:
    """audit.example.yaml with the tiny pair and prompts, its `out:` and sections as committed."""
    config = yaml.safe_load((ROOT / "audit.example.yaml").read_text(encoding="utf-8"))
    assert config["out"] == "reports/nightly"
    target, draft = tiny_pair_dir
    config.update(
        target=str(target),
        draft=str(draft),
        prompts=str(tiny_prompts_file),
        engines="vanilla,speculative",
        engine_prompts=None,
        dimensions=None,
        samples=2,
        max_new_tokens=8,
        device="cpu",
    )
    config["analysis"]["n_boot"] = 100
    return {key: value for key, value in config.items() if value is not None}


def test_the_readme_nightly_command_twice_stores_two_audits(tmp_path, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    words = readme_nightly_command()
    config = _tiny_config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    monkeypatch.chdir(tmp_path)
    Path(words[words.index("--config") + 1]).write_text(yaml.safe_dump(config), encoding="utf-8")
    codes, errs = [], []
    for _night in range(2):
        codes.append(main(["monitor", "run", *words, "--quiet"]))
        errs.append(capsys.readouterr().err)
    runs = sorted((tmp_path / "reports" / "nightly").iterdir())
    assert len(runs) == 2, runs  # one new folder per night under the config's `out:`
    decoded = [len((run / "records.jsonl").read_text(encoding="utf-8").splitlines()) for run in runs]
    assert decoded[0] == decoded[1] == 4 * 2 * 2  # 4 prompts x 2 engines x 2 samples, each night decoded anew
    assert all("resumed" not in err and "re-analyses" not in err for err in errs)
    # each night samples anew: its own decoding seed (printed, in the manifest), so other tokens
    seeds = [json.loads((run / "manifest.json").read_text(encoding="utf-8"))["config"]["seed"] for run in runs]
    assert seeds[0] != seeds[1] and all(f"decoding seed {seed} " in err for seed, err in zip(seeds, errs, strict=True))
    tokens = [
        [json.loads(line)["output_token_ids"] for line in (run / "records.jsonl").read_text(encoding="utf-8").splitlines()] for run in runs
    ]
    assert tokens[0] != tokens[1]
    store = Path(words[words.index("--store") + 1].removeprefix("sqlite:///"))
    with sqlite3.connect(store) as db:
        stored = db.execute("select name, created, digest, snapshot from specaudit_runs order by id").fetchall()
        tags = db.execute("select key from specaudit_run_tags where key = 'same_run_as'").fetchall()
    assert len(stored) == 2 and not tags
    (name1, created1, digest1, snap1), (name2, created2, digest2, snap2) = stored
    assert (name1, name2) == (runs[0].name, runs[1].name) and digest1 != digest2
    assert json.loads(snap1)["run"]["dir"] != json.loads(snap2)["run"]["dir"]
    # each night's folder was written by one invocation that decoded all of it (nothing resumed)
    assert [json.loads((run / "manifest.json").read_text(encoding="utf-8"))["invocations"] for run in runs] == [1, 1]
    # the exit code: the drift check's, or the audit's decision (the same rule as `audit`)
    for code, run in zip(codes, runs, strict=True):
        gate = json.loads((run / "snapshot.json").read_text(encoding="utf-8"))["gate"]
        assert code >= gate["exit_code"] and code in (0, 1)

    # the same run stored again (re-analysed with another bootstrap count) is flagged, not taken for a new audit
    assert main(["analyze", str(runs[1]), "--n-boot", "50"]) == 0
    capsys.readouterr()
    assert main(["monitor", "add", str(runs[1]), "--store", f"sqlite:///{store}", "--environment", "prod"]) == 0
    err = capsys.readouterr().err
    assert f"re-analyses the records of run #2 {runs[1].name}" in err and "not a new audit" in err
    with sqlite3.connect(store) as db:
        assert db.execute("select value from specaudit_run_tags where key = 'same_run_as'").fetchall() == [("2",)]


def test_a_named_folder_run_again_says_it_resumed_and_is_stored_once(tmp_path, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    config = _tiny_config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    monkeypatch.chdir(tmp_path)
    Path("audit.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = ["monitor", "run", "--config", "audit.yaml", "--out", "fixed", "--store", "sqlite:///h.db", "--quiet", "--fail-on", "fail"]
    main(argv)
    first = capsys.readouterr().err
    main(argv)
    second = capsys.readouterr().err
    assert "resumed" not in first and "resumed fixed: 16 records were already there, 0 decoded now" in second
    # the same records analysed the same way: the same snapshot (the analysis's duration is not content)
    assert "run #1 fixed was already stored" in second and "not a new audit" in second
    with sqlite3.connect("h.db") as db:
        assert db.execute("select count(*) from specaudit_runs").fetchone() == (1,)


def test_monitor_run_takes_the_audit_flags_its_help_names(tmp_path, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    config = _tiny_config(tmp_path, tiny_pair_dir, tiny_prompts_file)
    for key in ("temperature", "top_p"):  # --sampling sets them (both at once is refused)
        config.pop(key)
    monkeypatch.chdir(tmp_path)
    Path("audit.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["monitor", "run", "--help"])
    help_text = capsys.readouterr().out
    assert all(flag in help_text for flag in ("--dry-run", "--fail-on", "--sampling", "--pair"))
    # --dry-run: the audit's plan, nothing decoded, no store created
    code = main(["monitor", "run", "--config", "audit.yaml", "--store", "sqlite:///h.db", "--dry-run", "--sampling", "greedy", "t=1"])
    out = capsys.readouterr().out
    assert code == 0 and "nothing runs: --dry-run" in out and "x 2 sampling settings" in out
    assert not Path("h.db").exists() and not Path("reports").exists()
    try:  # argparse refuses a choice itself (SystemExit 2)
        code = main(["monitor", "run", "--config", "audit.yaml", "--fail-on", "never"])
    except SystemExit as refused:
        code = refused.code
    assert code == 2 and "--fail-on" in capsys.readouterr().err
