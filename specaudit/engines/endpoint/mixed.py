"""Mixed traffic (`--mix-sampling SETTING`, `endpoint.mix_sampling`): while the plan runs, each server
also answers requests at another sampling setting, `mix_in_flight` at a time, that are not recorded.

A server batches whatever is in flight, so its batches then mix the audited requests with requests
sampled differently, as production traffic does. A server that applies one request's sampling
settings to another's rows in a batch (a per-request parameter expanded to the wrong positions, a
batch-wide "all greedy" shortcut) fails the audit of the recorded requests, which are judged as
always against the target at their own setting; their timing includes the load, on both servers
alike. The background requests use the plan's prompts in turn, with seeds of their own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from specaudit.errors import InputError

# A background request: (server engine name, its index) -> None; raises on a failed answer.
Send = Callable[[str, int], None]


@dataclass
class MixedTraffic:
    """Background requests on each server until `stop()`: `in_flight` threads a server, each sending
    one request after another. Counts what was answered and what failed, per server."""

    engines: tuple[str, ...]
    in_flight: int
    send: Send
    answered: dict[str, int] = field(init=False)
    failed: dict[str, int] = field(init=False)
    last_error: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self.answered = dict.fromkeys(self.engines, 0)
        self.failed = dict.fromkeys(self.engines, 0)
        self._threads = [
            threading.Thread(target=self._loop, args=(engine,), name=f"mixed-{engine}-{i}", daemon=True)
            for engine in self.engines
            for i in range(self.in_flight)
        ]

    def _loop(self, engine: str) -> None:
        while not self._stop.is_set():
            with self._lock:
                index, self._next = self._next, self._next + 1
            try:
                self.send(engine, index)
            except (InputError, OSError) as err:  # a background answer decides nothing: counted, and the run goes on
                with self._lock:
                    self.failed[engine] += 1
                    self.last_error = str(err)
                self._stop.wait(1.0)  # a server that refuses them is not hammered
                continue
            with self._lock:
                self.answered[engine] += 1

    def start(self) -> MixedTraffic:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> dict:
        """Stop sending; wait for the requests in flight; what was sent, for the manifest."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        return {
            "answered": dict(self.answered),
            "failed": dict(self.failed),
            **({"last_error": self.last_error} if self.last_error else {}),
        }


def mixed_load(settings: dict) -> str:
    """The run's load in the report's words (the manifest's device entry)."""
    return (
        f"mixed traffic: requests at {settings['mix_sampling']} kept in flight on each server beside the audited ones "
        f"({settings['mix_in_flight']} a server), not recorded; the servers' batches mixed the two settings"
    )
