"""`--engines openvino`: the plan decoded in process by OpenVINO GenAI (`openvino_genai.LLMPipeline`).

Models. OpenVINO reads a GGUF file itself, but its `draft_model()` wants a folder holding an
OpenVINO IR (`openvino_model.xml`). So every GGUF a run names is converted once into the cache
(`ir_folder`: the pipeline loads the file with `enable_save_ov_model=True`, which writes the IR and
the tokenizer models beside it, in a temporary folder renamed into place when complete), and both
pipelines load the IR. `extra.openvino.target_ir` / `draft_ir` name an IR folder made elsewhere
(optimum-intel's export of an HF model, e.g. a pair whose GGUF OpenVINO cannot read).

Runtimes. "vanilla" is an `LLMPipeline` without a draft and "speculative" one with
`draft_model=`; both get the same properties and the same explicit `SchedulerConfig` (the one
LLMPipeline makes for itself: latency-oriented, prefix caching on unless the settings say off), so
both run OpenVINO's paged-attention continuous-batching runtime and differ only by the draft.
Precision (INFERENCE_PRECISION_HINT, KV_CACHE_PRECISION, DYNAMIC_QUANTIZATION_GROUP_SIZE) is
resolved to values and passed explicitly (`runtime_properties`).

Requests. Token ids in (specaudit's tokenizer and chat template, `TokenizedInputs`), token ids out,
one request per `generate` call, so the engine's own counters (`extended_perf_metrics`) are this
record's: drafted, accepted and rejected tokens, and the main model's per-inference batch sizes
(`raw_metrics.m_batch_sizes`: the tokens each verification step emitted). Sampling: do_sample with
the run's temperature, top-k, top-p and the record's seed as `rng_seed`; greedy otherwise;
`num_assistant_tokens = k`. OpenVINO warps top-k -> temperature -> top-p, the order specaudit's
warp has (top-k and temperature commute). Request features where OpenVINO's convention is specaudit's
(`request_features`, docs/openvino.md "Request features"): repetition penalty, min-p, stop strings
(kept in the output, the record's text cut before them as the reference's), a grammar (xgrammar:
a JSON schema or GBNF-style EBNF). An exception from the runtime propagates with its own message
(the run loop records it as the item's fault).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specaudit.errors import InputError

if TYPE_CHECKING:
    from types import ModuleType

    from specaudit.config import RunConfig
    from specaudit.decoding import Generation, SamplingSpec
    from specaudit.engines.openvino.settings import OpenVinoSettings

BACKEND = "openvino"
DEVICE = "CPU"
IR_FILE = "openvino_model.xml"
SIZE_T_MAX = 2**64 - 1  # the latency-oriented scheduler's "no limit" on batched tokens
_PRECISION_NAMES = {"f32": "f32", "bf16": "bf16", "f16": "f16", "u8": "u8", "u4": "u4"}


def import_openvino_genai() -> ModuleType:
    try:
        import openvino_genai
    except ImportError:
        raise InputError(
            "--engines openvino needs OpenVINO GenAI, which is not installed here; install specaudit[openvino] (pip wheels, about 250 MB)"
        ) from None
    return openvino_genai


def gguf_path(name: str, role: str) -> Path:
    """The GGUF file a run names (`default`: the embedded SmolLM2 file), checked to be one."""
    from specaudit.models._loading import DEFAULT_TARGET, embedded_gguf_path
    from specaudit.models._named import is_named, resolve

    path = embedded_gguf_path() if name == DEFAULT_TARGET else resolve(name) if is_named(name) else Path(name).expanduser()
    if not path.is_file():
        raise InputError(f"{role} {name!r}: no such file; with --engines openvino name a GGUF file (or `default`)")
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise InputError(f"{role} {str(path)!r} is not a GGUF file; name a GGUF file or an IR folder in extra.openvino")
    return path


def checked_ir(folder: str, setting: str) -> Path:
    path = Path(folder).expanduser()
    if not (path / IR_FILE).is_file():
        raise InputError(f"extra.openvino.{setting} {folder!r} holds no {IR_FILE}; name a folder an OpenVINO export wrote")
    return path


# ----------------------------------------------------------------------------- the IR cache
@dataclass(frozen=True)
class IrModel:
    """A model as OpenVINO loads it: its IR folder, the GGUF it came from (None for an IR given as
    such), and the seconds spent converting it in this run (None when the cache held it)."""

    folder: Path
    gguf: Path | None
    built_s: float | None


def ir_cache_folder(gguf: Path, sha256: str, version: str) -> Path:
    from specaudit.models._cache import cache_root

    return cache_root() / "openvino" / f"{gguf.stem}-{sha256[:16]}-ov{version.split('-')[0]}"


def ir_folder(gguf: Path, sha256: str, properties: dict) -> IrModel:
    """The IR of `gguf` in the cache, converted on first use. The conversion runs in a temporary
    folder beside its place (the GGUF linked into it: OpenVINO writes the IR beside the file it
    read) and is renamed into place only when complete, so an interrupted one leaves nothing."""
    genai = import_openvino_genai()
    folder = ir_cache_folder(gguf, sha256, genai.__version__)
    if (folder / IR_FILE).is_file():
        return IrModel(folder, gguf, None)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot write the OpenVINO IR cache {folder.parent} ({err.strerror}); set SPECAUDIT_CACHE") from None
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        link = scratch / gguf.name
        link.symlink_to(gguf.resolve())
        genai.LLMPipeline(str(link), DEVICE, enable_save_ov_model=True, **properties)
        link.unlink()
        if not (scratch / IR_FILE).is_file():
            raise InputError(f"OpenVINO read {str(gguf)!r} but wrote no {IR_FILE}; convert it with optimum-intel and set extra.openvino")
        with contextlib.suppress(OSError):  # another process finished first: keep its folder
            scratch.rename(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return IrModel(folder, gguf, round(time.perf_counter() - started, 2))


# ----------------------------------------------------------------------------- properties
def runtime_properties(settings: OpenVinoSettings, threads: int, *, draft: bool = False) -> dict[str, Any]:
    """The CPU plugin properties both pipelines get (`draft`: the draft model's, its own precision
    where the settings give one), every precision resolved to a value ("default": what the plugin
    reports on this machine), so the manifest records what ran."""
    import openvino as ov

    core = ov.Core()

    def resolved(choice: str, name: str) -> str:
        if choice != "default":
            return choice
        value = str(core.get_property(DEVICE, name))  # e.g. "<Type: 'bfloat16'>"
        for spelled, short in (("bfloat16", "bf16"), ("float32", "f32"), ("float16", "f16"), ("uint8", "u8"), ("u4", "u4")):
            if spelled in value:
                return short
        return value

    inference = (draft and settings.draft_inference_precision) or settings.inference_precision
    kv_cache = (draft and settings.draft_kv_cache_precision) or settings.kv_cache_precision
    properties: dict[str, Any] = {
        "INFERENCE_NUM_THREADS": settings.threads or threads,
        "INFERENCE_PRECISION_HINT": resolved(inference, "INFERENCE_PRECISION_HINT"),
        "KV_CACHE_PRECISION": resolved(kv_cache, "KV_CACHE_PRECISION"),
    }
    group = settings.dynamic_quantization_group_size
    properties["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = (
        group if group is not None else int(core.get_property(DEVICE, "DYNAMIC_QUANTIZATION_GROUP_SIZE"))
    )
    return properties


def scheduler_config(settings: OpenVinoSettings) -> Any:
    """LLMPipeline's own latency-oriented scheduler (no limit on batched tokens), prefix caching as set."""
    genai = import_openvino_genai()
    config = genai.SchedulerConfig()
    config.max_num_batched_tokens = SIZE_T_MAX
    config.enable_prefix_caching = settings.prefix_caching
    return config


