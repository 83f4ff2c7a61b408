"""specaudit mitigate with drafts that cannot be trained (int8, ngram) and on screened audits:
policies fitted on the audit's records, re-audited by timing held-out prompts, no training."""

from __future__ import annotations

import importlib.util
import json

import pytest

from specaudit.errors import InputError
from specaudit.mitigate import group_policy, mitigate

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


def _audit(root, target, draft: str, engines: tuple[str, ...], **options):
    """An analysed run of 8 parallel pairs in two groups on the tiny target (no equivalence)."""
    from specaudit.analysis import analyze
    from specaudit.config import RunConfig
    from specaudit.engines import run

    # `topic` (8 groups, the two prompts of a pair in different ones) makes the screened run's
    # engines time one pair per topic group, 4 pairs: enough for a cost model
    rows = [
        {
            "id": f"p{i}-{g}",
            "text": text if g == "lower" else text.upper(),
            "pair_id": f"p{i}",
            "attributes": {"case": g, "topic": f"t{(2 * i + (g == 'upper')) % 8}"},
        }
        for i, text in enumerate(TEXTS)
        for g in ("lower", "upper")
    ]
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = RunConfig(
        target=str(target),
        draft=draft,
        prompts=str(prompts),
        max_new_tokens=10,
        device="cpu",
        warmup=0,
        engines=engines,
        dimensions=("case", "topic"),
        **options,
    )
    with pytest.warns(UserWarning):  # groups below the prompt set's minimum size
        run(cfg, root / "run", progress=False)
        analyze(root / "run", equivalence=False)
    return root / "run"


@pytest.fixture(scope="module")
def screened_int8_run(tmp_path_factory, tiny_pair_dir):
    return _audit(tmp_path_factory.mktemp("int8-run"), tiny_pair_dir[0], "int8", ("screen", "vanilla", "speculative"))


@pytest.fixture(scope="module")
def ngram_run(tmp_path_factory, tiny_pair_dir):
    return _audit(tmp_path_factory.mktemp("ngram-run"), tiny_pair_dir[0], "ngram", ("vanilla", "speculative"))


def _cli(*args) -> int:
    from specaudit.cli import main

    return main(list(map(str, args)))


def test_a_group_measured_slower_is_never_sent_to_speculation():
    # the model alone would speculate at high acceptance and cheap drafting ...
    assert not group_policy(0.95, 0.05, 4)["route_to_vanilla"]
    # ... but a speed-up interval wholly below 1 on the fitting prompts routes the group away, at any α and c
    for alpha in (0.3, 0.9, 0.99):
        for cost_ratio in (0.0, 0.05, 0.5):
            policy = group_policy(alpha, cost_ratio, 4, {"value": 0.8, "ci_low": 0.7, "ci_high": 0.99})
            assert policy["route_to_vanilla"] and policy["expected_speedup_policy"] == 1.0
    # an interval wholly above 1 keeps speculation even where the model expects no gain
    kept = group_policy(0.1, 0.9, 4, {"value": 1.3, "ci_low": 1.1, "ci_high": 1.5})
    assert not kept["route_to_vanilla"] and kept["k"] == 4
    # an interval across 1 leaves the decision to the model
    assert group_policy(0.1, 0.9, 4, {"value": 1.0, "ci_low": 0.8, "ci_high": 1.2})["route_to_vanilla"]
    assert not group_policy(0.95, 0.05, 4, {"value": 1.0, "ci_low": 0.8, "ci_high": 1.2})["route_to_vanilla"]
    # without a model (no α: vLLM's n-gram records), the undecided measurement's point estimate decides
    nan = float("nan")
    gaining = group_policy(nan, 0.0, 4, {"value": 1.37, "ci_low": 0.88, "ci_high": 2.52})
    assert not gaining["route_to_vanilla"] and gaining["k"] == 4 and "1.37x" in gaining["reason"]
    assert group_policy(nan, 0.0, 4, {"value": 0.97, "ci_low": 0.92, "ci_high": 1.04})["route_to_vanilla"]
    assert group_policy(nan, 0.0, 4)["route_to_vanilla"]  # nothing measured at all


