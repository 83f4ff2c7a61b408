"""specaudit mitigate on the tiny models: acceptance measurement, distillation, weights, the
written draft, policies and bad input."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from specaudit.decoding import SamplingSpec
from specaudit.errors import InputError
from specaudit.mitigate import (
    distil,
    group_policy,
    group_weights,
    mean_objective,
    measure_acceptance,
    mitigate,
    sample_target,
    sequence_weights,
    split_by_pair,
)
from specaudit.prompts import prompt_token_ids

TEXTS = [
    "Hello there, how are you?",
    "Write a short poem about rain.",
    "Explain why the sky is blue.",
    "List three fruits.",
    "Name a color.",
    "Count to five.",
    "Say something nice.",
    "What is two plus two?",
]
SPEC = SamplingSpec(1.0)


@pytest.fixture(scope="module")
def audited_run(tmp_path_factory, tiny_pair_dir):
    """A vanilla + speculative run of 8 parallel pairs in two groups, analysed (no equivalence)."""
    from specaudit.analysis import analyze
    from specaudit.config import RunConfig
    from specaudit.engines import run

    root = tmp_path_factory.mktemp("mitigate-run")
    rows = [
        {"id": f"p{i}-{g}", "text": text if g == "lower" else text.upper(), "pair_id": f"p{i}", "attributes": {"case": g}}
        for i, text in enumerate(TEXTS)
        for g in ("lower", "upper")
    ]
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    target, draft = tiny_pair_dir
    cfg = RunConfig(target=str(target), draft=str(draft), prompts=str(prompts), max_new_tokens=10, device="cpu", warmup=0)
    with pytest.warns(UserWarning):  # groups below the prompt set's minimum size
        run(cfg, root / "run", progress=False)
        analyze(root / "run", equivalence=False)
    return root / "run"


@pytest.fixture(scope="module")
def mitigated(audited_run, tiny_pair_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("mitigated") / "out"
    with pytest.warns(UserWarning):
        result = mitigate(
            audited_run,
            out,
            draft=str(tiny_pair_dir[1]),
            train_layers=1,
            steps=30,
            samples=2,
            max_new_tokens=10,
            learning_rate=1e-3,
            equivalence_prompts=2,
            timing_prompts=1,
            device="cpu",
            progress=False,
        )
    return result


def _samples(pair, names, seed, samples=4):
    encoded = {f"p{i}": prompt_token_ids(pair.tokenizer, TEXTS[i]) for i in names}
    return sample_target(
        pair.target, encoded, spec=SPEC, samples=samples, max_new_tokens=16, eos_ids={2}, vocab_size=pair.vocab_size, pad_id=0, seed=seed
    )


def test_acceptance_of_the_target_against_itself_is_one(tiny_pair):
    samples = _samples(tiny_pair, [0, 1], seed=0, samples=2)
    same = measure_acceptance(tiny_pair.target, samples, spec=SPEC, vocab_size=tiny_pair.vocab_size, k=4)
    other = measure_acceptance(tiny_pair.draft, samples, spec=SPEC, vocab_size=tiny_pair.vocab_size, k=4)
    assert all(abs(a.alpha - 1.0) < 1e-5 for a in same.values())
    assert all(0.0 < a.alpha < 0.99 for a in other.values())
    assert all(a.positions == sum(len(s.continuation) for s in samples if s.prompt_id == pid) for pid, a in other.items())
    # the target as its own draft accepts every proposal: each step emits k + 1 tokens (fewer at
    # the path's end), so with free drafting (c = 0) the predicted speed-up is tokens per step
    for pid, a in same.items():
        lengths = [len(s.continuation) for s in samples if s.prompt_id == pid]
        assert a.steps == pytest.approx(sum(-(-n // 5) for n in lengths), abs=1e-4)
        assert a.predicted_speedup(0.0) == pytest.approx(a.positions / a.steps)
    assert all(other[p].predicted_speedup(0.1) < same[p].predicted_speedup(0.1) for p in same)


def test_acceptance_is_the_screens_on_the_same_paths(tiny_pair):
    """The mitigation's samples are the screen's rows for the runner's seeds, and its counts are
    the screen's: one implementation of the sampling and the acceptance maths."""
    from specaudit.engines.screen import screen_paths
    from specaudit.execution.plan import derive_seed

    samples = _samples(tiny_pair, [0, 1, 2], seed=3, samples=1)
    measured = measure_acceptance(tiny_pair.draft, samples, spec=SPEC, vocab_size=tiny_pair.vocab_size, k=3)
    paths = screen_paths(
        tiny_pair.target,
        tiny_pair.draft,
        [s.prompt_ids for s in samples],
        [derive_seed(3, s.prompt_id, 0) for s in samples],
        spec=SPEC,
        k=3,
        max_new_tokens=16,
        eos_ids={2},
        vocab_size=tiny_pair.vocab_size,
        pad_id=0,
        check_draft=False,
    )
    for sample, path in zip(samples, paths, strict=True):
        assert sample.continuation == path.tokens
        entry = measured[sample.prompt_id]
        assert entry.beta_sum == pytest.approx(sum(path.acceptance.beta), abs=1e-4)
        assert entry.accepted == pytest.approx(path.acceptance.accepted, abs=1e-4)
        assert entry.steps == pytest.approx(path.acceptance.steps, abs=1e-4)


