"""`specaudit run --engines screen`: ordinary records, resumable, the vanilla engine's samples, read by analyze."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

from specaudit.cli import main
from specaudit.engines.screen import check_call_invariance
from specaudit.errors import InputError
from specaudit.execution.records import read_records
from specaudit.models import int8_draft, tiny_model, tiny_tokenizer


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


def test_screened_model_draft_gives_per_position_acceptance_and_beta(tiny_pair_dir, tiny_prompts_file, tmp_path):
    """A model draft's screen records hold expectations, not per-step lists: per-position acceptance
    reads expected_reached and mean β reads position_beta."""
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "run", "screen") == 0
    assert main(["analyze", str(tmp_path / "run"), "--no-equivalence"]) == 0
    metrics = json.loads((tmp_path / "run" / "snapshot.json").read_text())["groups"]["group"]["overall"]["metrics"]
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert not any(r["accepted_per_step"] for r in records)
    accepted, reached = sum(r["accepted"] for r in records), sum(r["expected_reached"] for r in records)
    assert metrics["per_position_acceptance"]["value"] == pytest.approx(accepted / reached)
    betas = [b for r in records for b in r["position_beta"]]
    assert 0 < metrics["mean_beta"]["value"] < 1
    assert min(betas) <= metrics["mean_beta"]["value"] <= max(betas)


def test_planted_disparity_in_the_screen_is_scored_as_screened(tiny_pair, tiny_pair_dir, tiny_prompts_file, tmp_path):
    """The screen mixes group b's q only; analysis teacher-forces the same planted q, so its β per
    token equals the screen's `position_beta` on every record, planted or not."""
    from specaudit.analysis.equivalence import score_sampled

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
    assert check_call_invariance(target, int8_draft(target), prompt, path, torch.device("cpu"))["max_tv"] < 1e-3
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = quantize_dynamic(copy.deepcopy(target), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    with pytest.raises(InputError, match=r"TV up to"):
        check_call_invariance(target, dynamic, prompt, path, torch.device("cpu"))


def _grouped_prompts(path, groups: int, per_group: int):
    words = "river stone music bread winter garden letter window market bridge candle forest".split()
    with open(path, "w") as handle:
        for g in range(groups):
            for i in range(per_group):
                text = f"Write about the {words[(g + i) % len(words)]} and the {words[(3 * g + i + 1) % len(words)]}."
                handle.write(json.dumps({"id": f"p{g}-{i}", "text": text, "attributes": {"topic": f"t{g}"}}) + "\n")
    return path


def test_screen_with_engines_decodes_a_stratified_subset_and_predicts_speed(tiny_pair_dir, tmp_path):
    prompts = _grouped_prompts(tmp_path / "prompts.jsonl", groups=5, per_group=3)
    out = tmp_path / "run"
    assert _run(tiny_pair_dir, prompts, out, "screen,vanilla,speculative", "--samples", "1") == 0
    records = read_records(out / "records.jsonl")
    screened = {r["prompt_id"] for r in records if r["engine"] == "screen"}
    vanilla = {r["prompt_id"] for r in records if r["engine"] == "vanilla"}
    speculative = {r["prompt_id"] for r in records if r["engine"] == "speculative"}
    assert len(screened) == 15  # every prompt is screened
    assert vanilla == speculative and len(vanilla) == 5  # the engines: one prompt per group
    assert {pid.split("-")[0] for pid in vanilla} == {f"p{g}" for g in range(5)}
    assert main(["analyze", str(out)]) == 0
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert snapshot["run"]["disparity_engine"] == "screen"
    assert snapshot["speed"]["source"] == "cost model" and snapshot["speed"]["cost_model"]["n_prompts"] == 5
    by_group = snapshot["speed"]["validation_by_group"]["topic"]  # each group's one timed prompt against the other four
    assert len(by_group) == 5 and all(g["n_timed_prompts"] == 1 and 0 <= g["pvalue"] <= g["pvalue_holm"] <= 1 for g in by_group.values())
    assert "screen" not in snapshot["equivalence"]["engines"]  # the engines' records are the ones judged
    for entry in snapshot["groups"]["topic"]["by_group"].values():
        speedup = entry["metrics"]["speedup"]
        assert speedup["value"] > 0 and speedup["n_prompts"] == 3  # predicted for every screened prompt


def test_engine_prompts_caps_the_subset_and_too_few_timed_prompts_leave_speed_empty(tiny_pair_dir, tmp_path):
    prompts = _grouped_prompts(tmp_path / "prompts.jsonl", groups=5, per_group=2)
    out = tmp_path / "run"
    assert _run(tiny_pair_dir, prompts, out, "screen,vanilla,speculative", "--samples", "1", "--engine-prompts", "2") == 0
    records = read_records(out / "records.jsonl")
    assert len({r["prompt_id"] for r in records if r["engine"] == "speculative"}) == 2
    assert main(["analyze", str(out), "--no-equivalence"]) == 0
    speed = json.loads((out / "snapshot.json").read_text())["speed"]
    assert speed["source"] == "none" and "2 prompt(s) timed" in speed["reason"]


@pytest.mark.parametrize("extra", [["--executor", "ray"]])
def test_screen_refuses_what_it_cannot_run_beside(tiny_pair_dir, tiny_prompts_file, tmp_path, capsys, extra):
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "run", "screen,vanilla", *extra) == 2
    assert "screen runs with the local engines" in capsys.readouterr().err
    assert _run(tiny_pair_dir, tiny_prompts_file, tmp_path / "run2", "screen,endpoint") == 2


