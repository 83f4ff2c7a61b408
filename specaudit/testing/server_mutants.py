"""Server mutants: bugs real serving engines shipped across the requests of a batch, reproduced in
the reference server's batching (specaudit.testing.batching). Each is a BatchPolicy, or for the
one-sided sampler a verify function, served by a ReferenceServer; the endpoint audit must catch
each and name its cause (`caught_by`: the finding of the snapshot that names it).

- shared_rng: a request that joins a running batch decodes with the batch's generator (the
  oldest row's seed) instead of its own; one seeded SamplingParams broadcast over a batch gives
  every row the same noise (vLLM #50440), the seeded-batch class of vLLM #11123 / PR #10863.
  Each output alone follows the target; outputs that ran together are copies of each other.
- top_p_one_side: the target's probabilities at the default parameters (T = 1, no top-p) while
  the draft's follow the request (vLLM #9834 / PR #10198); wrong wherever the request truncates
  (specaudit.selftest.field_mutants.target_default_sampling, the same bug in the engine).
- zero_logprobs: every returned logprob of the speculative server is 0.0 (llama.cpp #27972); the
  tokens are right, the logprobs are not the target's.
- stale_draft_state: the draft's KV of ended requests is never freed; once it fills the draft
  context (`capacity` tokens), drafting fails silently and the server decodes without speculation
  until restarted (llama.cpp PR #27692, review: the draft context's KV never freed between
  requests). Output correct; acceptance stops during the run, at any load.
- draft_off_under_load: with more than `limit` sequences in the batch the draft length drops to
  0 (TensorRT-LLM PR #16888): output correct, acceptance collapses only under load.
"""

from __future__ import annotations

from dataclasses import dataclass

from specaudit.testing.batching import BatchPolicy, Row


class SharedRng(BatchPolicy):
    name = "shared_rng"

    def __init__(self) -> None:
        self._first_state: dict[int, object] = {}  # each row's generator state before its first step

    def before_round(self, rows: list[Row]) -> None:
        for row in rows:
            if id(row) not in self._first_state:
                self._first_state[id(row)] = row.decoding.generator.get_state()
                if row is not rows[0] and not row.batch_sizes:  # joined a running batch: takes its seed
                    row.decoding.generator.set_state(self._first_state[id(rows[0])])
                    self._first_state[id(row)] = self._first_state[id(rows[0])]

    def finished(self, row: Row) -> None:
        self._first_state.pop(id(row), None)


class ZeroLogprobs(BatchPolicy):
    name = "zero_logprobs"

    def logprobs(self, logprobs: dict, row: Row) -> dict:
        out = {**logprobs, "token_logprobs": [0.0] * len(logprobs["token_logprobs"])}
        out["top_logprobs"] = [
            {key: (0.0 if key == token else value) for key, value in top.items()} | {token: 0.0}
            for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"])
        ]
        return out


class StaleDraftState(BatchPolicy):
    name = "stale_draft_state"

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self.held = 0  # draft KV positions left behind by ended requests

    def finished(self, row: Row) -> None:
        self.held += len(row.request.get("prompt_ids") or []) + len(row.decoding.tokens)

    def draft_length(self, k: int, batch_size: int) -> int:
        return 0 if self.held > self.capacity else k


class DraftOffUnderLoad(BatchPolicy):
    name = "draft_off_under_load"

    def __init__(self, limit: int = 2) -> None:
        self.limit = limit

    def draft_length(self, k: int, batch_size: int) -> int:
        return 0 if batch_size > self.limit else k


@dataclass(frozen=True)
class ServerMutant:
    """A served bug: the batch policy and verify function of the speculative server, and the
    snapshot finding that must name it (None for the correct server)."""

    name: str
    policy: type[BatchPolicy]
    verify: str | None  # module:function of the rejection step, None for the correct one
    caught_by: str | None
    cause: str


SERVER_MUTANTS: dict[str, ServerMutant] = {
    m.name: m
    for m in (
        ServerMutant("correct", BatchPolicy, None, None, "-"),
        ServerMutant("shared_rng", SharedRng, None, "independence", "RNG shared across concurrent requests (vLLM #50440, #11123)"),
        ServerMutant(
            "top_p_one_side",
            BatchPolicy,
            "specaudit.selftest.field_mutants:target_default_sampling",
            "equivalence",
            "top-p applied to the draft only (vLLM #9834)",
        ),
        ServerMutant(
            "zero_logprobs", ZeroLogprobs, None, "logprob_parity", "logprob 0.0 for every token under speculation (llama.cpp #27972)"
        ),
        ServerMutant(
            "stale_draft_state", StaleDraftState, None, "acceptance_stopped", "draft KV of ended requests never freed (llama.cpp #27692)"
        ),
        ServerMutant(
            "draft_off_under_load",
            DraftOffUnderLoad,
            None,
            "acceptance_collapse",
            "draft length 0 under load, output correct (TensorRT-LLM #16888)",
        ),
    )
}

__all__ = ["SERVER_MUTANTS", "DraftOffUnderLoad", "ServerMutant", "SharedRng", "StaleDraftState", "ZeroLogprobs"]
