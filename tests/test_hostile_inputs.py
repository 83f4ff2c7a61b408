"""Issue 31, the cases without a server (those with one: tests/fuzz/test_hostile_server.py).

Each bad input ends in exit 2 with one sentence naming what and where, before any work or write:
NaN / infinite / out-of-range numbers (case 2, 8, 9), a damaged history store (6), config files
(7), mitigate's inputs (8) and prompt files (10). What JSON allows in a prompt file is accepted.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest

from specaudit.cli import main
from specaudit.prompts import PromptSetWarning, load_prompts

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "reports" / "example"


def run_cli(*argv) -> tuple[int, str, str]:
    """(exit code, the one error line or "", stdout) of `specaudit ARGV` in this process."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit_:  # argparse: a flag's type refused it
            code = exit_.code
    text = err.getvalue()
    assert "Traceback" not in text and "internal error" not in text, text
    errors = [line for line in text.splitlines() if "error:" in line]
    assert len(errors) <= 1, text
    return code, (errors[0] if errors else ""), out.getvalue()


def _store_runs(store: Path) -> int:
    if not store.exists():
        return 0
    with contextlib.closing(sqlite3.connect(store)) as db:
        return db.execute("select count(*) from specaudit_runs").fetchone()[0]


# ----------------------------------------------------------------------------- case 2 and 9: monitor numbers
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--min-change", "nan"], "argument --min-change: must be a finite number, got 'nan'"),
        (["--min-change", "-0.1"], "--min-change must be a finite number >= 0"),
        (["--cusum-h", "nan"], "argument --cusum-h: must be a finite number"),
        (["--cusum-h", "0"], "--cusum-h must be a finite number > 0"),
        (["--alpha", "2"], "--alpha must be in (0, 1), got 2.0"),
        (["--alpha", "inf"], "argument --alpha: must be a finite number"),
        (["--baseline", "99999"], "no run '99999' in history store"),
        (["--baseline", "rolling:0"], "--baseline 'rolling:0': write rolling:N with N >= 1"),
    ],
)
def test_monitor_check_refuses_bad_settings_before_storing(tmp_path, flags, message):
    store = tmp_path / "history.db"
    code, error, _ = run_cli("monitor", "check", EXAMPLE / "snapshot.json", "--store", f"sqlite:///{store}", *flags)
    assert code == 2 and message in error, error
    assert _store_runs(store) == 0  # nothing stored


def test_monitor_run_refuses_a_bad_baseline_before_decoding(tmp_path):
    store, out = tmp_path / "history.db", tmp_path / "run"
    argv = ["monitor", "run", "--store", f"sqlite:///{store}", "--target", "tiny-not-loaded", "--out", out]
    code, error, _ = run_cli(*argv, "--baseline", "rolling:0")
    assert code == 2 and "rolling:0" in error and not out.exists() and _store_runs(store) == 0
    code, error, _ = run_cli(*argv, "--min-change", "nan")
    assert code == 2 and "--min-change" in error and not out.exists()


# ----------------------------------------------------------------------------- case 2: run numbers
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--temperature", "inf"], "argument --temperature: must be a finite number, got 'inf'"),
        (["--top-p", "nan"], "argument --top-p: must be a finite number"),
        (["--seed", "99999999999999999999999"], "argument --seed: must be an integer from 0 to 2**63 - 1"),
        (["--seed", "-1"], "argument --seed: must be an integer from 0 to 2**63 - 1"),
        (["--plant-disparity", ""], "--plant-disparity '': write dimension=group:factor"),
        (["--plant-disparity", "group=a:0.5", "--engines", "vanilla"], "--engines vanilla runs neither"),
    ],
)
def test_run_refuses_numbers_and_plants_that_cannot_apply(tmp_path, tiny_prompts_file, flags, message):
    out = tmp_path / "out"
    code, error, _ = run_cli("run", "--target", "tiny-not-loaded", "--prompts", tiny_prompts_file, "--out", out, *flags)
    assert code == 2 and message in error, error
    assert not out.exists()


@pytest.mark.parametrize(
    "config, message",
    [
        ("temperature: .inf\n", "error: temperature must be a finite number, got inf"),
        ("top_p: .nan\n", "error: top_p must be a finite number, got nan"),
        ("seed: 99999999999999999999999\n", "error: seed must be an integer in [0, 2**63 - 1]"),
        ("analysis:\n  alpha: .nan\n", "alpha must be a finite number"),
        ("engines: endpoint\ndtype: float16\nendpoint:\n  speculative_url: http://a/v1\n  vanilla_url: http://b/v1\n", "--dtype float16"),
        ("engines: endpoint\nendpoint:\n  speculative_url: http://a/v1\n  vanilla_url: http://b/v1\n  timeout_s: .inf\n", "timeout_s"),
        ("1: one\n", "option names are words, but 1 is not a word (int)"),
    ],
)
def test_run_config_values_checked_once(tmp_path, config, message):
    path = tmp_path / "run.yaml"
    path.write_text(config)
    code, error, _ = run_cli("run", "--config", path, "--out", tmp_path / "out")
    assert code == 2 and message in error, error
    assert not (tmp_path / "out").exists()


