"""Concurrency levels for `--engines openvino`: `level` requests in flight in one
`ContinuousBatchingPipeline`, as a server batches them.

OpenVINO GenAI batches requests only inside one pipeline driven by `add_request` / `step`: its
`generate` refuses a second caller while one runs, and a batched `generate` call gives each result
the call's totals. So each level above 1 keeps `level` requests added, steps the pipeline, and
refills a slot as soon as a request finishes, until the level's items are done. Each request's
handle gives its tokens and its own per-step sizes (`raw_metrics.m_batch_sizes`: the tokens each
main-model inference emitted for it), from which its accepted drafts are counted (every step after
the prompt's emits its accepted drafts plus one). Its drafted count is not reported per request
(openvino-genai 2026.4), so `proposed` is left None: acceptance rates at these levels are not
claimed, tokens per step are.

Each handle also gives the engine's log-probability of every token it emitted
(`generated_log_probs`), which `LLMPipeline.generate` sums into one score per sequence: recorded as
`server_logprobs`, so the logprob parity check (analysis/logprob_parity.py) compares speculative's
with vanilla's along their common prefix, as it does for servers.

Level 1 keeps the executor's one-request-per-`generate` path, whose counters are the engine's own;
`LLMPipeline` with a scheduler config is the same continuous-batching runtime.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class InFlightResult:
    """One request's outcome at a level: its tokens and the engine's log-probability of each, wall
    and first-token seconds from the moment it was added, and its per-step sizes."""

    tokens: list[int]
    logprobs: list[float]
    wall_s: float
    ttft_s: float
    batch_sizes: list[int]
    finish_reason: Any = None  # the engine's GenerationFinishReason of the last output read

    @property
    def accepted(self) -> int:
        return sum(size - 1 for size in self.batch_sizes[1:])  # the first step is the prompt's: one token


# Request ids unique for the process: a cancelled request may linger in its pipeline under its id.
_REQUEST_IDS = itertools.count()


@dataclass
class _Request:
    handle: Any
    added: float
    first: float | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: Any = None


def run_in_flight(pipeline: Any, requests: list[tuple[list[int], Any]], level: int) -> list[InFlightResult | Exception]:
    """`requests` (prompt ids, GenerationConfig) through `pipeline` with at most `level` in flight;
    one result per request in order. A step that raises is every in-flight request's fault: their
    handles are cancelled and the next requests still run, as a deployment's pipeline would go on."""
    import numpy as np
    import openvino as ov

    results: list[InFlightResult | Exception | None] = [None] * len(requests)
    waiting = list(range(len(requests)))
    running: dict[int, _Request] = {}

    while waiting or running:
        while waiting and len(running) < level:
            index = waiting.pop(0)
            ids, config = requests[index]
            handle = pipeline.add_request(next(_REQUEST_IDS), ov.Tensor(np.asarray([ids], dtype=np.int64)), config)
            running[index] = _Request(handle, time.perf_counter())
        try:
            pipeline.step()
        except Exception as err:  # noqa: BLE001 - the engine's own failure: a fault of every request in the step
            for index, request in running.items():
                results[index] = err
                with contextlib.suppress(Exception):  # release it, as a server would drop a failed request
                    request.handle.cancel()
            running.clear()
            continue
        now = time.perf_counter()
        for index, request in list(running.items()):
            if request.handle.can_read():  # the tokens this step emitted for the request (one sequence: no beams)
                for output in request.handle.read().values():
                    request.tokens.extend(int(t) for t in output.generated_ids)
                    request.logprobs.extend(float(x) for x in output.generated_log_probs)
                    request.finish_reason = output.finish_reason
                request.first = request.first or now
            if request.handle.get_status().name != "RUNNING":  # FINISHED, or STOP / CANCEL / IGNORED by the pipeline
                metrics = request.handle.get_perf_metrics()
                results[index] = InFlightResult(
                    tokens=request.tokens,
                    logprobs=request.logprobs,
                    wall_s=now - request.added,
                    ttft_s=(request.first or now) - request.added,
                    batch_sizes=[int(b) for b in metrics.raw_metrics.m_batch_sizes],
                    finish_reason=request.finish_reason,
                )
                del running[index]
    return results  # type: ignore[return-value]


__all__ = ["InFlightResult", "run_in_flight"]
