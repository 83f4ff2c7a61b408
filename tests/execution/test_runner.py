"""The runner end to end on tiny models: records, manifest, resume after SIGKILL, torn lines."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specaudit.config import RunConfig
from specaudit.engines import run
from specaudit.errors import InputError
from specaudit.execution.invariants import check_invariants
from specaudit.execution.records import read_records

OUTPUT_FIELDS = (
    "key",
    "prompt_id",
    "engine",
    "sample",
    "seed",
    "prompt_token_ids",
    "output_token_ids",
    "text",
    "finish_reason",
    "steps",
    "proposed",
    "accepted",
    "accepted_per_step",
    "beta",
)


def _config(tiny_pair_dir, prompts, **overrides):
    target, draft = tiny_pair_dir
    options = dict(
        target=str(target),
        draft=str(draft),
        engines="vanilla,speculative,hf-assisted",
        samples=2,
        max_new_tokens=24,
        prompts=str(prompts),
        device="cpu",
        seed=3,
        temperature=1.0,
    )
    options.update(overrides)
    return RunConfig(**options)


def _outputs(records):
    """What must not depend on interruption: everything but timings."""
    return sorted(tuple(json.dumps(r[f]) for f in OUTPUT_FIELDS) for r in records)


def test_run_writes_records_and_manifest(tmp_path, tiny_pair_dir, tiny_prompts_file):
    cfg = _config(tiny_pair_dir, tiny_prompts_file, timing_repeats=1)
    summary = run(cfg, tmp_path / "run", progress=False)
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert summary.records == len(records) == 4 * 3 * (2 + 1)
    assert not check_invariants(records)
    torn = next(dict(r, step_pit=r["step_pit"][:-1]) for r in records if r["engine"] == "speculative")
    assert check_invariants([torn]) == [
        f"{torn['key']}: step_pit has {len(torn['step_pit'])} entries for {len(torn['output_token_ids'])} new tokens"
    ]
    assert sum(r["timing_only"] for r in records) == 4 * 3
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["prompt_set"]["checksum"] == manifest["prompt_set_checksum"]
    assert manifest["models"]["target"]["sha256"]  # local folder weights are hashed
    assert manifest["versions"]["torch"] and manifest["decoding"]["k"] == 4
    spec = [r for r in records if r["engine"] == "speculative"]
    assert all(len(b) <= 4 for r in spec for b in r["beta"]) and sum(r["proposed"] for r in spec) > 0
    # engines of one prompt and sample share a seed; order alternates between samples
    keys = [r["key"] for r in records]
    assert keys[0].endswith("|vanilla|0") and keys[3].endswith("|hf-assisted|1")


def test_rerun_is_a_no_op_and_settings_change_is_refused(tmp_path, tiny_pair_dir, tiny_prompts_file):
    cfg = _config(tiny_pair_dir, tiny_prompts_file, engines="vanilla,speculative", samples=1)
    run(cfg, tmp_path / "run", progress=False)
    again = run(cfg, tmp_path / "run", progress=False)
    assert again.written == 0 and again.skipped == again.records == 8
    with pytest.raises(InputError, match="other settings.*temperature"):
        run(
            _config(tiny_pair_dir, tiny_prompts_file, engines="vanilla,speculative", samples=1, temperature=0.5),
            tmp_path / "run",
            progress=False,
        )


def test_torn_last_line_is_dropped_and_run_completes(tmp_path, tiny_pair_dir, tiny_prompts_file):
    cfg = _config(tiny_pair_dir, tiny_prompts_file, engines="vanilla,speculative", samples=1)
    full = tmp_path / "full"
    run(cfg, full, progress=False)
    torn = tmp_path / "torn"
    torn.mkdir()
    lines = (full / "records.jsonl").read_text().splitlines(keepends=True)
    (torn / "records.jsonl").write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    with pytest.warns(UserWarning, match="torn last line"):
        assert len(read_records(torn / "records.jsonl")) == 3
    with pytest.warns(UserWarning, match="torn last line"):
        run(cfg, torn, progress=False)
    assert _outputs(read_records(torn / "records.jsonl")) == _outputs(read_records(full / "records.jsonl"))


def test_corruption_in_the_middle_is_an_input_error(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(InputError, match="line 2"):
        read_records(path)


@pytest.mark.slow
def test_sigkill_midway_then_resume_equals_uninterrupted_run(tmp_path, tiny_pair_dir, tiny_prompts_file):
    target, draft = tiny_pair_dir
    args = [
        sys.executable,
        "-m",
        "specaudit.cli",
        "run",
        "--target",
        str(target),
        "--draft",
        str(draft),
        "--prompts",
        str(tiny_prompts_file),
        "--engines",
        "vanilla,speculative",
        "--samples",
        "6",
        "--max-new-tokens",
        "24",
        "--device",
        "cpu",
        "--seed",
        "5",
        "--quiet",
    ]
    reference = tmp_path / "reference"
    subprocess.run(args + ["--out", str(reference)], check=True, capture_output=True)
    interrupted = tmp_path / "interrupted"
    process = subprocess.Popen(args + ["--out", str(interrupted)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records_file = interrupted / "records.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not records_file.exists() or records_file.read_text().count("\n") < 10):
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    partial = records_file.read_text().count("\n")
    assert 10 <= partial < 48, "the kill must land mid-run for this test to mean anything"
    finished = subprocess.run(args + ["--out", str(interrupted)], capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    records = read_records(records_file)
    assert len({r["key"] for r in records}) == len(records) == 48
    assert _outputs(records) == _outputs(read_records(reference / "records.jsonl"))


def test_four_shards_merged_equal_the_unsplit_run(tmp_path, tiny_pair_dir, tiny_prompts_file, tiny_pair):
    from specaudit.execution.merge import merge_runs

    cfg = _config(tiny_pair_dir, tiny_prompts_file, engines="vanilla,speculative", samples=2)
    run(cfg, tmp_path / "whole", progress=False, pair=tiny_pair)
    shards = [tmp_path / f"shard{i}" for i in range(4)]
    for i, folder in enumerate(shards):
        run(cfg, folder, progress=False, pair=tiny_pair, shard=(i, 4))
    assert merge_runs(tmp_path / "merged", shards) == 16
    assert _outputs(read_records(tmp_path / "merged" / "records.jsonl")) == _outputs(read_records(tmp_path / "whole" / "records.jsonl"))
    sizes = [len(read_records(folder / "records.jsonl")) for folder in shards]
    assert sum(sizes) == 16 and max(sizes) < 16  # the prompts really were split
    busy = shards[sizes.index(max(sizes))]
    with pytest.raises(InputError, match="in both"):
        merge_runs(tmp_path / "twice", [busy, busy])
    other = _config(tiny_pair_dir, tiny_prompts_file, engines="vanilla,speculative", samples=2, temperature=0.5)
    run(other, tmp_path / "other", progress=False, pair=tiny_pair, shard=(1, 4))
    with pytest.raises(InputError, match="different decoding"):
        merge_runs(tmp_path / "mixed", [shards[0], tmp_path / "other"])


def test_plant_disparity_lowers_acceptance_on_its_group_only(tmp_path, tiny_pair_dir, tiny_prompts_file):
    """A planted disparity: group b's draft mixed toward uniform changes nothing for group a."""
    common = dict(engines="speculative", samples=3, max_new_tokens=24)
    run(_config(tiny_pair_dir, tiny_prompts_file, **common), tmp_path / "clean", progress=False)
    run(_config(tiny_pair_dir, tiny_prompts_file, plant_disparity="group=b:0.3", **common), tmp_path / "planted", progress=False)
    clean, planted = (read_records(tmp_path / name / "records.jsonl") for name in ("clean", "planted"))

    def rate(records, group):
        chosen = [r for r in records if r["attributes"]["group"] == group]
        return sum(r["accepted"] for r in chosen) / sum(r["proposed"] for r in chosen)

    assert _outputs([r for r in clean if r["attributes"]["group"] == "a"]) == _outputs(
        [r for r in planted if r["attributes"]["group"] == "a"]
    )
    assert rate(planted, "b") < 0.6 * rate(clean, "b")
    manifest = json.loads((tmp_path / "planted" / "manifest.json").read_text())
    assert manifest["decoding"]["plant_disparity"] == "group=b:0.3"


