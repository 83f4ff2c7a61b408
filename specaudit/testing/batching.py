"""Continuous batching for the reference server: concurrent requests share decoding steps.

One scheduler thread per server holds the batch: requests join it as they arrive (up to
`max_batch` rows, like a server's slots), and each round advances every row by one decoding
step (a token for vanilla, a draft-and-verify step for speculative), then answers the rows that
ended. A row decodes with specaudit's own engines (decoding.vanilla / decoding.speculative, a step
at a time), its own seeded generator and KV caches, so a request gives the same tokens alone or
in a batch. What the rows share is the server's: the round, the batch's size, and whatever state a
`BatchPolicy` keeps across requests. That is where the cross-request bugs of real servers live,
and `BatchPolicy` is the hook the self-test's server mutants (specaudit.testing.server_mutants)
override; the default policy is the correct server.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any


class BatchPolicy:
    """What a server does across the requests of a batch. The default is correct: every row its
    own generator, the full draft length at any load, nothing kept after a request ends."""

    name = "correct"

    def draft_length(self, k: int, batch_size: int) -> int:
        """Drafted tokens per step for one row while `batch_size` rows share the round."""
        return k

    def before_round(self, rows: list[Row]) -> None:
        """Called before each round, with the rows about to step, in arrival order."""

    def finished(self, row: Row) -> None:
        """Called once per ended row, before it is answered."""

    def logprobs(self, logprobs: dict, row: Row) -> dict:
        """The vLLM-style logprobs the server returns for an ended row."""
        return logprobs

    def logprob_distributions(self, probs: Any, row: Row) -> Any:
        """The processed target distributions [tokens, V] the returned logprobs are read from:
        one per output position, each at its own prefix."""
        return probs

    def request_seed(self, seed: int | None) -> int | None:
        """The seed a request's generator gets from the request's `seed` (None: fresh entropy)."""
        return seed

    def returned_tokens(self, tokens: list[int], kept: int) -> list[int]:
        """The token ids returned for an output whose first `kept` tokens end at a stop string
        (its text is cut there either way)."""
        return tokens[:kept]


@dataclass
class Row:
    """One request in the batch: its decoding (a VanillaDecoding or SpeculativeDecoding), the
    request's own fields a policy may read, and how it ended."""

    decoding: Any
    request: dict = field(default_factory=dict)
    ended: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    batch_sizes: list[int] = field(default_factory=list)  # rows in each round it stepped in


class Batcher:
    """The batch of one server (see the module docstring). `run(row)` blocks until the row ended
    and returns it; `close()` stops the scheduler (rows still waiting get an error)."""

    def __init__(self, *, k: int, max_batch: int, lock: threading.Lock, policy: BatchPolicy | None = None, name: str = "batcher") -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.k, self.max_batch, self.lock = k, max_batch, lock
        self.policy = policy or BatchPolicy()
        self._waiting: deque[Row] = deque()
        self._active: list[Row] = []
        self._wake = threading.Condition()
        self._closed = False
        self.rounds = 0
        self.largest_batch = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def run(self, row: Row) -> Row:
        with self._wake:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            self._waiting.append(row)
            self._wake.notify()
        row.ended.wait()
        if row.error is not None:
            raise row.error
        return row

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not self._waiting and not self._active:
                    self._wake.wait()
                if self._closed:
                    for row in [*self._waiting, *self._active]:
                        row.error = RuntimeError("the server shut down before the request ended")
                        row.ended.set()
                    return
                while self._waiting and len(self._active) < self.max_batch:  # requests join between rounds
                    self._active.append(self._waiting.popleft())
                rows = list(self._active)
            self._round(rows)

    def _round(self, rows: list[Row]) -> None:
        self.rounds += 1
        self.largest_batch = max(self.largest_batch, len(rows))
        self.policy.before_round(rows)
        for row in rows:
            row.batch_sizes.append(len(rows))
            try:
                with self.lock:  # models are shared by the servers of a process
                    ended = row.decoding.step(self.policy.draft_length(self.k, len(rows)))
            except Exception as err:  # noqa: BLE001 (the request fails, the server keeps serving)
                row.error, ended = err, True
            if ended:
                if row.error is None:
                    self.policy.finished(row)
                with self._wake:
                    self._active.remove(row)
                row.ended.set()


__all__ = ["BatchPolicy", "Batcher", "Row"]