@pytest.mark.slow
@pytest.mark.parametrize("verify", [None, "specaudit.selftest.mutants:always_accept"])
def test_analysis_checks_the_screen_against_the_engine_on_shared_prompts(tiny_pair_dir, tmp_path, verify):
    prompts = _grouped_prompts(tmp_path / "prompts.jsonl", groups=6, per_group=1)
    out = tmp_path / "run"
    extra = ["--verify", verify] if verify else []
    assert _run(tiny_pair_dir, prompts, out, "screen,vanilla,speculative", "--samples", "4", *extra) == 0
    assert main(["analyze", str(out)]) in (0, 1)  # 1: the mutant fails equivalence too
    check = json.loads((out / "snapshot.json").read_text())["screen"]
    assert check["n_prompts"] == 6
    ratio, given = check["engine_over_screen_acceptance"], check["given_engine_paths"]
    assert given["n_runs"] == 24  # every engine run, scored along its own path
    if verify is None:  # the same rate, estimated two ways
        assert check["agrees"] and ratio["ci_low"] <= 1.0 <= ratio["ci_high"] and given["ci_low"] <= 1.0 <= given["ci_high"]
    else:  # an engine that accepts every draft token is not what the screen predicts, along its own paths either
        assert not check["agrees"] and ratio["ci_low"] > 1.0 and given["ci_low"] > 1.0
        assert "given the engine's own paths" in check["finding"] and "does not reproduce" in check["finding"]
    # without teacher-forced scores only the same-prompts test runs, and says so
    assert main(["analyze", str(out), "--no-equivalence"]) == 0
    check = json.loads((out / "snapshot.json").read_text())["screen"]
    assert check["given_engine_paths"]["note"].startswith("not run")
    assert check["agrees"] == (verify is None)


def test_equivalence_runs_when_the_engine_subset_misses_a_dimension(tiny_pair_dir, tmp_path):
    path = tmp_path / "prompts.jsonl"
    with open(path, "w") as handle:
        for i, text in enumerate(["Name a river.", "Name a stone.", "Name a song.", "Name a bird.", "Name a tree.", "Name a town."]):
            handle.write(json.dumps({"id": f"p{i}", "text": text, "attributes": {"topic" if i < 3 else "style": f"g{i % 3}"}}) + "\n")
    out = tmp_path / "run"
    assert _run(tiny_pair_dir, path, out, "screen,vanilla,speculative", "--samples", "2", "--engine-prompts", "1") == 0
    assert main(["analyze", str(out)]) == 0  # the one decoded prompt has one of the two dimensions
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert set(snapshot["equivalence"]["engines"]) == {"vanilla", "speculative"}