def test_config_files_latin1_and_non_string_keys_are_one_sentence(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("target: café\n".encode("latin-1"))
    keyed = tmp_path / "keyed.yaml"
    keyed.write_text("1: one\n")
    for path, message in ((latin, "is not UTF-8 text (byte 11 is 0xe9)"), (keyed, "1 is not a word")):
        for argv in (["run", "--config", path, "--out", tmp_path / "o"], ["gate", EXAMPLE, "--config", path]):
            code, error, _ = run_cli(*argv)
            assert code == 2 and str(path) in error and message in error, error


# ----------------------------------------------------------------------------- case 6: a damaged history store
@pytest.fixture
def stored(tmp_path) -> tuple[str, Path]:
    store = tmp_path / "history.db"
    url = f"sqlite:///{store}"
    assert run_cli("monitor", "add", EXAMPLE / "snapshot.json", "--store", url)[0] == 0
    return url, store


def test_a_text_metric_value_is_named_and_the_other_rows_still_load(stored):
    url, store = stored
    with contextlib.closing(sqlite3.connect(store)) as db:
        total = db.execute("select count(*) from specaudit_metrics").fetchone()[0]
        db.execute("update specaudit_metrics set value = 'abc' where rowid = 1")
        db.commit()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, error, out = run_cli("monitor", "show", "1", "--store", url)
    assert code == 0, error
    said = [str(w.message) for w in caught]
    assert any(f"history store {store}, run #1: metric row" in s and "value is 'abc', not a number" in s for s in said), said
    assert len([line for line in out.splitlines() if "n_prompts=" in line]) == total - 1


@pytest.mark.parametrize("argv", [["show", "1", "--format", "json"], ["check"], ["show", "1"]])
def test_a_stored_snapshot_that_is_not_json_is_one_sentence(stored, argv):
    url, store = stored
    with contextlib.closing(sqlite3.connect(store)) as db:
        db.execute("update specaudit_runs set snapshot = '{not json'")
        db.commit()
    code, error, _ = run_cli("monitor", *argv, "--store", url)
    if argv == ["show", "1"]:  # the text view reads the metric rows only
        assert code == 0, error
        return
    assert code == 2 and f"history store {store}, run #1: the stored snapshot is not JSON" in error, error


# ----------------------------------------------------------------------------- case 8: mitigate
@pytest.fixture
def run_copy(tmp_path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(EXAMPLE, folder)
    return folder


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning-rate", "nan"], "argument --learning-rate: must be a finite number"),
        (["--learning-rate", "0"], "--learning-rate must be a number > 0"),
        (["--per-group", "0"], "--per-group must be an integer >= 1, got 0"),
        (["--equivalence-prompts", "-1"], "--equivalence-prompts must be an integer >= 0, got -1"),
        (["--timing-prompts", "-3"], "--timing-prompts must be an integer >= 0, got -3"),
        (["--held-out", "1"], "--held-out must be a number in (0, 1)"),
    ],
)
def test_mitigate_refuses_bad_numbers_before_any_work(run_copy, tmp_path, flags, message):
    code, error, _ = run_cli("mitigate", run_copy, "--out", tmp_path / "mitigated", *flags)
    assert code == 2 and message in error, error
    assert not (tmp_path / "mitigated").exists()


def test_mitigate_reads_the_snapshot_through_its_contract(run_copy, tmp_path):
    (run_copy / "snapshot.json").write_text('{"schema_version": 1, "groups": ')
    code, error, _ = run_cli("mitigate", run_copy, "--out", tmp_path / "mitigated")
    assert code == 2 and f"{run_copy / 'snapshot.json'} is not valid JSON" in error, error


# ----------------------------------------------------------------------------- case 10: prompt files
def _rows(n: int = 8, text: str = "a prompt {i}") -> list[dict]:
    return [{"id": f"p{i}", "text": text.format(i=i), "attributes": {"group": "ab"[i % 2]}} for i in range(n)]


def _write_jsonl(path: Path, rows: list[dict], prefix: str = "") -> Path:
    path.write_text(prefix + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_raw_line_separator_inside_a_string_is_valid_json_lines(tmp_path):
    path = _write_jsonl(tmp_path / "u2028.jsonl", _rows(text="first\u2028second\u2029third {i}"))
    assert "\u2028" in path.read_text(encoding="utf-8")  # raw, not escaped
    code, error, _ = run_cli("prompts", "validate", path)
    assert code == 0, error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptSetWarning)
        prompts = load_prompts(str(path))
    assert [p.text for p in prompts.prompts][:2] == ["first\u2028second\u2029third 0", "first\u2028second\u2029third 1"]


def test_a_byte_order_mark_is_named_as_one(tmp_path):
    path = _write_jsonl(tmp_path / "bom.jsonl", _rows(), prefix="\ufeff")
    code, error, _ = run_cli("prompts", "validate", path)
    assert code == 2 and "line 1" in error and "byte-order mark (BOM)" in error and "torn" not in error, error


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_pathological_nesting_is_refused_with_a_sentence(tmp_path, suffix, tiny_pair_dir):
    deep = '{"id": "x", "text": "t", "attributes": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path = tmp_path / f"deep{suffix}"
    path.write_text(json.dumps(_rows(1)[0]) + "\n" + deep + "\n")
    code, error, _ = run_cli("prompts", "validate", path)
    assert code == 2 and "nested too deeply" in error, error
    code, error, _ = run_cli("run", "--target", tiny_pair_dir[0], "--prompts", path, "--out", tmp_path / "out", "--engines", "vanilla")
    assert code == 2 and "nested too deeply" in error and not (tmp_path / "out").exists(), error


def test_ten_thousand_small_groups_give_a_summary_not_ten_thousand_lines(tmp_path):
    rows = [{"id": f"p{i}", "text": f"t {i}", "attributes": {"group": f"g{i}"}} for i in range(10_000)]
    path = _write_jsonl(tmp_path / "groups.jsonl", rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_prompts(str(path))
    said = [str(w.message) for w in caught if issubclass(w.category, PromptSetWarning)]
    assert len(said) == 6 and "9995 more warning(s) (10000 in all)" in said[-1], said[-1]
