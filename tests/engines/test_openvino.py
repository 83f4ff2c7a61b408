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
from specaudit.contracts.snapshot import snapshot_document
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
    errors = [line for line in err.strip().splitlines() if not line.startswith("specaudit: warning:")]  # the tiny set's small groups
    assert words in err and "Traceback" not in err and len(errors) == 1


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
    assert "--concurrency must be integers >= 1, got [0, 3]" in capsys.readouterr().err


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
        elif record["engine"] == "speculative":
            assert record["proposed"] == record["engine_counters"]["num_draft_tokens"] > 0
        if record["concurrency"] == 3:  # the engine's log-probability of each token it emitted
            logprobs = record["server_logprobs"]
            assert len(logprobs) == len(record["output_token_ids"]) and max(logprobs) <= 0 < -min(logprobs)
    assert all(len(seen) == 1 for seen in outputs.values())  # greedy: one output per prompt, at every level and on both sides
    snapshot = snapshot_document(analyze(out, n_boot=20))
    concurrency = snapshot["concurrency"]
    assert concurrency["levels"] == [1, 3] and set(concurrency["equivalence"]) == {"1", "3"}
    assert concurrency["failed_levels"] == []  # greedy at exact precision: speculative = vanilla at both loads
    parity = snapshot["logprob_parity"]  # greedy, same outputs: speculative's logprobs are vanilla's at level 3
    assert parity["status"] == "PASS" and parity["positions"] == sum(len(r["output_token_ids"]) for r in records) // 4
    levels = snapshot["acceptance_stability"]["levels"]
    assert levels["3"]["drafted_share"] is None and levels["1"]["drafted_share"] == 1.0 and levels["3"]["accepted_per_token"] > 0