def test_a_verification_costing_several_steps_routes_what_a_free_one_would_speculate():
    # α = 0.8 at k = 4 with c = 0.2: 3.36 tokens per step; at v = 1 that pays (1.87x), at v = 4.2
    # (verifying 5 tokens on one CPU core, as measured on the real pair) it does not (0.67x)
    assert not group_policy(0.8, 0.2, 4)["route_to_vanilla"]
    costly = group_policy(0.8, 0.2, 4, verify_cost=4.2)
    assert costly["route_to_vanilla"] and costly["expected_speedup_run_k"] == pytest.approx(3.3616 / 5.0, rel=1e-3)


def test_step_costs_are_measured_in_plain_decoding_steps_without_the_prompt_pass():
    import pandas as pd

    from specaudit.stats.cost_model import step_costs

    # vanilla: 1 s prompt pass, then 0.1 s per token; speculative: 1 s prompt pass, then 4 steps of
    # 0.3 s verification and 8 proposed tokens drafted in 0.4 s in all
    frame = pd.DataFrame(
        [
            {"engine": "vanilla", "wall_s": 1.9, "ttft_s": 1.0, "output_token_ids": list(range(10)), "steps": 10, "proposed": 0},
            {
                **{"engine": "speculative", "wall_s": 2.6, "ttft_s": 1.0, "output_token_ids": list(range(10))},
                **{"steps": 5, "proposed": 8, "draft_s": 0.4, "verify_s": 2.2},
            },
        ]
    )
    c, v = step_costs(frame)
    assert (c, v) == (pytest.approx(0.5), pytest.approx(3.0))
    assert step_costs(frame[frame["engine"] == "vanilla"]) is None  # nothing speculative timed