def test_distillation_lowers_the_tv_objective_on_held_out_prompts(tiny_pair):
    train, held = _samples(tiny_pair, range(5), seed=0), _samples(tiny_pair, range(5, 8), seed=1)
    before = mean_objective(tiny_pair.target, tiny_pair.draft, held, spec=SPEC, vocab_size=tiny_pair.vocab_size)
    result = distil(
        tiny_pair.target,
        tiny_pair.draft,
        train,
        np.full(len(train), 1 / len(train)),
        spec=SPEC,
        vocab_size=tiny_pair.vocab_size,
        steps=40,
        learning_rate=1e-3,
        train_layers=1,
    )
    after = mean_objective(tiny_pair.target, result.draft, held, spec=SPEC, vocab_size=tiny_pair.vocab_size)
    assert after < before - 0.05, (before, after)
    assert result.loss_curve[-1] < result.loss_curve[0]
    # the draft given is untouched: distillation trains a copy
    untouched = mean_objective(tiny_pair.target, tiny_pair.draft, held, spec=SPEC, vocab_size=tiny_pair.vocab_size)
    assert untouched == pytest.approx(before)


def test_group_weights_favour_low_acceptance():
    alphas, sizes = {"good": 0.8, "bad": 0.2, "mid": 0.4}, {"good": 6, "bad": 2, "mid": 4}
    inverse = group_weights(alphas, sizes, "inverse-acceptance")
    assert inverse["bad"] > inverse["mid"] > inverse["good"]
    assert sum(inverse.values()) == pytest.approx(1.0)
    assert group_weights(alphas, sizes, "balanced") == pytest.approx({"good": 1 / 3, "bad": 1 / 3, "mid": 1 / 3})
    unweighted = group_weights(alphas, sizes, "unweighted")
    assert unweighted["good"] == pytest.approx(0.5) and unweighted["bad"] < inverse["bad"]
    with pytest.raises(InputError, match="mid"):
        group_weights({"good": 0.8, "bad": 0.2}, sizes, "inverse-acceptance")
    zero = group_weights({"good": 0.8, "bad": 0.0, "mid": 0.4}, sizes, "inverse-acceptance")
    assert np.isfinite(list(zero.values())).all() and zero["bad"] == max(zero.values())


def test_sequence_weights_give_each_group_its_share():
    from specaudit.mitigate import TargetSample

    samples = [TargetSample(pid, [1], [3]) for pid in ("a1", "a2", "a3", "b1", "x1")]
    group_of = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "x1": None}
    weights = sequence_weights(samples, group_of, {"a": 0.25, "b": 0.75})
    assert weights.sum() == pytest.approx(1.0)
    assert weights[3] == pytest.approx(3 * weights[0:3].sum())  # b's share is three times a's
    assert weights[4] == pytest.approx(1 / 5)  # outside the dimension: its share of the data


def test_split_keeps_pairs_together_and_names_an_empty_group():
    from specaudit.mitigate._run_folder import Prompt

    prompts = {f"{p}-{g}": Prompt(f"{p}-{g}", [1], p, {"case": g}) for p in ("p1", "p2", "p3", "p4") for g in ("x", "y")}
    train, held = split_by_pair(prompts, 0.5, 0, ["case"])
    assert not {prompts[p].pair for p in train} & {prompts[p].pair for p in held}
    assert sorted(train + held) == sorted(prompts)
    prompts["lonely"] = Prompt("lonely", [1], "p9", {"case": "z"})
    with pytest.raises(InputError, match="case=z"):
        split_by_pair(prompts, 0.5, 0, ["case"])