def scheduler_entry(config: Any) -> dict:
    return {
        "enable_prefix_caching": bool(config.enable_prefix_caching),
        "max_num_batched_tokens": int(config.max_num_batched_tokens),
        "cache_size": int(config.cache_size),
        "dynamic_split_fuse": bool(config.dynamic_split_fuse),
    }


# ----------------------------------------------------------------------------- pipelines
@dataclass
class Pipelines:
    vanilla: Any
    speculative: Any
    eos_ids: set[int]


def load_pipelines(target: Path, draft: Path, properties: dict, draft_properties: dict, scheduler: Any, eos_ids: set[int]) -> Pipelines:
    genai = import_openvino_genai()
    vanilla = genai.LLMPipeline(str(target), DEVICE, scheduler_config=scheduler, **properties)
    speculative = genai.LLMPipeline(
        str(target), DEVICE, draft_model=genai.draft_model(str(draft), DEVICE, **draft_properties), scheduler_config=scheduler, **properties
    )
    return Pipelines(vanilla, speculative, set(eos_ids))


def load_batching_pipelines(
    target: Path, draft: Path, properties: dict, draft_properties: dict, scheduler: Any, eos_ids: set[int]
) -> Pipelines:
    """The same two models as `load_pipelines`, as ContinuousBatchingPipelines driven request by
    request (engines/openvino/batching.py), for concurrency levels above 1."""
    genai = import_openvino_genai()
    vanilla = genai.ContinuousBatchingPipeline(str(target), scheduler, DEVICE, properties)
    with_draft = {**properties, "draft_model": genai.draft_model(str(draft), DEVICE, **draft_properties)}
    return Pipelines(vanilla, genai.ContinuousBatchingPipeline(str(target), scheduler, DEVICE, with_draft), set(eos_ids))