@pytest.mark.parametrize("text", ["group=b", "group:0.5", "=b:0.5", "group=b:-1", "group=b:1"])
def test_malformed_plant_disparity_is_an_input_error(tiny_pair_dir, tiny_prompts_file, text):
    with pytest.raises(InputError, match="dimension=group:factor"):
        _config(tiny_pair_dir, tiny_prompts_file, plant_disparity=text)


def test_plant_disparity_refuses_the_ngram_draft(tiny_pair_dir, tiny_prompts_file):
    with pytest.raises(InputError, match="ngram draft has none"):
        _config(tiny_pair_dir, tiny_prompts_file, engines="speculative", draft="ngram", plant_disparity="group=b:0.5")


def test_a_conversation_reaches_the_model_through_the_chat_template(tmp_path, tiny_pair_dir):
    import shutil

    from transformers import AutoTokenizer

    from specaudit.prompts import load_prompts, prompt_token_ids

    target = tmp_path / "target"  # the tiny target, given a chat template
    shutil.copytree(tiny_pair_dir[0], target)
    tokenizer = AutoTokenizer.from_pretrained(target)
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}<s>assistant: "
    tokenizer.save_pretrained(target)
    messages = [
        {"role": "user", "content": "name a colour"},
        {"role": "assistant", "content": "blue"},
        {"role": "user", "content": "another one"},
    ]
    source = tmp_path / "chat.jsonl"
    source.write_text(json.dumps({"id": "chat-1", "messages": messages, "attributes": {"kind": "chat"}}) + "\n")
    cfg = _config((target, tiny_pair_dir[1]), source, engines="vanilla", samples=1, max_new_tokens=4)
    run(cfg, tmp_path / "run", progress=False)
    (record,) = read_records(tmp_path / "run" / "records.jsonl")
    (prompt,) = load_prompts(str(source)).prompts
    assert record["prompt_token_ids"] == prompt_token_ids(tokenizer, prompt)
    assert record["prompt_token_ids"] != prompt_token_ids(tokenizer, prompt.text)  # not the transcript as one user turn


def test_per_group_sample_does_not_follow_the_decoding_seed(tmp_path, tiny_pair_dir):
    from specaudit.execution import RunFolder

    def chosen(**overrides):
        cfg = RunConfig(prompts="core", dimensions=("dialect",), per_group=3, **overrides)
        with RunFolder(cfg, tmp_path / f"probe-{len(list(tmp_path.iterdir()))}") as folder:
            return sorted(p.id for p in folder.prompt_set.prompts)

    assert chosen(seed=1) == chosen(seed=2)
    assert chosen(sample_seed=1) != chosen(sample_seed=2)