def test_policy_routes_low_acceptance_and_lengthens_k_with_acceptance():
    low, mid, high = (group_policy(alpha, 0.3, 4) for alpha in (0.1, 0.6, 0.95))
    assert low["route_to_vanilla"] and low["expected_speedup_policy"] == 1.0
    assert not high["route_to_vanilla"] and high["k"] > mid["k"] >= 1
    assert high["expected_speedup_best_k"] >= high["expected_speedup_run_k"]


def test_mitigate_writes_a_loadable_draft_card_policy_and_before_after(mitigated, tiny_pair_dir):
    from specaudit.models import load_pair

    out = mitigated.out_dir
    for name in ("training_card.json", "training_card.md", "policy.json", "policy.yaml", "before_after.json", "before_after.md"):
        assert (out / name).is_file(), name
    pair = load_pair(str(tiny_pair_dir[0]), str(out / "draft"), device="cpu")
    assert isinstance(pair.draft, torch.nn.Module)
    assert len(pair.draft.model.layers) == len(load_pair(str(tiny_pair_dir[0]), str(tiny_pair_dir[1]), device="cpu").draft.model.layers)
    card = json.loads((out / "training_card.json").read_text())
    assert card["training"]["steps"] == 30 and len(card["loss_curve"]["inverse-acceptance"]) == 30
    assert set(card["weighting"]["shares"]) == {"lower", "upper"}
    policy = json.loads((out / "policy.json").read_text())
    assert policy["kind"] == "specaudit.speculation_policy" and set(policy["groups"]) == {"lower", "upper"}
    assert all((g["k"] == 0) == (not g["speculate"]) for g in policy["groups"].values())
    summary = mitigated.summary
    # the verdict is analyze's on the real engine's run with the distilled draft (checked, not
    # assumed); at 2 prompts x 2 samples the battery's 5% false-alarm rate applies, so the test
    # holds the summary to the snapshot rather than to one outcome
    reaudit = json.loads((out / "reaudit-run" / "snapshot.json").read_text())
    assert summary["equivalence"]["status"] == reaudit["equivalence"]["status"] in ("PASS", "FAIL")
    assert summary["equivalence"]["records"] == reaudit["run"]["n_records"] > 0
    assert "speculative" in reaudit["equivalence"]["engines"]
    assert set(summary["weightings"]) == {"inverse-acceptance", "unweighted"}
    for row in summary["comparison"]["groups"].values():
        assert row["before"]["ci_low"] <= row["before"]["value"] <= row["before"]["ci_high"]
        for when in ("before", "after"):
            speed = row["speedup"][when]
            assert 0 < speed["ci_low"] <= speed["value"] <= speed["ci_high"]
        change = row["speedup"]["after"]["value"] - row["speedup"]["before"]["value"]
        assert change == pytest.approx(row["speedup"]["change"]["value"])
    # the policies of the distilled draft are re-audited by timing (1 held-out prompt per group: no interval)
    reaudit = summary["policy_reaudit"]
    assert reaudit["status"] == "run" and set(reaudit["groups"]) == {"lower", "upper", "(overall)"}
    for group in ("lower", "upper"):
        row = reaudit["groups"][group]
        assert row["n_prompts"] == 1 and row["speedup_without_policy"]["value"] > 0 and row["speedup_without_policy"]["ci_low"] is None
        assert row["route_to_vanilla"] == summary["policies"][group]["route_to_vanilla"]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".out-")]  # the staging folder was renamed


def _cli(*args) -> int:
    from specaudit.cli import main

    return main(list(map(str, args)))


def test_bad_inputs_exit_2_and_write_nothing(audited_run, tmp_path, capsys):
    import shutil

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("manifest.json", "records.jsonl"):
        shutil.copy(audited_run / name, bare / name)
    cases = [
        ((bare, "--out", tmp_path / "o1"), "snapshot.json"),
        ((audited_run, "--out", tmp_path / "o2", "--draft", "ngram"), "cannot be trained"),
        ((audited_run, "--out", tmp_path / "o3", "--held-out", "1.5"), "--held-out"),
        ((audited_run, "--out", tmp_path / "o4", "--weighting", "loud"), "weighting"),
        ((audited_run, "--out", tmp_path / "o5", "--dimension", "colour"), "--dimension"),
    ]
    for args, message in cases:
        assert _cli("mitigate", *args) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not args[2].exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o")]


