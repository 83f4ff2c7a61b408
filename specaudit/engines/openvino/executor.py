"""The OpenVINO GenAI executor (`--engines openvino`): OpenVINO's own plain and speculative decoding.

Models, properties, requests and counters are specaudit.engines.openvino.client's; this module turns
plan items into records like every executor. Each item is one `generate` call decoded through
`execution.faults.attempt`: a runtime exception is that item's fault and the run goes on with the
same pipelines (no rebuilding), so the records after a fault show what the engine does then.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from specaudit.contracts.engines import ENGINES, IDENTITY_DRAFT
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE, PlanItem, Record
from specaudit.decoding import Generation
from specaudit.engines.decode import library_versions, make_record
from specaudit.engines.levels import plan_levels
from specaudit.engines.openvino.batching import InFlightResult, run_in_flight
from specaudit.engines.openvino.client import (
    BACKEND,
    IrModel,
    check_config,
    checked_ir,
    finish_reason,
    generate,
    generation_config,
    gguf_path,
    import_openvino_genai,
    ir_folder,
    load_batching_pipelines,
    load_pipelines,
    recorded_text,
    runtime_properties,
    scheduler_config,
    scheduler_entry,
)
from specaudit.engines.openvino.export import RECORD as EXPORT_RECORD
from specaudit.engines.openvino.export import named_ir
from specaudit.engines.openvino.settings import openvino_settings
from specaudit.execution.base import Emit, Executor
from specaudit.execution.faults import FailedItem, attempt
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed
from specaudit.prompts import prompt_token_ids


class OpenVinoExecutor(Executor):
    label = "decoding (OpenVINO)"

    def record_engines(self) -> tuple[str, ...]:
        return (CONTROL_ENGINE, SPECULATIVE_ENGINE)

    def check(self, folder: RunFolder) -> None:
        cfg = self.cfg
        check_config(cfg)
        self.settings = openvino_settings(cfg.extra)
        import_openvino_genai()
        if self.settings.target_ir:
            checked_ir(self.settings.target_ir, "target_ir")
        identity = str(cfg.draft) == IDENTITY_DRAFT
        if self.settings.draft_ir:
            checked_ir(self.settings.draft_ir, "draft_ir")
        # a named model (the Qwen pair) runs from its optimum-intel export: OpenVINO cannot read its GGUF
        self.target_ir = self.settings.target_ir or named_ir(str(cfg.target), "--target")
        self.draft_ir = self.settings.draft_ir or (None if identity else named_ir(str(cfg.draft), "--draft"))
        self.target_gguf = None if self.target_ir else gguf_path(str(cfg.target), "--target")
        self.draft_gguf = None if identity or self.draft_ir else gguf_path(str(cfg.draft), "--draft")
        if self.draft_gguf is not None and self.target_gguf is not None:
            from specaudit.engines.llama_cpp_runtime import check_draft_vocabulary

            check_draft_vocabulary(self.target_gguf, self.draft_gguf)
        folder.require_backend(BACKEND, "OpenVINO")
        # Concurrency levels: the plan once per level (engines.levels), what is recorded already skipped
        levels = self.settings.concurrency_levels
        self.levels = plan_levels(folder, levels, cfg.samples, cfg.timing_repeats) if self.settings.batched else None

    def _model(self, gguf: object, given: str | Path | None) -> IrModel:
        from specaudit.models._cache import file_sha256

        if given:
            return IrModel(checked_ir(str(given), "ir"), None, None)
        return ir_folder(gguf, file_sha256(gguf), {"INFERENCE_NUM_THREADS": self.properties["INFERENCE_NUM_THREADS"]})

    def start(self, folder: RunFolder) -> dict:
        import openvino

        from specaudit.models import load_tokenizer
        from specaudit.models._cache import file_sha256

        cfg = self.cfg
        genai = import_openvino_genai()
        self.tokenizer = load_tokenizer(str(cfg.target))
        self.encoded = {p.id: prompt_token_ids(self.tokenizer, p, cfg.chat_template) for p in folder.prompt_set.prompts}
        self.properties = runtime_properties(self.settings, cfg.threads)
        target = self._model(self.target_gguf, self.target_ir)
        identity = str(cfg.draft) == IDENTITY_DRAFT
        draft = target if identity and not self.draft_ir else self._model(self.draft_gguf, self.draft_ir)
        self.scheduler = scheduler_config(self.settings)
        eos_ids = {int(self.tokenizer.eos_token_id)} if self.tokenizer.eos_token_id is not None else set()
        started = time.perf_counter()
        self.draft_properties = runtime_properties(self.settings, cfg.threads, draft=True)
        self.pipelines = load_pipelines(target.folder, draft.folder, self.properties, self.draft_properties, self.scheduler, eos_ids)
        self.batching = None
        if self.settings.batched and max(self.settings.concurrency_levels) > 1:
            self.batching = load_batching_pipelines(
                target.folder, draft.folder, self.properties, self.draft_properties, self.scheduler, eos_ids
            )
        load_s = round(time.perf_counter() - started, 2)

        def entry(name: str, model: IrModel) -> dict:
            described = {"name": name, "ir": str(model.folder), "ir_built_s": model.built_s}
            if model.gguf is not None:
                described.update(gguf=str(model.gguf), gguf_sha256=file_sha256(model.gguf))
            if (model.folder / EXPORT_RECORD).is_file():  # made by `specaudit models export-openvino`
                described["export"] = json.loads((model.folder / EXPORT_RECORD).read_text())
            return described

        draft_entry = {**entry(str(cfg.draft), draft), "k": cfg.k, "implementation": "openvino_genai.draft_model"}
        if identity:
            same = self.draft_properties == self.properties
            draft_entry["identity"] = (
                "the target drafts for itself (q = p): every draft must be kept under rejection sampling"
                if same
                else "the target drafts for itself at the draft's own precision (q = p up to rounding)"
            )
        return {
            "versions": {**library_versions(), "openvino_genai": genai.__version__, "openvino": openvino.__version__},
            "models": {"target": entry(str(cfg.target), target), "draft": draft_entry},
            "device": {"type": "cpu", "engine": "OpenVINO GenAI", "threads": self.properties["INFERENCE_NUM_THREADS"]},
            "backend": BACKEND,
            "openvino": {
                "settings": self.settings.model_dump(),
                "properties": self.properties,
                "draft_properties": self.draft_properties,
                "scheduler": scheduler_entry(self.scheduler),
                "pipeline": "LLMPipeline with an explicit SchedulerConfig (paged attention, continuous batching), "
                "vanilla without a draft, speculative with draft_model",
                "requests": "one prompt per generate call, token ids in (TokenizedInputs), no chat template applied by OpenVINO",
                "seed": "rng_seed = derive_seed(...) of the record (sampling only)",
                "warmup": f"{cfg.warmup} greedy request(s) of 8 tokens per pipeline before the plan, whatever the run samples",
                "eos_ids": sorted(eos_ids),
                "load_s": load_s,
                **(
                    {
                        "concurrency": "level 1: one request per generate call (the engine's counters per record); above 1: "
                        "that many requests in flight in a ContinuousBatchingPipeline (add_request / step), each record's "
                        "accepted drafts counted from its own per-step sizes, its drafted count not reported (proposed: null)"
                    }
                    if self.settings.batched
                    else {}
                ),
            },
        }

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        cfg = self.cfg
        # First calls pay for allocation: run them before anything is timed. The warm-up is greedy
        # whatever the run samples, so the first sampled request, and any fault it meets, is a record's.
        from specaudit.decoding import SamplingSpec

        greedy = SamplingSpec(temperature=0.0)
        for _ in range(cfg.warmup if items else 0):
            for speculative in (False, True):
                config = generation_config(
                    greedy,
                    max_new_tokens=min(8, cfg.max_new_tokens),
                    k=cfg.k if speculative else None,
                    seed=0,
                    eos_ids=self.pipelines.eos_ids,
                )
                generate(self.pipelines, speculative, self.encoded[items[0].prompt.id], config)
        if self.levels is None:
            for item in items:
                emit(self._attempt(item))
            return
        for level in self.settings.concurrency_levels:
            batch = [item for item in items if self.levels[item.key] == level]
            if level == 1:
                for item in batch:
                    emit(self._attempt(item))
            else:
                for engine in (CONTROL_ENGINE, SPECULATIVE_ENGINE):  # each side written when done: a crash keeps the other's
                    for record in self._in_flight([item for item in batch if item.engine == engine], level):
                        emit(record)

    def _attempt(self, item: PlanItem) -> Record | FailedItem:
        seed = derive_seed(self.cfg.seed, item.prompt.id, item.sample)
        return attempt(item, lambda: self.record(item, seed), seed)

    def _in_flight(self, items: list[PlanItem], level: int) -> list[Record | FailedItem]:
        """One side's items of a level, `level` requests in flight in its pipeline (vanilla's side runs
        before speculative's, so each has the CPU to itself at that load), in plan order."""
        if not items:
            return []
        cfg, speculative = self.cfg, items[0].engine != CONTROL_ENGINE
        seeds = [derive_seed(cfg.seed, item.prompt.id, item.sample) for item in items]
        requests = [
            (
                self.encoded[item.prompt.id],
                generation_config(
                    cfg.sampling,
                    max_new_tokens=cfg.max_new_tokens,
                    k=cfg.k if speculative else None,
                    seed=seed,
                    eos_ids=self.pipelines.eos_ids,
                    logprobs=True,
                ),
            )
            for item, seed in zip(items, seeds, strict=True)
        ]
        pipeline = self.batching.speculative if speculative else self.batching.vanilla
        return [
            FailedItem.of(item, result, seed) if isinstance(result, Exception) else self._level_record(item, seed, result)
            for item, seed, result in zip(items, seeds, run_in_flight(pipeline, requests, level), strict=True)
        ]

    def _level_record(self, item: PlanItem, seed: int, result: InFlightResult) -> Record:
        speculative = item.engine != CONTROL_ENGINE
        generation = Generation(
            tokens=result.tokens,
            finish_reason=finish_reason(result.tokens, result.finish_reason, self.pipelines.eos_ids),
            wall_s=result.wall_s,
            ttft_s=result.ttft_s,
            steps=len(result.batch_sizes) or len(result.tokens),
            accepted=result.accepted if speculative else 0,
            verify_s=result.wall_s,
            extra={"engine_counters": {"batch_sizes": result.batch_sizes}} if speculative else {},
        )
        record = make_record(self.cfg, item, seed, self.encoded[item.prompt.id], generation, self._text(generation))
        if speculative:  # drafted tokens are not reported per request under batching: unknown, not zero
            record = replace(record, **dict.fromkeys(ENGINES[BACKEND].unreported))
        # one logprob a token, or none: a count that disagrees is not passed off as per-token figures
        logprobs = result.logprobs if len(result.logprobs) == len(result.tokens) else None
        return record.with_extra(
            backend=BACKEND,
            concurrency=self.levels[item.key],
            server_logprobs=logprobs,
            acceptance_source="none"
            if not speculative
            else "per-request step sizes (raw_metrics.m_batch_sizes) under batching; drafted count not reported",
        )

    def decode(self, item: PlanItem, engine: str, seed: int, max_new_tokens: int) -> object:
        speculative = engine != CONTROL_ENGINE
        config = generation_config(
            self.cfg.sampling,
            max_new_tokens=max_new_tokens,
            k=self.cfg.k if speculative else None,
            seed=seed,
            eos_ids=self.pipelines.eos_ids,
        )
        return generate(self.pipelines, speculative, self.encoded[item.prompt.id], config)

    def record(self, item: PlanItem, seed: int) -> Record:
        generation = self.decode(item, item.engine, seed, self.cfg.max_new_tokens)
        record = make_record(self.cfg, item, seed, self.encoded[item.prompt.id], generation, self._text(generation))
        level = {"concurrency": self.levels[item.key]} if self.levels is not None else {}
        return record.with_extra(
            backend=BACKEND,
            acceptance_source="none" if item.engine == CONTROL_ENGINE else "engine counters (extended_perf_metrics), one request per call",
            **level,
        )

    def _text(self, generation: Generation) -> str:
        return recorded_text(self.tokenizer.decode(generation.tokens, skip_special_tokens=True), self.cfg.sampling.stop)

    def close(self) -> None:
        self.pipelines = self.batching = None