# ----------------------------------------------------------------------------- request features
@pytest.mark.parametrize(
    ("setting", "feature"),
    [
        ("logit_bias=42:-5", "logit_bias"),
        ("presence_penalty=0.5", "presence_penalty"),
        ("frequency_penalty=0.5", "frequency_penalty"),
        ("repetition_penalty=1.3,repeat_last_n=8", "repeat_last_n"),
    ],
)
def test_a_feature_openvino_cannot_express_is_refused_in_one_sentence(tmp_path, tiny_prompts_file, capsys, setting, feature):
    args = ["audit", "--engines", "openvino", "--prompts", str(tiny_prompts_file), "--dry-run", "--out", str(tmp_path / "o")]
    assert main([*args, "--sampling", f"t=1,{setting}"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--engines openvino cannot apply {feature}:" in err and "no logit bias" in err and "toward zero" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_each_feature_it_takes_is_set_in_its_generation_config_field():
    from specaudit.engines.openvino.client import generation_config

    def config(**features):
        return generation_config(SamplingSpec(0.7, **features), max_new_tokens=8, k=3, seed=1, eos_ids={2})

    plain = config()
    assert plain.repetition_penalty == 1.0 and plain.min_p == 0.0 and not plain.stop_strings
    assert plain.structured_output_config is None and plain.presence_penalty == 0.0 and plain.frequency_penalty == 0.0
    assert config(repetition_penalty=1.3).repetition_penalty == pytest.approx(1.3)
    assert config(min_p=0.1).min_p == pytest.approx(0.1)
    stopped = config(stop=("END", "\n\n"))
    assert stopped.stop_strings == {"END", "\n\n"} and stopped.include_stop_str_in_output is True  # the reference keeps the stop's token
    schema = json.dumps({"type": "object", "properties": {"day": {"type": "string"}}})
    assert config(grammar=schema).structured_output_config.json_schema == schema
    gbnf = 'root ::= "yes" | "no"'
    structured = config(grammar=gbnf).structured_output_config
    assert structured.grammar == gbnf and structured.json_schema is None
    greedy = generation_config(SamplingSpec(0.0, repetition_penalty=1.3), max_new_tokens=8, k=None, seed=1, eos_ids={2})
    assert greedy.is_greedy_decoding() and greedy.repetition_penalty == pytest.approx(1.3)  # OpenVINO penalises greedy too


def test_a_stop_ends_the_recorded_text_and_the_finish_reason_says_so():
    from specaudit.engines.openvino.client import finish_reason, recorded_text

    class Reason:  # openvino_genai.GenerationFinishReason's shape
        def __init__(self, name):
            self.name = name

    assert recorded_text("Monday\n2. Tuesday", ("Tuesday", "\n")) == "Monday"
    assert recorded_text("no stop here", ("END",)) == "no stop here" and recorded_text("x", ()) == "x"
    assert finish_reason([5, 2], Reason("STOP"), {2}) == "eos"
    assert finish_reason([5, 6], Reason("STOP"), {2}) == "stop"
    assert finish_reason([5, 6], Reason("LENGTH"), {2}) == finish_reason([5], None, {2}) == "length"


def _reference_argmax_mismatches(scorer, record, spec) -> list[int]:
    """Positions where a greedy output is not the argmax of the scoring target processed by
    specaudit's warp at that position (the reference the vanilla control must follow)."""
    import torch

    from specaudit.decoding.warping import Prefix, warp

    prompt, output = record["prompt_token_ids"], record["output_token_ids"]
    rows = scorer.sequence_logits(prompt + output)[len(prompt) - 1 : len(prompt) - 1 + len(output)]
    argmax = warp(torch.from_numpy(rows).double(), spec, Prefix(prompt, output[:-1])).argmax(-1).tolist()
    return [i for i, (want, got) in enumerate(zip(argmax, output, strict=True)) if want != got]


@pytest.mark.slow
def test_greedy_under_a_repetition_penalty_and_a_stop_follows_the_reference_and_speculation_keeps_it(tmp_path, tiny_prompts_file):
    """The repetition penalty's state across accepted drafts: with the target as its own draft at
    exact precision, speculative must equal vanilla token for token, and vanilla must be the argmax
    of the reference warp (penalty over prompt + output) at every position; records end at the stop."""
    from specaudit.engines import run
    from specaudit.engines.openvino.scoring import scoring_pair
    from specaudit.execution.invariants import OutputLimits, record_violations
    from specaudit.execution.records import read_records

    out = tmp_path / "run"
    cfg = _config(tiny_prompts_file, per_group=1, max_new_tokens=20, repetition_penalty=1.3, stop=("fruit",), extra={"openvino": EXACT})
    run(cfg, out, progress=False)
    records = read_records(out / "records.jsonl")
    pair = scoring_pair(json.loads((out / "manifest.json").read_text()))
    scorer, tokenizer = pair.target, pair.tokenizer
    limits = OutputLimits(
        max_new_tokens=20,
        eos_ids=frozenset({tokenizer.eos_token_id}),
        decode=lambda ids, skip, _clean: tokenizer.decode(ids, skip_special_tokens=skip),
    )
    # the output invariants hold (the counters' disagreement is finding 6 of docs/openvino.md)
    assert len(records) == 4 and not [v for r in records for v in record_violations(r, limits) if v["check"] != "counters"]
    by_key = {(r["prompt_id"], r["engine"]): r for r in records}
    for (prompt, engine), record in by_key.items():
        assert record["sampling"]["repetition_penalty"] == 1.3 and record["sampling"]["stop"] == ["fruit"]
        if engine == "speculative":
            assert record["output_token_ids"] == by_key[(prompt, "vanilla")]["output_token_ids"]
            assert record["accepted"] == record["engine_counters"]["num_accepted_tokens"] == record["proposed"] > 0
        else:
            assert _reference_argmax_mismatches(scorer, record, cfg.sampling) == []
        stopped = "fruit" in tokenizer.decode(record["output_token_ids"])
        assert (record["finish_reason"] == "stop") == stopped and "fruit" not in record["text"]
    assert any(record["finish_reason"] == "stop" for record in records)