def generation_config(
    spec: SamplingSpec, *, max_new_tokens: int, k: int | None, seed: int, eos_ids: set[int], logprobs: bool = False
) -> Any:
    """One request's GenerationConfig: the run's sampling, the record's seed, k drafts a step
    (None: no draft), end-of-sequence ids given explicitly; with `logprobs`, each emitted token's
    log-probability (without it a greedy request reports 0.0 for every token)."""
    genai = import_openvino_genai()
    config = genai.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    if logprobs:
        config.logprobs = 1
    config.apply_chat_template = False  # token ids in: the template, if any, is in them already
    config.stop_token_ids = set(eos_ids)
    if eos_ids:
        config.eos_token_id = min(eos_ids)
    if spec.greedy:
        config.do_sample = False
    else:
        config.do_sample = True
        config.temperature = float(spec.temperature)
        config.top_p = float(spec.top_p)
        if spec.top_k > 0:
            config.top_k = int(spec.top_k)
        config.rng_seed = int(seed)
    if k is not None:
        config.num_assistant_tokens = int(k)
    request_features(config, spec)
    return config


def request_features(config: Any, spec: SamplingSpec) -> None:
    """The request features the registry lets through, in GenerationConfig's fields (only those set).
    OpenVINO penalises a seen token of prompt or output as transformers does (a positive logit
    divided, a negative one multiplied) and keeps tokens with p >= min_p * max p after temperature;
    it orders min-p before top-p, which keeps the same tokens (both keep a head of the sorted
    distribution and its top-p sums the unrenormalised probabilities). Stop strings stay in the
    output (`include_stop_str_in_output`): the reference keeps the token that completes a stop."""
    if spec.repetition_penalty != 1.0:
        config.repetition_penalty = float(spec.repetition_penalty)
    if spec.min_p > 0.0:
        config.min_p = float(spec.min_p)
    if spec.stop:
        config.stop_strings = set(spec.stop)
        config.include_stop_str_in_output = True
    if spec.grammar:
        config.structured_output_config = structured_output(spec.grammar)


def structured_output(grammar: str) -> Any:
    """A grammar as OpenVINO's StructuredOutputConfig (its xgrammar backend): a JSON schema as
    `json_schema`, anything else as `grammar` (xgrammar's EBNF, which reads llama.cpp's GBNF)."""
    from specaudit.decoding._grammar_source import grammar_format

    genai = import_openvino_genai()
    if grammar_format(grammar) == "json_schema":
        return genai.StructuredOutputConfig(json_schema=grammar)
    return genai.StructuredOutputConfig(grammar=grammar)


def finish_reason(tokens: list[int], engine_reason: Any, eos_ids: set[int]) -> str:
    """The record's finish reason: "eos" on an end-of-sequence token, "stop" where OpenVINO stopped
    on a stop string (its STOP without one), else "length"."""
    if tokens and tokens[-1] in eos_ids:
        return "eos"
    return "stop" if getattr(engine_reason, "name", "") == "STOP" else "length"


