"""`--engines openvino`: OpenVINO GenAI's LLMPipeline in process, on the embedded SmolLM2 GGUF.

The checks that need no model (settings, refusals, the request each record sends) run wherever
openvino-genai is importable; the one run of the real engine is marked slow. Without openvino-genai
every test skips, saying so (.ci/run installs specaudit[openvino]).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from specaudit.cli import main
from specaudit.config import RunConfig
from specaudit.decoding import SamplingSpec
from specaudit.errors import InputError

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("openvino_genai") is None, reason="openvino-genai is not installed (pip install specaudit[openvino])"
    ),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # 2-prompt groups: the prompt-set warning is expected
]

# The engine's settings at which its speculation is exact under greedy decoding (measured, docs/openvino.md):
# at its CPU defaults (bf16 inference, u8 KV cache, activations quantised on the fly) the draft's
# one-token steps and the target's batched verification round differently.
EXACT = {"inference_precision": "f32", "kv_cache_precision": "f32", "dynamic_quantization_group_size": 0}


def _config(prompts, **options) -> RunConfig:
    base = dict(engines="openvino", prompts=str(prompts), max_new_tokens=12, k=3, seed=3, temperature=0.0, samples=1)
    return RunConfig(**{**base, **options})


def test_the_draft_is_the_target_unless_named():
    assert RunConfig(engines="openvino").draft == "target"
    assert RunConfig(engines="openvino", draft="model.gguf").draft == "model.gguf"


def test_settings_are_checked_in_one_sentence():
    from specaudit.engines.openvino.settings import openvino_settings

    assert openvino_settings({"openvino": {"prefix-caching": False}}).prefix_caching is False
    for section, words in (
        ({"prefix_caching": "no"}, "extra.openvino.prefix_caching must be true or false"),
        ({"kv_cache_precision": "f8"}, "extra.openvino.kv_cache_precision"),
        ({"cache": 1}, "unknown setting(s) cache"),
    ):
        with pytest.raises(InputError) as err:
            openvino_settings({"openvino": section})
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InputError, match="mapping"):
        openvino_settings({"openvino": [1]})


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"draft": "int8"}, "OpenVINO cannot load specaudit's derived drafts"),
        ({"extra": {"openvino": {"threads": 0}}}, "extra.openvino.threads"),
        ({"extra": {"openvino": {"target_ir": "/nonexistent"}}}, "holds no openvino_model.xml"),
        ({"target": "/nonexistent.gguf"}, "no such file"),
    ],
)
def test_bad_input_is_one_sentence_exit_2(tmp_path, tiny_prompts_file, capsys, options, words):
    extra = options.pop("extra", None)
    config = tmp_path / "run.yaml"
    lines = [f"{key}: {value}" for key, value in options.items()]
    if extra:
        lines.append(f"extra: {json.dumps(extra)}")
    config.write_text("\n".join(lines) + "\n")
    args = ["run", "--engines", "openvino", "--prompts", str(tiny_prompts_file), "--config", str(config), "--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_each_request_carries_the_runs_sampling_seed_and_k():
    from specaudit.engines.openvino.client import generation_config

    sampled = generation_config(SamplingSpec(0.7, top_k=40, top_p=0.9), max_new_tokens=20, k=5, seed=2**63 - 1, eos_ids={2})
    assert (sampled.do_sample, sampled.top_k, sampled.rng_seed, sampled.num_assistant_tokens, sampled.max_new_tokens) == (
        True,
        40,
        2**63 - 1,
        5,
        20,
    )
    assert sampled.temperature == pytest.approx(0.7) and sampled.top_p == pytest.approx(0.9)
    assert sampled.stop_token_ids == {2} and sampled.apply_chat_template is False
    greedy = generation_config(SamplingSpec(0.0), max_new_tokens=8, k=None, seed=1, eos_ids={2})
    assert greedy.do_sample is False and greedy.is_greedy_decoding() and not greedy.is_assisting_generation()


@pytest.mark.slow
def test_greedy_speculation_is_vanilla_at_exact_precision_with_the_engines_own_counters(tmp_path, tiny_prompts_file):
    """One run of the real engine (two prompts, both pipelines; about 30 s on two idle cores)."""
    from specaudit.engines import run
    from specaudit.engines.openvino.scoring import scoring_pair
    from specaudit.execution.records import read_records

    out = tmp_path / "run"
    cfg = _config(tiny_prompts_file, per_group=1, extra={"openvino": {**EXACT, "prefix_caching": False}})
    run(cfg, out, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    properties = manifest["openvino"]["properties"]
    assert (properties["INFERENCE_PRECISION_HINT"], properties["KV_CACHE_PRECISION"]) == ("f32", "f32")
    assert manifest["openvino"]["scheduler"]["enable_prefix_caching"] is False and manifest["models"]["draft"]["name"] == "target"
    records = read_records(out / "records.jsonl")
    by_key = {(r["prompt_id"], r["engine"]): r for r in records}
    assert len(records) == 4
    for (prompt, engine), record in by_key.items():
        tokens = record["output_token_ids"]
        assert 1 <= len(tokens) <= 12 and record["backend"] == "openvino"
        assert record["prompt_token_ids"][-1] == 198  # the chat template's last newline: token ids went in as specaudit made them
        if engine == "speculative":
            assert tokens == by_key[(prompt, "vanilla")]["output_token_ids"]  # greedy speculation keeps the target's argmax
            counters = record["engine_counters"]
            steps = counters["batch_sizes"]
            assert record["steps"] == len(steps) and sum(steps) == len(tokens)  # every emitted token is in one verification step
            assert record["accepted"] == counters["num_accepted_tokens"] == record["proposed"] > 0  # the target as draft: all kept
    # the scorer is OpenVINO's own target: greedy plain decoding's first token is its argmax
    scorer = scoring_pair(manifest).target
    for (_, engine), record in by_key.items():
        if engine == "vanilla":
            assert int(scorer.sequence_logits(record["prompt_token_ids"])[-1].argmax()) == record["output_token_ids"][0]


def test_concurrency_levels_reach_the_openvino_settings_from_the_flag(tmp_path, tiny_prompts_file, capsys):
    from specaudit.engines.openvino.settings import openvino_settings

    flags = ["audit", "--engines", "openvino", "--prompts", str(tiny_prompts_file), "--dry-run", "--out", str(tmp_path / "plan")]
    assert main([*flags, "--concurrency", "1,3"]) == 0
    assert openvino_settings({"openvino": {"concurrency_levels": "1,3"}}).batched
    assert not openvino_settings({}).batched  # the default: one request per generate call, no level recorded
    assert main([*flags, "--concurrency", "0,3"]) == 2
    assert "extra.openvino.concurrency_levels must be integers >= 1, got [0, 3]" in capsys.readouterr().err


@pytest.mark.slow
def test_requests_in_flight_keep_greedy_speculation_exact_and_count_accepted_drafts_per_request(tmp_path, tiny_prompts_file):
    """Levels 1 and 3 (two prompts, two samples: at level 3 every request of a side is in flight at
    once, in one ContinuousBatchingPipeline), at the precision where greedy speculation is exact."""
    from specaudit.analysis import analyze
    from specaudit.engines import run
    from specaudit.execution.invariants import check_invariants
    from specaudit.execution.records import read_records

    out = tmp_path / "run"
    cfg = _config(tiny_prompts_file, per_group=1, samples=2, extra={"openvino": {**EXACT, "concurrency_levels": [1, 3]}})
    run(cfg, out, progress=False)
    records = read_records(out / "records.jsonl")
    # (level 1's counters miss the step that reaches max_new_tokens: finding 6 of docs/openvino.md)
    assert len(records) == 16 and not check_invariants([r for r in records if r["concurrency"] == 3])
    assert sorted({r["concurrency"] for r in records}) == [1, 3]
    outputs = {}
    for record in records:
        outputs.setdefault(record["prompt_id"], set()).add(tuple(record["output_token_ids"]))
        if record["engine"] == "speculative" and record["concurrency"] == 3:
            sizes = record["engine_counters"]["batch_sizes"]
            assert record["proposed"] is None and record["steps"] == len(sizes) and sum(sizes) == len(record["output_token_ids"])
            assert record["accepted"] == sum(size - 1 for size in sizes[1:]) > 0
        if record["concurrency"] == 3:  # the engine's log-probability of each token it emitted
            logprobs = record["server_logprobs"]
            assert len(logprobs) == len(record["output_token_ids"]) and max(logprobs) <= 0 < -min(logprobs)
        elif record["engine"] == "speculative":
            assert record["proposed"] == record["engine_counters"]["num_draft_tokens"] > 0
    assert all(len(seen) == 1 for seen in outputs.values())  # greedy: one output per prompt, at every level and on both sides
    snapshot = analyze(out, n_boot=20)
    concurrency = snapshot["concurrency"]
    assert concurrency["levels"] == [1, 3] and set(concurrency["equivalence"]) == {"1", "3"}
    assert concurrency["failed_levels"] == []  # greedy at exact precision: speculative = vanilla at both loads
    parity = snapshot["logprob_parity"]  # greedy, same outputs: speculative's logprobs are vanilla's at level 3
    assert parity["status"] == "PASS" and parity["positions"] == sum(len(r["output_token_ids"]) for r in records) // 4
    levels = snapshot["acceptance_stability"]["levels"]
    assert levels["3"]["drafted_share"] is None and levels["1"]["drafted_share"] == 1.0 and levels["3"]["accepted_per_token"] > 0
