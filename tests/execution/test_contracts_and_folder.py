"""The run contracts (Record, PlanItem), the run folder's lock and output checks, and the atomic
writes: fast checks without models."""

import json
import os
import subprocess
import sys

import pytest

from specaudit._files import json_clean, write_atomic, write_json_atomic
from specaudit.cli import main
from specaudit.config import RunConfig
from specaudit.contracts.run import Record
from specaudit.errors import InputError
from specaudit.execution.folder import LOCK_FILE, RunFolder, folder_lock
from specaudit.execution.plan import plan_items
from specaudit.execution.records import RecordWriter, load_records, read_records

LINE = {
    "key": "p1|vanilla|0",
    "prompt_id": "p1",
    "pair_id": None,
    "attributes": {"g": "a"},
    "engine": "vanilla",
    "sample": 0,
    "seed": 7,
    "timing_only": False,
    "sampling": {"temperature": 1.0},
    "k": 0,
    "prompt_token_ids": [1, 2],
    "output_token_ids": [3, 4],
    "text": "hi",
    "finish_reason": "length",
    "wall_s": 0.5,
    "ttft_s": None,
    "steps": 2,
    "proposed": 0,
    "accepted": 0,
    "accepted_per_step": [],
    "proposed_per_step": [],
    "beta": [],
    "accept_prob": [],
    "step_pit": [[0.1, 0.2]],
    "draft_s": 0.0,
    "verify_s": 0.0,
    "step_s": [0.25],
    "backend": "endpoint",
    "target_logprobs": None,
}


def test_record_round_trips_the_json_of_a_line_with_its_extras_in_order():
    record = Record.from_json(LINE)
    assert record.output_token_ids == [3, 4] and record.extra == {"backend": "endpoint", "target_logprobs": None}
    assert record.to_json() == LINE and list(record.to_json()) == list(LINE)
    sparse = {"key": "a", "engine": "vanilla", "custom": 1}  # an old or hand-made line keeps exactly its fields
    assert Record.from_json(sparse).to_json() == sparse
    assert record.with_extra(note="x").to_json() == {**LINE, "note": "x"}


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("output_token_ids", "3 4", "a list of integers"),
        ("output_token_ids", [3, 4.5], "a list of integers"),
        ("sample", True, "an integer or a string"),
        ("timing_only", "no", "true or false"),
        ("beta", [[0.5, "x"]], "a list of lists of numbers"),
        ("wall_s", "slow", "a number or null"),
    ],
)
def test_a_field_of_the_wrong_type_names_file_line_and_field(tmp_path, field, value, expected):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(LINE) + "\n" + json.dumps({**LINE, "key": "b", field: value}) + "\n")
    with pytest.raises(InputError, match=rf"records.jsonl, line 2: field '{field}' must be {expected}, got"):
        read_records(path)


def test_record_writer_writes_records_and_dicts_alike(tmp_path):
    path = tmp_path / "records.jsonl"
    with RecordWriter(path) as writer:
        writer.write(Record.from_json(LINE))
        writer.write({**LINE, "key": "b"})
    assert [r.key for r in load_records(path)] == ["p1|vanilla|0", "b"]
    assert read_records(path)[0] == LINE


def test_plan_items_interleave_engines_and_mark_timing_repeats(tiny_prompts_file):
    from specaudit.prompts import load_prompts

    prompts = load_prompts(str(tiny_prompts_file)).prompts[:1]
    cfg = RunConfig(prompts=str(tiny_prompts_file), samples=2, timing_repeats=1, draft="ngram")
    items = plan_items(prompts, cfg)
    assert [(i.engine, i.sample, i.timing_only) for i in items] == [
        ("vanilla", 0, False),
        ("speculative", 0, False),
        ("speculative", 1, False),
        ("vanilla", 1, False),
        ("vanilla", "t0", True),
        ("speculative", "t0", True),
    ]
    assert items[0].key == f"{prompts[0].id}|vanilla|0"


def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holder_is_taken_over(tmp_path):
    with folder_lock(tmp_path):
        with pytest.raises(InputError, match=f"another specaudit process \\(pid {os.getpid()}\\)"):
            with folder_lock(tmp_path):
                pass
    assert not (tmp_path / LOCK_FILE).exists()  # released on exit
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    import socket

    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    with folder_lock(tmp_path) as lock:  # a killed writer's lock does not block the folder forever
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_run_into_a_locked_folder_is_refused_before_writing(tmp_path, tiny_prompts_file, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": os.getppid(), "host": __import__("socket").gethostname()}))
    code = main(["run", "--prompts", str(tiny_prompts_file), "--draft", "ngram", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"pid {os.getppid()}" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]


@pytest.mark.parametrize("command", ["run", "merge"])
def test_out_naming_a_file_or_an_unwritable_folder_is_one_sentence(tmp_path, tiny_prompts_file, capsys, command):
    a_file = tmp_path / "afile"
    a_file.write_text("keep me")
    args = {
        "run": ["run", "--prompts", str(tiny_prompts_file), "--draft", "ngram", "--quiet"],
        "merge": ["merge", str(tmp_path / "shard0")],
    }[command]
    for out, message in ((a_file, "is a file, not a folder"), (a_file / "sub", "is a file, not a folder")):
        assert main([*args, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert a_file.read_text() == "keep me"
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert main([*args, "--out", str(locked / "run")]) == 2
        assert "is not writable" in capsys.readouterr().err


def test_a_failed_run_leaves_no_folder_it_created(tmp_path, tiny_prompts_file):
    cfg = RunConfig(prompts=str(tiny_prompts_file), draft="ngram", verify="no_such_module:f", device="cpu")
    with pytest.raises(InputError, match="--verify"):
        with RunFolder(cfg, tmp_path / "new") as folder:
            folder.cfg.load_verify()
    assert not (tmp_path / "new").exists()


def test_atomic_writes_are_complete_or_absent_and_json_is_strict(tmp_path):
    path = write_json_atomic(tmp_path / "a.json", {"x": float("nan"), "y": (1, float("inf")), "z": 0.5})
    assert json.loads(path.read_text()) == {"x": None, "y": [1, None], "z": 0.5}
    assert json_clean({1: [float("-inf")]}) == {"1": [None]}
    (tmp_path / "dir.md").mkdir()
    with pytest.raises(InputError, match="is a folder, not a file"):
        write_atomic(tmp_path / "dir.md", "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "dir.md"]  # no stray staging file


def test_audit_refuses_an_out_naming_a_file_before_loading_models(tmp_path, tiny_prompts_file, capsys):
    a_file = tmp_path / "afile"
    a_file.write_text("keep me")
    # the target does not exist: had the models loaded first, the error would name it instead
    code = main(["audit", "--target", str(tmp_path / "no-model"), "--prompts", str(tiny_prompts_file), "--out", str(a_file), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "is a file, not a folder" in err and a_file.read_text() == "keep me"
