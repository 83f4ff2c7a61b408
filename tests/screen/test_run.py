"""`specaudit run --engines screen`: ordinary records, resumable, the vanilla engine's samples, read by analyze."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

from specaudit.cli import main
from specaudit.errors import InputError
from specaudit.models import int8_draft, tiny_model, tiny_tokenizer
from specaudit.records import read_records
from specaudit.screen import check_call_invariance


def _run(tiny_pair_dir, prompts_file, out, engines, *extra):
    target, draft = tiny_pair_dir
    return main(
        [
            "run",
            "--engines",
            engines,
            "--target",
            str(target),
            "--draft",
            str(draft),
            "--prompts",
            str(prompts_file),
            "--samples",
            "2",
            "--max-new-tokens",
            "10",
            "--out",
            str(out),
            "--quiet",
            *extra,
        ]
    )


def test_screen_records_are_the_vanilla_samples_and_resume(tiny_pair_dir, tiny_prompts_file, tmp_path):
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "screen", "screen") == 0
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "vanilla", "vanilla") == 0
    screen = {(r["prompt_id"], r["sample"]): r for r in read_records(tmp_path / "screen" / "records.jsonl")}
    vanilla = {(r["prompt_id"], r["sample"]): r for r in read_records(tmp_path / "vanilla" / "records.jsonl")}
    assert set(screen) == set(vanilla) and len(screen) == 8
    for key, record in screen.items():
        assert record["engine"] == "screen" and record["seed"] == vanilla[key]["seed"]
        assert record["output_token_ids"] == vanilla[key]["output_token_ids"]  # same seed, same warp, same sampler
        assert len(record["position_beta"]) == len(record["position_accept"]) == len(record["output_token_ids"])
        assert 0 <= record["accepted"] <= record["expected_reached"] <= record["proposed"]
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "screen", "screen") == 0  # resumed: nothing new
    assert len(read_records(tmp_path / "screen" / "records.jsonl")) == 8


def test_analyze_reads_acceptance_per_group_from_screen_records(tiny_pair_dir, tiny_prompts_file, tmp_path):
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "run", "screen", "--draft", "ngram") == 0
    assert main(["analyze", str(tmp_path / "run")]) == 0
    snapshot = json.loads((tmp_path / "run" / "snapshot.json").read_text())
    records = read_records(tmp_path / "run" / "records.jsonl")
    accepted, proposed = sum(r["accepted"] for r in records), sum(r["proposed"] for r in records)
    overall = snapshot["groups"]["group"]["overall"]["metrics"]["acceptance_rate"]["value"]
    assert snapshot["run"]["disparity_engine"] == "screen"
    assert overall == pytest.approx(accepted / proposed)
    assert all(sum(r["accepted_per_step"]) == r["accepted"] for r in records)  # n-gram: exact simulated steps


def test_planted_disparity_in_the_screen_is_scored_as_screened(tiny_pair, tiny_pair_dir, tiny_prompts_file, tmp_path):
    """The screen mixes group b's q only; analysis teacher-forces the same planted q, so its β per
    token equals the screen's `position_beta` on every record, planted or not."""
    from specaudit.analysis import score_sampled

    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "clean", "screen") == 0
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "run", "screen", "--plant-disparity", "group=b:0.3") == 0
    clean = {r["key"]: r for r in read_records(tmp_path / "clean" / "records.jsonl")}
    records = read_records(tmp_path / "run" / "records.jsonl")
    for record in records:
        same = record["position_beta"] == clean[record["key"]]["position_beta"]
        assert same == (record["attributes"]["group"] == "a"), record["key"]
    scores, note = score_sampled(records, tiny_pair, "group=b:0.3")
    assert note["batch_invariant"] and scores.has_draft
    for record in records:
        beta = scores.tokens.loc[scores.tokens["key"] == record["key"], "beta"].to_numpy()
        assert beta == pytest.approx(record["position_beta"], abs=1e-5)
    assert main(["analyze", str(tmp_path / "run")]) == 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--plant-disparity", "group=b:1"], "write dimension=group:factor with 0 < factor < 1"),
        (["--plant-disparity", "group=b:0.5", "--draft", "ngram"], "the ngram draft has none"),
        (["--plant-disparity", "group=zzz:0.5"], "no prompt is in group 'zzz' of 'group'"),
    ],
)
def test_a_plant_that_cannot_apply_exits_2(tiny_pair_dir, tiny_prompts_file, tmp_path, capsys, extra, message):
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "run", "screen", *extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "run" / "records.jsonl").exists()


def test_int8_draft_is_call_invariant_and_dynamic_int8_is_refused():
    target, tokenizer = tiny_model(), tiny_tokenizer()
    prompt, path = tokenizer("Explain why the sky is blue.")["input_ids"], tokenizer(" Because of scattering light.")["input_ids"]
    assert check_call_invariance(int8_draft(target), prompt, path, torch.device("cpu")) < 1e-3
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = quantize_dynamic(copy.deepcopy(target), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    with pytest.raises(InputError, match=r"TV up to"):
        check_call_invariance(dynamic, prompt, path, torch.device("cpu"))
