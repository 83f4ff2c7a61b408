"""The endpoint executor (`--engines endpoint`): two live OpenAI-compatible servers answer the plan.

The servers, their settings and the HTTP client are specaudit.engines.endpoint.client's; this module
only turns plan items into requests and their answers into records (engine "vanilla" for the
spec-OFF server, "speculative" for the spec-ON one), `concurrency` requests at a time, or, with
`concurrency_levels`, the plan once per level (specaudit.engines.levels), the level on each record.
With `--prefix-cache` the plan also runs once per cache state: a warm record's request follows a
one-token request of the same prompt to the same server (engines.endpoint.client), and the record
keeps the state and the prompt tokens the server reports it reused (None where it reports none).
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from specaudit._validation import typed_as
from specaudit.contracts.run import SPECULATIVE_ENGINE, WARM, PlanItem, cache_fields
from specaudit.decoding.settings import setting_label
from specaudit.engines.decode import library_versions, make_record
from specaudit.engines.endpoint.client import (
    FINISH_REASONS,
    Completion,
    Endpoint,
    api_key_of,
    cached_prompt_tokens,
    open_servers,
    out_of_vocabulary,
    output_tokens,
    request_body,
)
from specaudit.engines.endpoint.mixed import MixedTraffic, mixed_load
from specaudit.engines.endpoint.settings import mix_setting
from specaudit.engines.levels import cache_states, plan_passes, run_levels
from specaudit.engines.ordered import emit_in_plan_order
from specaudit.engines.spec_counters import SPEC_DECODE_COUNTERS, metrics_summary, parse_metrics
from specaudit.errors import InputError
from specaudit.execution.base import Emit, Executor
from specaudit.execution.faults import FailedItem, attempt
from specaudit.execution.folder import RunFolder
from specaudit.execution.plan import derive_seed
from specaudit.execution.preflight import check_fits
from specaudit.prompts import prompt_token_ids

if TYPE_CHECKING:
    from specaudit.contracts.run import Record


class EndpointExecutor(Executor):
    label, unit = "requests", "req"

    def check(self, folder: RunFolder) -> None:
        cfg = self.cfg
        levels = cfg.engine_settings("endpoint").get("concurrency_levels")
        # The plan once per concurrency level and cache state (engines.levels); what is recorded already is skipped.
        self.states: dict[str, str | None] = {}
        self.levels = None
        if levels or cfg.prefix_cache:
            passes = plan_passes(folder, tuple(levels or (None,)), cache_states(cfg.prefix_cache), cfg.samples, cfg.timing_repeats)
            self.levels = {key: level for key, (level, _) in passes.items()} if levels else None
            self.states = {key: state for key, (_, state) in passes.items()}

    def start(self, folder: RunFolder) -> dict:
        from specaudit.models import load_tokenizer, vocabulary_size

        cfg, settings = self.cfg, self.cfg.engine_settings("endpoint")
        api_key = api_key_of(settings)
        self.endpoints, self.models, served = open_servers(settings)  # nothing is written if a server is down
        # llama-server gets its whole sampling chain and answers unstreamed (engines.endpoint.client)
        self.llama_server = {engine: endpoint.is_llama_server() for engine, endpoint in self.endpoints.items()}
        self.metrics = (
            Endpoint(settings["metrics_url"], setting="endpoint.metrics_url", api_key=api_key, timeout_s=settings["timeout_s"])
            if settings["metrics_url"]
            else None
        )
        tokenizer_name = settings["tokenizer"] or cfg.target
        self.tokenizer = load_tokenizer(tokenizer_name)
        self.vocab_size = vocabulary_size(self.tokenizer, tokenizer_name)
        self.encoded = {p.id: prompt_token_ids(self.tokenizer, p, cfg.chat_template) for p in folder.prompt_set.prompts}
        for engine, endpoint in self.endpoints.items():  # a server that advertises its context: checked before any request
            limit = endpoint.advertised_context(self.models[engine])
            if limit is not None:
                check_fits(self.encoded, limit, f"the max_model_len {typed_as(f'endpoint.{engine}_url')} advertises", cfg.max_new_tokens)
        # A server whose completions API takes text only (llama-cpp-python's) gets the prompt ids
        # decoded with their special tokens, which it tokenises back; decoded here, before any thread.
        self.texts = (
            {prompt_id: self.tokenizer.decode(ids, skip_special_tokens=False) for prompt_id, ids in self.encoded.items()}
            if settings["prompt_as"] == "text"
            else {}
        )
        self.notes = dict(folder.previous.get("endpoint") or {})
        self.notes.update({"logprobs": settings["logprobs"], "logprobs_mode": settings["logprobs_mode"], "stream": settings["stream"]})
        if cfg.prefix_cache:
            self.notes["prefix_cache"] = {
                "states": list(cfg.prefix_cache),
                "cold": "llama-server: cache_prompt false; other servers: a fresh cache_salt per request",
                "warm": "a priming request of the same prompt (1 token) first, then the record's request (llama-server: "
                "cache_prompt true; other servers: the priming request's cache_salt)",
                "reused": "usage.prompt_tokens_details.cached_tokens, null where the server does not report it",
            }
        if any(self.llama_server.values()):
            self.notes["llama_server"] = {
                "sides": sorted(engine for engine, is_llama in self.llama_server.items() if is_llama),
                "note": (
                    "llama-server: every sampling stage sent (its defaults include min_p 0.05); answers not streamed and ids "
                    "read from __verbose.tokens (its logprobs skip tokens that end inside a UTF-8 character; such a record "
                    "keeps no logprobs); logprobs recorded as raw (llama-server's are the model's softmax before its chain)"
                ),
            }
        fields = {
            "versions": library_versions(),
            "models": {
                "tokenizer": {"name": str(tokenizer_name)},
                **{
                    engine: {"url": self.endpoints[engine].base_url, "model": self.models[engine], "served": served[engine]}
                    for engine in self.record_engines()
                },
            },
            "device": {
                "type": "endpoint",
                "name": f"{settings['speculative_url']} (speculative), {settings['vanilla_url']} (vanilla)",
                "concurrency": list(settings["concurrency_levels"]) if settings.get("concurrency_levels") else settings["concurrency"],
                **({"load": mixed_load(settings)} if settings["mix_sampling"] else {}),
            },
            "backend": "endpoint",
            "endpoint": self.notes,
        }
        if folder.previous.get("server_metrics"):
            fields["server_metrics"] = folder.previous["server_metrics"]
        return fields

    def _call(
        self, engine: str, prompt_id: str, seed: int, max_tokens: int, request: str = "", *, warm: bool = False, salt: str | None = None
    ) -> Completion:
        body = request_body(
            self.cfg,
            self.cfg.engine_settings("endpoint"),
            self.models[engine],
            self.encoded[prompt_id],
            seed,
            max_tokens,
            llama_server=self.llama_server[engine],
            cache_prompt=warm,
            cache_salt=salt,
        )
        if prompt_id in self.texts:
            body["prompt"] = self.texts[prompt_id]
        return self.endpoints[engine].complete(body, request=request or f"warm-up request, prompt {prompt_id}")

    def _record_of(self, item: PlanItem) -> Record:
        from specaudit.decoding import Generation

        cfg, settings = self.cfg, self.cfg.engine_settings("endpoint")
        seed = derive_seed(cfg.seed, item.prompt.id, item.sample)
        prompt_ids = self.encoded[item.prompt.id]
        request = f"prompt {item.prompt.id}, sample {item.sample}"
        state = self.states.get(item.key)
        salt = f"specaudit-{state}-{uuid.uuid4().hex}" if state is not None else None  # this record's (and its priming's) alone
        if state == WARM:  # the same prompt first, so that the record's request finds its prefix in the server's cache
            self._call(item.engine, item.prompt.id, seed, 1, f"priming request of {request}", warm=True, salt=salt)
        started_at = time.time()  # when the request left: the order the server saw them in
        completion = self._call(item.engine, item.prompt.id, seed, cfg.max_new_tokens, request, warm=state == WARM, salt=salt)
        finish = FINISH_REASONS.get(str(completion.finish_reason))
        if finish is None:
            raise InputError(
                f"{typed_as(self.endpoints[item.engine].setting)} ended a completion with finish_reason "
                f"{completion.finish_reason!r}, not stop or length; check the server log and re-run to resume"
            )
        ids, logprobs = output_tokens(completion, settings["logprobs"])
        source = "server"
        if ids is None:
            with self._tokenizer_lock:  # a fast tokenizer must not be called from two threads at once
                ids, source = list(self.tokenizer(completion.text, add_special_tokens=False)["input_ids"]), "re-tokenised text"
        # Acceptance per request where the server reports counts in its answer (request_acceptance), so
        # the disparity analysis can run per group; otherwise not observed (0).
        acceptance = completion.acceptance if item.engine == SPECULATIVE_ENGINE else None
        counted = acceptance is not None and acceptance.proposed is not None
        generation = Generation(
            tokens=ids,
            finish_reason=finish,
            wall_s=completion.wall_s,
            ttft_s=completion.ttft_s,
            steps=(acceptance.steps or 0) if counted else 0,
            proposed=acceptance.proposed if counted else 0,
            accepted=acceptance.accepted if counted else 0,
            draft_s=None,
            verify_s=None,
        )
        record = make_record(cfg, item, seed, prompt_ids, generation, completion.text)
        extra = {"server_acceptance": acceptance.to_dict()} if acceptance is not None else {}
        if self.levels is not None:
            extra["concurrency"] = self.levels[item.key]
        if state is not None:
            extra.update(cache_fields(state, cached_prompt_tokens(completion)))
        if source == "server":  # kept as evidence: the equivalence audit fails these positions as impossible tokens
            violations = out_of_vocabulary(ids, logprobs, self.vocab_size)
            if violations:
                extra["server_violations"] = violations
        return record.with_extra(
            backend="endpoint",
            token_ids_source=source,
            logprobs_mode="raw" if self.llama_server[item.engine] else settings["logprobs_mode"],
            target_logprobs=logprobs,
            started_at=started_at,
            **extra,
        )

    def _attempt(self, item: PlanItem) -> Record | FailedItem:
        return attempt(item, lambda: self._record_of(item), derive_seed(self.cfg.seed, item.prompt.id, item.sample))

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        cfg, settings = self.cfg, self.cfg.engine_settings("endpoint")
        self._tokenizer_lock = threading.Lock()
        if items:
            first = items[0].prompt.id
            for _ in range(cfg.warmup):  # first requests pay for graph capture, caches, connection set-up
                for engine in self.record_engines():
                    self._call(engine, first, cfg.seed, min(8, cfg.max_new_tokens))
        before = parse_metrics(self.metrics.get_text(settings["metrics_url"])) if self.metrics and items else None
        mixed = self._mixed_traffic(folder) if items and settings["mix_sampling"] else None

        sources: set = set()

        def emit_noting_source(record: Record | FailedItem) -> None:
            emit(record)
            if not isinstance(record, FailedItem):
                sources.add(record.extra["token_ids_source"])

        try:
            # Items are submitted in plan order (engines of one prompt and sample back to back, order
            # alternating), so both sides of each pair run at about the same time and server load.
            # A server's HTTP 5xx (EngineError) or an exception is that item's fault (execution.faults);
            # a malformed answer stays an InputError that stops the run (docs/robustness.md).
            if self.levels is not None:
                run_levels(items, tuple(settings["concurrency_levels"]), self.levels, self._attempt, emit_noting_source)
            else:
                with ThreadPoolExecutor(max_workers=settings["concurrency"]) as pool:
                    futures = {pool.submit(self._attempt, item): index for index, item in enumerate(items)}
                    emit_in_plan_order(futures, emit_noting_source)
        finally:
            if mixed is not None:
                self.notes["mixed_traffic"] = {**self.notes["mixed_traffic"], **mixed.stop()}
            self._note_run(folder, sources, before)

    def _mixed_traffic(self, folder: RunFolder) -> MixedTraffic:
        """Requests at `mix_sampling` on both servers while the plan runs (engines.endpoint.mixed)."""
        cfg, settings = self.cfg, self.cfg.engine_settings("endpoint")
        spec = mix_setting(settings["mix_sampling"])
        mix_cfg = cfg.with_setting(spec)
        prompt_ids = sorted(self.encoded)

        def send(engine: str, index: int) -> None:
            prompt_id = prompt_ids[index % len(prompt_ids)]
            body = request_body(
                mix_cfg,
                settings,
                self.models[engine],
                self.encoded[prompt_id],
                derive_seed(cfg.seed, f"mixed-{prompt_id}", index),
                cfg.max_new_tokens,
                llama_server=self.llama_server[engine],
            )
            if prompt_id in self.texts:
                body["prompt"] = self.texts[prompt_id]
            self.endpoints[engine].complete(body, request=f"mixed-traffic request {index}, prompt {prompt_id}")

        self.notes["mixed_traffic"] = {
            "sampling": setting_label(spec),
            "in_flight": settings["mix_in_flight"],
            "note": "requests at this setting were kept in flight on each server while the plan ran, not recorded: "
            "the servers' batches mixed them with the audited requests",
        }
        return MixedTraffic(tuple(self.record_engines()), settings["mix_in_flight"], send).start()

    def _note_run(self, folder: RunFolder, sources: set, before: dict | None) -> None:
        """The manifest's endpoint notes and server counter deltas, written even when the run stopped early."""
        settings, manifest, notes = self.cfg.engine_settings("endpoint"), folder.manifest, self.notes
        if sources:
            notes["token_ids"] = sorted(sources | set(notes.get("token_ids") or []))
            if "re-tokenised text" in sources:
                notes["token_ids_note"] = (
                    "the server returned token text, not ids (vLLM: return_tokens_as_token_ids); outputs were "
                    "re-tokenised, which may differ from what was sampled, and carry no logprobs"
                )
            manifest["endpoint"] = notes
        if before is not None:
            try:
                after = parse_metrics(self.metrics.get_text(settings["metrics_url"]))
            except InputError as err:
                after = None
                manifest["server_metrics"] = {**(manifest.get("server_metrics") or {}), "error": str(err)}
            if after is not None:
                summary = metrics_summary(before, after, folder.previous.get("server_metrics"))
                summary.update(
                    url=settings["metrics_url"],
                    note=(
                        "deltas of the server's cumulative counters over the run's requests; other traffic on that server in the meantime "
                        "is counted too"
                        if after
                        else f"no {', '.join(SPEC_DECODE_COUNTERS)} counters found at the metrics URL"
                    ),
                )
                manifest["server_metrics"] = summary
        folder.save_manifest()

    def close(self) -> None:
        for endpoint in (*getattr(self, "endpoints", {}).values(), getattr(self, "metrics", None)):
            if endpoint is not None and hasattr(endpoint, "close"):
                endpoint.close()