def test_a_group_with_one_pair_is_refused_before_loading(audited_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(audited_run, run)
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    kept = [r for r in records if r["attributes"]["case"] == "lower" or r["pair_id"] == "p0"]  # 'upper' keeps one pair
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert _cli("mitigate", run, "--out", tmp_path / "o", "--draft", "/nonexistent-model") == 2
    assert "case=upper" in capsys.readouterr().err


def test_training_view_leaves_the_draft_whole(tiny_pair):
    from specaudit.mitigate._distil import _upper_model

    layers = len(tiny_pair.draft.model.layers)
    upper = _upper_model(tiny_pair.draft, layers - 1)
    assert len(upper.model.layers) == 1 and len(tiny_pair.draft.model.layers) == layers
    assert upper.model.layers[0] is tiny_pair.draft.model.layers[-1]  # shared, so training it trains the draft


def _report_text(path) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8")))


def test_mitigate_writes_a_report_with_the_before_after_section(mitigated, tmp_path):
    from specaudit.contracts import EquivalenceStatus
    from specaudit.contracts.snapshot import read_snapshot, snapshot_document
    from specaudit.report.view.statuses import engine_status

    out, summary = mitigated.out_dir, mitigated.summary
    assert mitigated.files["report"] == out / "report.html"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="mitigation"' in page and 'href="#mitigation"' in page
    text = " ".join(_report_text(out / "report.html").split())
    comparison = summary["comparison"]
    lowest = summary["lowest_group_by_audit"]
    row = comparison["groups"][lowest]
    assert f"{row['before']['value']:.3f} [{row['before']['ci_low']:.3f}, {row['before']['ci_high']:.3f}]" in text
    overall = comparison["groups"]["(overall)"]["speedup"]
    assert f"{overall['before']['value']:.2f}× [" in text and f"{overall['after']['value']:.2f}× [" in text
    worst = comparison["worst_ratio"]
    assert f"{worst['before']:.2f} → {worst['after']:.2f}" in text
    # the equivalence verdict shown is the re-audit snapshot's own, which the report re-derives
    reaudit = read_snapshot(out / "reaudit-run")
    status = engine_status(reaudit.equivalence.engines["speculative"])
    assert status != EquivalenceStatus.NOT_RUN and status.value.upper() in text
    # the before/after lives in the re-audit's snapshot, so `specaudit report` renders it again
    assert snapshot_document(reaudit)["mitigation"]["comparison"] == comparison
    assert _cli("report", out / "reaudit-run", "--out", tmp_path / "again") == 0
    assert 'id="mitigation"' in (tmp_path / "again" / "report.html").read_text(encoding="utf-8")


def test_report_takes_the_verdict_from_the_snapshot_not_the_summary(mitigated):
    from specaudit.report import render_html

    reaudit = json.loads((mitigated.out_dir / "reaudit-run" / "snapshot.json").read_text())
    reaudit["mitigation"]["equivalence"]["status"] = "pass"  # a summary that claims more than was checked
    engine = reaudit["equivalence"]["engines"]["speculative"]
    engine["status"], engine["verdict"] = "violation", "fail"
    section = render_html(reaudit).split('id="mitigation"', 1)[1].split("</section>", 1)[0]
    assert "VIOLATION" in section
    # without a re-audit run the section says equivalence was not run, and why
    summary = copy.deepcopy(mitigated.summary)
    bare = {"schema_version": 1, "run": {"id": "x"}, "equivalence": {"status": "not run"}, "groups": {}, "mitigation": summary}
    bare["mitigation"]["equivalence"] = {"status": "not run", "reason": "--equivalence-prompts 0"}
    section = render_html(bare).split('id="mitigation"', 1)[1].split("</section>", 1)[0]
    assert "NOT RUN" in section and "--equivalence-prompts 0" in section


def test_without_a_reaudit_run_the_report_holds_the_before_after_alone(audited_run, tiny_pair_dir, tmp_path):
    with pytest.warns(UserWarning):
        result = mitigate(
            audited_run,
            tmp_path / "out",
            draft=str(tiny_pair_dir[1]),
            train_layers=1,
            steps=3,
            samples=1,
            max_new_tokens=6,
            compare=(),
            equivalence_prompts=0,
            timing_prompts=0,
            device="cpu",
            progress=False,
        )
    assert not (result.out_dir / "reaudit-run").exists()
    text = " ".join(_report_text(result.files["report"]).split())
    assert "Before / after mitigation: case" in text
    assert "Equivalence of the mitigated draft – NOT RUN --equivalence-prompts 0" in text
