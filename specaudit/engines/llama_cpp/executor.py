"""The llama.cpp executor (`--engines llama-cpp`): llama.cpp's own plain and speculative decoding.

Settings, the sampler chain, the observed draft and scoring with llama.cpp's logits are
specaudit.engines.llama_cpp_runtime's; this module turns plan items into records like every executor.

With the screen (`--engines screen,llama-cpp`, a draft GGUF) every prompt gets a record of engine
"screen": llama.cpp's plain decoding of it (the vanilla engine's sample for the same seed), the
target's logits as that decoding sampled from them, the draft's made along the path with the same
call shapes, and from both β_t and the rule's a_t with the expected counts they give
(llama_cpp_runtime.path_acceptance); the plain and speculative engines decode and time the subset
execution.plan.engine_subset picks, as beside specaudit's own screen. Analysis then measures
acceptance per group on every prompt and predicts speed-up from the cost model timed on the subset.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from specaudit.contracts.run import CONTROL_ENGINE, SCREEN_ENGINE, SPECULATIVE_ENGINE, PlanItem, Record
from specaudit.engines.decode import make_record
from specaudit.engines.llama_cpp_runtime import (
    NGRAM_MAX,
    _system_info,
    check_config,
    check_draft_vocabulary,
    draft_gguf,
    generate,
    gguf_entry,
    gguf_file,
    llama_seed,
    load,
    load_engines,
    path_acceptance,
)
from specaudit.engines.provenance import cpu_model
from specaudit.engines.screen_records import ScreenedPath, screen_record
from specaudit.errors import InputError
from specaudit.execution.base import Emit, Executor
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed
from specaudit.stats.acceptance import PathAcceptance

BACKEND = "llama-cpp"


class LlamaCppExecutor(Executor):
    label = "decoding (llama.cpp)"

    def record_engines(self) -> tuple[str, ...]:
        engines = (CONTROL_ENGINE, SPECULATIVE_ENGINE)
        return (SCREEN_ENGINE, *engines) if SCREEN_ENGINE in self.cfg.engines else engines

    def check(self, folder: RunFolder) -> None:
        cfg = self.cfg
        check_config(cfg)
        if SCREEN_ENGINE in cfg.engines and str(cfg.draft) == "ngram":
            raise InputError(
                "--engines screen,llama-cpp screens a draft model's acceptance along target samples; with --draft ngram "
                "run --engines llama-cpp alone (prompt lookup has no draft distribution to screen)"
            )
        self.target = gguf_file(str(cfg.target))
        self.draft = draft_gguf(cfg)
        if self.draft is not None:
            check_draft_vocabulary(self.target, self.draft)
        folder.require_backend(BACKEND, "llama.cpp")

    def start(self, folder: RunFolder) -> dict:
        from specaudit.models._loading import file_sha256

        cfg = self.cfg
        models = {"target": self.target} if self.draft is None else {"target": self.target, "draft": self.draft}
        loaded = load(cfg, folder.prompt_set.prompts, models)  # the context fits every prompt, or the run stops here
        self.sampler, self.tokenizer, self.encoded, self.settings = loaded.sampler, loaded.tokenizer, loaded.encoded, loaded.settings
        self.engines = load_engines(cfg, self.target, self.settings, tokenizer=self.tokenizer)
        draft: dict[str, Any] = {"name": str(cfg.draft), "k": cfg.k}
        if str(cfg.draft) == "ngram":
            draft.update(implementation="llama_cpp.LlamaPromptLookupDecoding", max_ngram_size=NGRAM_MAX, num_pred_tokens=cfg.k)
        else:
            draft.update(implementation="specaudit GgufDraft (greedy, k tokens)", gguf_sha256=file_sha256(self.draft))
        chain = {k: v for k, v in self.sampler.items() if k not in ("grammar", "logits_processor")}
        return {
            "versions": loaded.versions(),
            "models": {"target": gguf_entry(str(cfg.target), self.target), "draft": draft},
            "device": {
                "type": "cpu",
                "engine": "llama.cpp",
                "cpu_model": cpu_model(),
                "threads": self.settings["n_threads"],
                "system_info": _system_info(loaded.llama_cpp),
            },
            "backend": BACKEND,
            "llama_cpp": {
                "settings": self.settings,
                "sampler_chain": chain,
                "sampler_order": "penalties (neutral) -> top_k -> typical (off) -> top_p -> min_p (off) -> temperature -> dist "
                "(temperature 0: greedy)",
                "seed": "llama_seed = low 32 bits of derive_seed(...) (0xFFFFFFFF, llama.cpp's random seed, becomes 0)",
                "kv_cache": "cleared before every record",
                "vanilla_logits_all": False,
                "eos_ids": sorted(self.engines.eos_ids),
            },
        }

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        cfg = self.cfg
        if items:  # first calls pay for allocation: run them before anything is timed
            for _ in range(cfg.warmup):
                for engine in (CONTROL_ENGINE, SPECULATIVE_ENGINE):
                    generate(
                        self.engines, engine, self.encoded[items[0].prompt.id], self.sampler, cfg.seed, min(8, cfg.max_new_tokens), cfg.k
                    )
        for item in items:
            seed = derive_seed(cfg.seed, item.prompt.id, item.sample)
            prompt_ids = self.encoded[item.prompt.id]
            if item.engine == SCREEN_ENGINE:
                emit(self.screen_record(item, seed, prompt_ids))
                continue
            generation = generate(self.engines, item.engine, prompt_ids, self.sampler, seed, cfg.max_new_tokens, cfg.k)
            text = self.tokenizer.decode(generation.tokens, skip_special_tokens=True)
            record = make_record(cfg, item, seed, prompt_ids, generation, text).with_extra(
                backend=BACKEND,
                llama_seed=llama_seed(seed),
                acceptance_source="none" if item.engine == CONTROL_ENGINE else "draft hook",
            )
            if item.engine != CONTROL_ENGINE and not item.timing_only:
                acceptance = path_acceptance(self.engines, prompt_ids, generation.tokens, cfg.sampling, cfg.max_new_tokens)
                # position_accept: the rule's a_t = p_t(argmax q_t) along the path (the identity check's expectation)
                if acceptance is not None:
                    record = record.with_extra(position_beta=acceptance.beta, position_accept=acceptance.accept_cond)
            emit(record)

    def screen_record(self, item: PlanItem, seed: int, prompt_ids: list[int]) -> Record:
        """The screen's record of a prompt: llama.cpp's plain sample of it and the acceptance
        expected along that path (llama_cpp_runtime.path_acceptance), in specaudit's screen format."""
        cfg = self.cfg
        start = time.perf_counter()
        logits: list[np.ndarray] = []
        # The screen times nothing, so it uses every core (extra.screen_threads), as specaudit's own
        # screen does; the engines keep --threads, so their timings mean what they always do.
        contexts = (self.engines.vanilla._ctx, self.engines.draft.inner.model._ctx)
        threads = int(cfg.extra.get("screen_threads") or os.cpu_count() or 1)
        for context in contexts:
            context.set_n_threads(threads, threads)
        try:
            generation = generate(self.engines, CONTROL_ENGINE, prompt_ids, self.sampler, seed, cfg.max_new_tokens, cfg.k, logits=logits)
            sampled_from = np.stack(logits[: len(generation.tokens)]) if generation.tokens else None
            acceptance = path_acceptance(
                self.engines, prompt_ids, generation.tokens, cfg.sampling, cfg.max_new_tokens, target_logits=sampled_from
            )
        finally:
            for context, engine_threads in zip(contexts, (self.settings["n_threads"], self.settings["draft_threads"]), strict=True):
                context.set_n_threads(engine_threads, engine_threads)
        if acceptance is None:  # an empty path (the draft is a model, checked): nothing was drafted or emitted
            acceptance = PathAcceptance(0.0, 0.0, 0.0, 0.0)
        path = ScreenedPath(generation.tokens, generation.finish_reason, acceptance, time.perf_counter() - start, 1)
        text = self.tokenizer.decode(generation.tokens, skip_special_tokens=True)
        record = screen_record(cfg, item, seed, prompt_ids, path, text)
        return record.with_extra(backend=BACKEND, llama_seed=llama_seed(seed), screen={**record.extra["screen"], "steps": "prompt pass"})
