"""Engine faults: an engine call that fails is a finding about the engine, not the end of the run.

An executor decodes each plan item through `attempt`: an exception from the engine (a C++ runtime
raising mid-run, a verify function that raises, a server's HTTP 5xx answer, `EngineError`) comes
back as a `FailedItem`, which the run folder's `emit` writes to faults.jsonl as a
`contracts.run.Fault` instead of a record. Bad input (`InputError`) still stops the run with its
sentence: a prompt too long for the model is the user's to fix, not the engine's fault. The run
loop (`execution.base.execute`) does the same for an exception that escapes an executor which
does not use `attempt`: the first plan item it had not answered is recorded as faulted, and the
executor is called again with the items after it.

After `max_consecutive_faults` faults in a row (the run config's; 5 by default) the run stops
with one sentence (`FaultLimitReached`): an engine that fails that often is down, not flaky.
Faulted items are not in records.jsonl, so a resumed run asks the engine again; successful
records are never redone, and faults.jsonl keeps every failure, retried or not.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from specaudit.contracts.run import FAULTS_FILE, Fault, PlanItem
from specaudit.errors import EngineError, InputError

T = TypeVar("T")

DEFAULT_MAX_CONSECUTIVE_FAULTS = 5  # faults in a row that stop a run (RunConfig.max_consecutive_faults)
MESSAGE_CHARACTERS = 2000  # an engine's message is kept whole up to this length


class FaultLimitReached(InputError):
    """The engine failed on `max_consecutive_faults` plan items in a row: the run stops (exit 2),
    everything written is kept, and the same command resumes."""


@dataclass(frozen=True)
class FailedItem:
    """What `attempt` returns for a plan item whose engine call failed: the item, its seed, and the
    engine's error type and own message. `emit` turns it into a Fault line."""

    item: PlanItem
    seed: int | None
    error: str
    message: str

    @property
    def key(self) -> str:
        return self.item.key

    @classmethod
    def of(cls, item: PlanItem, err: BaseException, seed: int | None = None) -> FailedItem:
        message = str(err).strip() or type(err).__name__
        if len(message) > MESSAGE_CHARACTERS:
            message = message[:MESSAGE_CHARACTERS] + " [...]"
        return cls(item, seed, getattr(err, "fault_kind", None) or type(err).__name__, message)


def attempt(item: PlanItem, call: Callable[[], T], seed: int | None = None) -> T | FailedItem:
    """`call()` (one engine call for `item`), or a FailedItem where the engine failed. InputError
    other than EngineError (bad input) and BaseException (Ctrl-C, exit) pass through."""
    try:
        return call()
    except EngineError as err:
        return FailedItem.of(item, err, seed)
    except InputError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure of the engine's own code is a finding about it
        return FailedItem.of(item, err, seed)


def read_faults(run_dir: str | Path) -> list[Fault]:
    """The faults of a run folder, in the order they happened (none without a faults.jsonl). A torn
    last line (a kill mid-write) is dropped with a warning; a bad line elsewhere is an InputError."""
    path = Path(run_dir) / FAULTS_FILE
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    faults = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            payload = json.loads(line)
        except ValueError:
            if all(not rest.strip() for rest in lines[number:]):
                warnings.warn(f"{path}: dropped a torn last line {number} (a write cut short by a kill)", stacklevel=2)
                break
            raise InputError(f"{path}, line {number}: not a valid fault line (corrupted file); remove the line") from None
        faults.append(Fault.from_json(payload, where=f"{path}, line {number}"))
    return faults


class FaultCounter:
    """Consecutive faults in emission order: `fault()` after a fault, `record()` after a record;
    the limit's sentence is raised once, at the fault that reaches it."""

    def __init__(self, limit: int, out_dir: Path) -> None:
        self.limit, self.out_dir = limit, out_dir
        self.in_a_row = 0
        self.total = 0
        self.stopped = False

    def record(self) -> None:
        self.in_a_row = 0

    def fault(self, fault: Fault) -> None:
        self.in_a_row += 1
        self.total += 1
        if self.in_a_row >= self.limit and not self.stopped:
            self.stopped = True
            raise FaultLimitReached(
                f"the {fault.engine} engine failed on {self.in_a_row} plan items in a row (the last: prompt {fault.prompt_id}, "
                f"sample {fault.sample}: {fault.error}: {' '.join(fault.message.split())}); the run stops here with every fault in "
                f"{self.out_dir / FAULTS_FILE} and the finished records kept; fix the engine and run the same command "
                "to resume (faulted items are asked again), or raise --max-consecutive-faults"
            )


__all__ = [
    "DEFAULT_MAX_CONSECUTIVE_FAULTS",
    "FailedItem",
    "FaultCounter",
    "FaultLimitReached",
    "attempt",
    "read_faults",
]
