"""The llama-server executor (`--engines llama-server`): specaudit starts two llama-server
processes (speculation off and on, `-np` slots each), runs the plan against them at each
concurrency level, and stops them.

Concurrency is a dimension of the plan (specaudit.engines.levels, shared with the endpoint
engine): every (prompt, sample) is decoded once per level, and the record says at which level it
ran (`concurrency`); at level 4 a server batches up to 4 sequences in one continuous batch.

With `--prefix-cache cold,warm` each level runs a cold pass (`cache_prompt: false`, as without
the flag) and a warm pass: each warm record's request is preceded, on the same worker and the same
slot (`id_slot`), by a priming request of the same prompt (one token, `cache_prompt: true`), so
the record's own request finds the prompt's prefix in the slot's cache. The record carries its
state and the server's count of reused prompt tokens (`timings.cache_n`); a warm record that
reused none is counted as a miss by the analysis, not judged as warm.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from specaudit.contracts.engines import ENGINES
from specaudit.contracts.run import CONTROL_ENGINE, SPECULATIVE_ENGINE, WARM, PlanItem, cache_fields
from specaudit.engines.decode import library_versions, make_record
from specaudit.engines.http.client import Endpoint
from specaudit.engines.levels import cache_states, plan_passes, run_levels
from specaudit.engines.llama_build import binding_version, build_info, require_binary
from specaudit.engines.llama_cpp_runtime import draft_gguf, gguf_file, llama_seed
from specaudit.engines.llama_server.client import (
    NEUTRAL_SAMPLING,
    SAMPLER_ORDER,
    cached_tokens,
    complete,
    emitted_logprobs,
    generation_of,
    request_body,
    request_features,
    server_args,
)
from specaudit.engines.llama_server.launcher import LlamaServer, ServerPair
from specaudit.engines.llama_server.settings import server_settings, spec_type_for
from specaudit.errors import InputError
from specaudit.execution.base import Emit, Executor
from specaudit.execution.faults import FailedItem, attempt
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed
from specaudit.prompts import prompt_token_ids

if TYPE_CHECKING:
    from specaudit.contracts.run import Record

BACKEND = "llama-server"
RECORD_ENGINES = ENGINES[BACKEND].records


class LlamaServerExecutor(Executor):
    label, unit = "requests (llama-server)", "req"

    def record_engines(self) -> tuple[str, ...]:
        return RECORD_ENGINES

    def check(self, folder: RunFolder) -> None:
        cfg = self.cfg
        self.settings = server_settings(cfg.extra)
        if cfg.draft is None:
            raise InputError("--engines llama-server needs a --draft: ngram (prompt lookup, the default) or a GGUF file")
        self.spec_type = spec_type_for(str(cfg.draft), self.settings)
        request_features(cfg.sampling, cfg.max_new_tokens)  # a feature llama.cpp cannot express: refused before any server starts
        self.target = gguf_file(str(cfg.target))
        self.draft = draft_gguf(cfg)  # `--draft target`: the target's own file (the identity check)
        self.binary = require_binary()
        previous = folder.previous
        folder.require_backend(BACKEND, "llama-server")
        identity = self._identity()
        if previous and (previous.get(BACKEND) or {}).get("identity") != identity:
            raise InputError(
                f"{folder.out_dir} was run with other llama_server settings ({(previous.get(BACKEND) or {}).get('identity')}); "
                f"re-run them or choose a new --out (now: {identity})"
            )
        # The plan once per concurrency level and cache state (engines.levels); what is recorded already is skipped.
        self.passes = plan_passes(folder, self.settings.concurrency_levels, cache_states(cfg.prefix_cache), cfg.samples, cfg.timing_repeats)
        self.levels = {key: level for key, (level, _) in self.passes.items()}

    def _identity(self) -> dict:
        s = self.settings
        return {
            "concurrency_levels": list(s.concurrency_levels),
            "slots": s.slots,
            "ctx_per_slot": s.ctx_per_slot,
            "spec_type": self.spec_type,
            "extra_args": list(s.extra_args),
            "logprobs": s.logprobs,
        }

    def start(self, folder: RunFolder) -> dict:
        from specaudit.models import load_tokenizer
        from specaudit.models._loading import file_sha256

        cfg, s = self.cfg, self.settings
        self.tokenizer = load_tokenizer(str(cfg.target))
        self.encoded = {p.id: prompt_token_ids(self.tokenizer, p, cfg.chat_template) for p in folder.prompt_set.prompts}
        self.eos_ids = {int(self.tokenizer.eos_token_id)} if self.tokenizer.eos_token_id is not None else set()
        sides = {CONTROL_ENGINE: None, SPECULATIVE_ENGINE: self.spec_type}
        self.servers = ServerPair(
            {
                engine: LlamaServer(
                    self.binary, server_args(self.target, s, spec_type=spec, draft=self.draft, k=cfg.k), engine, lifetime_s=s.lifetime_s
                )
                for engine, spec in sides.items()
            },
            s.startup_timeout_s,
        ).start()
        self.endpoints = {
            engine: Endpoint(server.base_url, setting=f"llama-server ({engine})", timeout_s=s.request_timeout_s)
            for engine, server in self.servers.servers.items()
        }
        draft = {"name": str(cfg.draft), "k": cfg.k, "spec_type": self.spec_type}
        if self.draft is not None:
            draft["gguf_sha256"] = file_sha256(self.draft)
        return {
            "versions": {**library_versions(), "llama_cpp_python_sources": binding_version()},
            "models": {
                "target": {"name": str(cfg.target), "gguf": str(self.target), "gguf_sha256": file_sha256(self.target)},
                "draft": draft,
            },
            "device": {"type": "cpu", "engine": "llama-server", "threads": s.threads, "slots": s.slots},
            "backend": BACKEND,
            BACKEND: {
                "identity": self._identity(),
                "binary": str(self.binary),
                "build": build_info(self.binary),
                "commands": {engine: server.command[:-4] for engine, server in self.servers.servers.items()},  # without host/port
                "sampler_order": [*SAMPLER_ORDER, "dist"],
                "neutral_sampling": NEUTRAL_SAMPLING,
                "cache_prompt": False
                if not cfg.prefix_cache
                else {
                    "cold": "cache_prompt false",
                    "warm": "a priming request of the same prompt (1 token, cache_prompt true) on the slot (id_slot), then "
                    "the record's request with cache_prompt true on that slot; timings.cache_n recorded",
                    "states": list(cfg.prefix_cache),
                },
                "seed": "llama_seed = low 32 bits of derive_seed(...) (0xFFFFFFFF, llama.cpp's random seed, becomes 0)",
                "concurrency": "each level runs the whole plan with that many requests in flight per server",
            },
        }

    def _record_of(self, item: PlanItem) -> Record:
        cfg = self.cfg
        seed = derive_seed(cfg.seed, item.prompt.id, item.sample)
        prompt_ids = self.encoded[item.prompt.id]
        self._check_alive(item.engine)
        state = self.passes[item.key][1]
        slot = None
        if state == WARM:  # the same prompt first, on the slot this worker keeps: its prefix is then in that slot's cache
            slot = self._slot(item)
            complete(self.endpoints[item.engine], request_body(cfg, prompt_ids, seed, 1, slot=slot))
        body = request_body(cfg, prompt_ids, seed, cfg.max_new_tokens, self.settings.logprobs, slot=slot)
        final, tokens, wall, ttft = complete(self.endpoints[item.engine], body)
        server_logprobs = emitted_logprobs(final, tokens) if self.settings.logprobs else None
        generation, acceptance, server_times = generation_of(final, tokens, wall, ttft, self.eos_ids, cfg.max_new_tokens)
        with self._tokenizer_lock:
            text = self.tokenizer.decode(generation.tokens, skip_special_tokens=True)
        record = make_record(cfg, item, seed, prompt_ids, generation, text)
        if item.engine == SPECULATIVE_ENGINE and acceptance is None:
            source = "timings (no draft_n: nothing drafted)"
        else:
            source = "none" if item.engine == CONTROL_ENGINE else acceptance.source
        return record.with_extra(
            backend=BACKEND,
            concurrency=self.levels[item.key],
            llama_seed=llama_seed(seed),
            acceptance_source=source,
            server_timings=server_times,
            server_logprobs=server_logprobs,
            **(cache_fields(state, cached_tokens(final)) if state is not None else {}),
        )

    def _slot(self, item: PlanItem) -> int:
        """The slot this worker thread keeps for its warm requests at the item's level: each of a
        level's workers on one server its own, so a priming request and the request after it meet
        the same cache and no other request runs on that slot in between."""
        level = self.levels[item.key]
        with self._slot_lock:
            key = (item.engine, level, threading.get_ident())
            if key not in self._slot_of:
                taken = sum(1 for engine, at, _ in self._slot_of if (engine, at) == (item.engine, level))
                self._slot_of[key] = taken % self.settings.slots
            return self._slot_of[key]

    def _check_alive(self, engine: str) -> None:
        server = self.servers.servers[engine]
        if not server.alive():
            raise InputError(
                f"llama-server ({engine}) is not running any more: {server.log_tail() or 'no output'} (log: {server.log_path})"
            )

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        cfg = self.cfg
        self._tokenizer_lock = threading.Lock()
        self._slot_lock, self._slot_of = threading.Lock(), {}
        if items:
            first = self.encoded[items[0].prompt.id]
            for _ in range(cfg.warmup):
                for engine in RECORD_ENGINES:
                    complete(self.endpoints[engine], request_body(cfg, first, cfg.seed, min(8, cfg.max_new_tokens)))
        run_levels(items, self.settings.concurrency_levels, self.levels, self._attempt, emit)

    def _attempt(self, item: PlanItem) -> Record | FailedItem:
        """The item's record, or its fault where the server answered 5xx or the call raised (execution.faults)."""
        return attempt(item, lambda: self._record_of(item), derive_seed(self.cfg.seed, item.prompt.id, item.sample))

    def close(self) -> None:
        for endpoint in getattr(self, "endpoints", {}).values():
            endpoint.close()
        servers = getattr(self, "servers", None)
        if servers is not None:
            servers.stop()


__all__ = ["BACKEND", "LlamaServerExecutor"]