def recorded_text(text: str, stops: tuple[str, ...]) -> str:
    """The output's text as the reference records it: cut before the first stop string (the
    tokens stay as OpenVINO returned them, so the output invariants see anything after a stop)."""
    from specaudit.decoding.stops import first_stop

    at = first_stop(text, stops) if stops else None
    return text if at is None else text[:at]


def generate(pipelines: Pipelines, speculative: bool, prompt_ids: list[int], config: Any) -> Generation:
    """One request, one call: the engine's tokens as it returned them (not cut), its timings and
    its own counters."""
    import numpy as np
    import openvino as ov

    from specaudit.decoding import Generation

    genai = import_openvino_genai()
    ids = np.asarray([prompt_ids], dtype=np.int64)
    inputs = genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
    pipe = pipelines.speculative if speculative else pipelines.vanilla
    start = time.perf_counter()
    result = pipe.generate(inputs, config)
    wall = time.perf_counter() - start
    tokens = [int(t) for t in result.tokens[0]]
    finish = finish_reason(tokens, result.finish_reasons[0] if result.finish_reasons else None, pipelines.eos_ids)
    metrics = result.extended_perf_metrics if speculative else result.perf_metrics
    ttft = _seconds(metrics.get_ttft().mean) if metrics is not None else wall
    batch_sizes = [int(b) for b in metrics.raw_metrics.m_batch_sizes] if metrics is not None else []
    common = dict(tokens=tokens, finish_reason=finish, wall_s=wall, ttft_s=ttft if ttft == ttft else wall)
    if not speculative:
        return Generation(steps=len(batch_sizes) or len(tokens), draft_s=0.0, verify_s=wall, **common)
    counters = {
        "num_draft_tokens": int(metrics.get_num_draft_tokens()),
        "num_accepted_tokens": int(metrics.get_num_accepted_tokens()),
        "num_rejected_tokens": int(metrics.get_num_rejected_tokens()),
        "draft_acceptance_rate": _number(metrics.get_draft_acceptance_rate()),
        "batch_sizes": batch_sizes,
    }
    # the draft model's inference time; after a fault the engine repeats a stale figure on calls
    # that drafted nothing, so it counts only where drafts were made (the raw figure is kept)
    counters["draft_inference_ms"] = _number(metrics.draft_model_metrics.get_inference_duration().mean)
    draft_s = _seconds(counters["draft_inference_ms"] or 0.0) if counters["num_draft_tokens"] else 0.0
    return Generation(
        steps=len(batch_sizes),
        proposed=counters["num_draft_tokens"],
        accepted=counters["num_accepted_tokens"],
        draft_s=draft_s,
        verify_s=max(wall - draft_s, 0.0),
        extra={"engine_counters": counters},
        **common,
    )


def _seconds(milliseconds: float) -> float:
    value = float(milliseconds) / 1000.0
    return value if value == value else 0.0  # NaN where the engine measured nothing


def _number(value: float) -> float | None:
    value = float(value)
    return value if value == value else None


def check_config(cfg: RunConfig) -> None:
    """What OpenVINO cannot honour, said before anything loads."""
    from specaudit.contracts.engines import IDENTITY_DRAFT

    if cfg.verify:
        raise InputError("--verify plugs a rejection step into specaudit's speculative engine; OpenVINO uses its own, so drop --verify")
    if getattr(cfg, "plant_disparity", None):
        raise InputError(
            "--plant-disparity changes specaudit's draft; OpenVINO's draft cannot be changed, so drop it with --engines openvino"
        )
    draft = str(cfg.draft)
    from specaudit.models._named import is_named

    if draft != IDENTITY_DRAFT and not draft.endswith(".gguf") and not is_named(draft):
        raise InputError(
            f"--draft {draft}: with --engines openvino the draft is `target` (the target drafts for itself: the identity "
            "check), a GGUF file sharing the target's vocabulary, or a named model; OpenVINO cannot load specaudit's derived drafts"
        )


__all__ = [
    "BACKEND",
    "IrModel",
    "Pipelines",
    "check_config",
    "finish_reason",
    "generate",
    "generation_config",
    "gguf_path",
    "import_openvino_genai",
    "ir_folder",
    "load_batching_pipelines",
    "load_pipelines",
    "recorded_text",
    "request_features",
    "runtime_properties",
    "scheduler_config",
]