def test_int8_screened_audit_gets_policies_and_a_timed_reaudit(screened_int8_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli("mitigate", screened_int8_run, "--out", out, "--quick", "--dimension", "case", "--device", "cpu", "--quiet") == 0
    printed = capsys.readouterr().out
    assert "draft 'int8' was not trained" in printed.splitlines()[0]
    assert "overall speed-up" in printed
    summary = json.loads((out / "before_after.json").read_text())
    assert summary["trained"] is False and "int8" in summary["not_trained"]
    assert summary["policy_fit"]["engine"] == "screen" and summary["policy_fit"]["speed_source"].startswith("the audit's cost model")
    assert not (out / "draft").exists() and not (out / "training_card.json").exists()
    policy = json.loads((out / "policy.json").read_text())
    assert set(policy["groups"]) == {"lower", "upper"} and policy["draft"] == "int8"
    for group, entry in summary["policies"].items():
        fit = entry["measured_speedup_fit"]
        assert fit["ci_low"] <= fit["value"] <= fit["ci_high"] and fit["n_prompts"] == entry["fit_prompts"] > 0
        if fit["ci_high"] < 1:
            assert entry["route_to_vanilla"] and not policy["groups"][group]["speculate"]
    reaudit = summary["policy_reaudit"]
    assert reaudit["status"] == "run"
    held = set(reaudit["per_prompt_time_per_token_s"])
    assert held and not held & set(_train_ids(screened_int8_run, summary))  # timed prompts were held out
    for group, row in reaudit["groups"].items():
        assert row["n_prompts"] == (len(held) if group == "(overall)" else 2)
        for key in ("speedup_without_policy", "speedup_with_policy", "gain_with_policy"):
            assert 0 < row[key]["ci_low"] <= row[key]["value"] <= row[key]["ci_high"], (group, key)
        if group != "(overall)" and row["route_to_vanilla"]:
            # a routed group decodes plainly: its speed-up with the policy is exactly 1, and the
            # policy's gain is the inverse of its speed-up without it
            assert row["speedup_with_policy"]["value"] == pytest.approx(1.0)
            assert row["gain_with_policy"]["value"] == pytest.approx(1 / row["speedup_without_policy"]["value"])
    # the report shows the policy's before/after per group without a trained draft
    page = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="mitigation"' in page and "The policy re-audited on held-out prompts" in page
    overall = reaudit["groups"]["(overall)"]["speedup_without_policy"]
    assert f"{overall['value']:.2f}× [{overall['ci_low']:.2f}, {overall['ci_high']:.2f}]" in page
    assert "was not trained" in page and "Acceptance per group (mean β per position), before → after" not in page
    assert "Policies re-audited on held-out prompts" in (out / "before_after.md").read_text()


def _train_ids(run_dir, summary) -> list[str]:
    from specaudit.mitigate._run_folder import prompts_from_run, read_run

    _, records, _ = read_run(run_dir)
    prompts = prompts_from_run(records)
    from specaudit.mitigate import split_by_pair

    train, _ = split_by_pair(prompts, 0.5, 0, ["case", "topic"])
    assert len(train) == summary["train_prompts"]
    return train


def test_ngram_engine_audit_gets_policies_from_measured_speed(ngram_run, tmp_path):
    result = mitigate(ngram_run, tmp_path / "out", quick=True, dimension="case", device="cpu", progress=False)
    summary = result.summary
    assert summary["trained"] is False and "prompt-lookup" in summary["not_trained"]
    assert summary["policy_fit"] == {**summary["policy_fit"], "engine": "speculative", "speed_source": "measured (engines)"}
    assert summary["policy_reaudit"]["status"] == "run" and set(summary["policy_reaudit"]["groups"]) == {"lower", "upper", "(overall)"}
    assert result.files["report"].is_file()


def test_untrainable_bad_inputs_exit_2_with_one_sentence(screened_int8_run, tmp_path, capsys):
    cases = [
        ((screened_int8_run, "--out", tmp_path / "o1", "--per-group", "2"), "--per-group needs a trainable draft"),
        ((screened_int8_run, "--out", tmp_path / "o2", "--draft", "ngram"), "cannot be trained"),
        ((screened_int8_run, "--out", tmp_path / "o3", "--dimension", "colour"), "--dimension"),
    ]
    for args, message in cases:
        assert _cli("mitigate", *args) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not args[2].exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o")]


HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


@pytest.mark.skipif(not HAVE_LLAMA_CPP, reason="llama-cpp-python is not installed (pip install specaudit[llama-cpp])")
def test_a_llama_cpp_audit_gets_policies_re_audited_by_its_own_engines(tmp_path):
    # a GGUF draft decoded by llama.cpp is not trained; the policies are timed with llama.cpp's
    # engines at the run's settings, the draft proposing each policy's k
    from specaudit.models._loading import embedded_gguf_path

    gguf = embedded_gguf_path()
    run_dir = _audit(tmp_path, gguf, str(gguf), ("llama-cpp",), temperature=0.0)
    result = mitigate(run_dir, tmp_path / "out", quick=True, dimension="case", progress=False)
    summary = result.summary
    assert summary["trained"] is False and "llama.cpp" in summary["not_trained"]
    assert summary["policy_fit"]["speed_source"] == "measured (engines)"
    reaudit = summary["policy_reaudit"]
    assert reaudit["status"] == "run" and reaudit["engines"] == "the run's llama.cpp engines"
    assert set(reaudit["groups"]) == {"lower", "upper", "(overall)"} and reaudit["tokens"]["vanilla"] > 0
    assert reaudit["tokens"]["run_k"] > 0 and result.files["report"].is_file()
    with pytest.raises(InputError, match="decoded by llama.cpp: mitigate fits policies for its own draft"):
        mitigate(run_dir, tmp_path / "out2", draft="early-exit:2", quick=True, progress=False)


def test_alpha_is_counted_over_prompts_whose_positions_reached_are_known(ngram_run):
    # vLLM's n-gram records keep acceptance totals only where a step drafted nothing (docs/vllm.md):
    # their prompts have no positions reached, and α must not add their accepted tokens to others' positions
    from specaudit.execution.records import read_records
    from specaudit.mitigate._routing import audit_evidence

    records = read_records(ngram_run / "records.jsonl")
    prompts = sorted({r["prompt_id"] for r in records})
    group_of = dict.fromkeys(prompts, "all")
    full = audit_evidence(records, prompts, group_of, seed=0)["groups"]["all"]["alpha"]
    totals_only = set(prompts[: len(prompts) // 2])
    stripped = [
        {**r, "accepted_per_step": None, "proposed_per_step": None} if r["prompt_id"] in totals_only and r["engine"] == "speculative" else r
        for r in records
    ]
    kept = [r for r in records if r["prompt_id"] not in totals_only]
    partial = audit_evidence(stripped, prompts, group_of, seed=0)["groups"]["all"]["alpha"]
    assert 0 < full <= 1 and 0 < partial <= 1
    assert partial == pytest.approx(audit_evidence(kept, sorted(set(prompts) - totals_only), group_of, seed=0)["groups"]["all"]["alpha"])
