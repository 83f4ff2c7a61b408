"""The executor interface and the one run loop every executor goes through.

An executor only turns plan items into records; the run loop (`execute`) does the rest, the
same way for all: the run folder (prompts, lock, resume check), the manifest, the record writer
and progress bar, the summary. To add one (a batched screen, llama.cpp, ...), subclass
`Executor`, fill in `start` and `execute`, and name it in the registry, specaudit.contracts.engines:

    class MyExecutor(Executor):
        label = "decoding (mine)"
        def start(self, folder):            # load models / connect; nothing is timed yet
            return {"models": {...}, "device": {...}, "versions": {...}}   # + any manifest extras
        def execute(self, folder, items, emit):
            for item in items:              # PlanItem: prompt, engine, sample, timing_only
                emit(record_of(item))       # a contracts.run.Record; written and flushed at once

`emit` may be called in any order, but records are easiest to compare in plan order. A record's
seed must be execution.plan.derive_seed(cfg.seed, prompt id, sample), so that a resumed or
sharded run gives the same records.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specaudit.contracts.engines import backend_of
from specaudit.contracts.run import PlanItem, Record
from specaudit.errors import InputError
from specaudit.execution.folder import RunFolder, RunSummary

if TYPE_CHECKING:
    from specaudit.config import RunConfig
    from specaudit.execution.faults import FailedItem
    from specaudit.prompts import PromptSet

Emit = Callable[["Record | FailedItem"], None]


class Executor:
    """Turns plan items into records. Subclasses set `label` / `unit` (the progress bar's) and
    implement `start` and `execute`; `check`, `record_engines` and `close` have defaults."""

    label = "decoding"
    unit = "gen"

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg

    def record_engines(self) -> tuple[str, ...]:
        """The engine names of the records this executor writes (plan order follows them): a
        backend's from the registry (it records the control and the speculative engine itself),
        else the engines the config names."""
        backend = backend_of(self.cfg.engines)
        return backend.records if backend else tuple(self.cfg.engines)

    def check(self, folder: RunFolder) -> None:
        """Refuse settings or a folder this executor cannot honour, before anything loads."""

    def start(self, folder: RunFolder) -> dict:
        """Load models or connect (only called when there is something to run). Returns the
        manifest's `models`, `device` and `versions`, plus any fields of the executor's own."""
        raise NotImplementedError

    def execute(self, folder: RunFolder, items: list[PlanItem], emit: Emit) -> None:
        """Decode `items` (the plan's unrecorded items, in plan order), passing each record to `emit`."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what `start` took (actors, engines, connections); always called after start."""


def execute(
    executor: Executor,
    out_dir: str | Path,
    *,
    prompt_set: PromptSet | None = None,
    progress: bool = True,
    command: str | None = None,
    shard: tuple[int, int] | None = None,
) -> RunSummary:
    """The run loop: `executor`'s plan into `out_dir`, skipping records already there."""
    with RunFolder(executor.cfg, out_dir, prompt_set=prompt_set, shard=shard, engines=executor.record_engines(), command=command) as folder:
        executor.check(folder)
        if not folder.todo and folder.previous.get("models"):  # all recorded already: nothing needs to load
            folder.carry_manifest_over()
            return folder.summary()
        try:
            folder.write_manifest(**executor.start(folder))
            with folder.writer(executor.label, executor.unit, progress) as emit:
                _execute_through_faults(executor, folder, emit)
        finally:
            executor.close()
    return folder.summary()


def _execute_through_faults(executor: Executor, folder: RunFolder, emit: Emit) -> None:
    """`executor.execute` over the items left; an exception that escapes it (an engine that raised
    where the executor does not catch it with execution.faults.attempt) is recorded as the fault of
    the first item it had not answered, and the executor is called again with the items after that
    one. Bad input (InputError, the fault limit among them) and Ctrl-C stop the run as before."""
    from specaudit.execution.faults import FailedItem
    from specaudit.execution.plan import derive_seed

    items = list(folder.todo)
    while items:
        try:
            executor.execute(folder, items, emit)
            return
        except InputError:
            raise
        except Exception as err:  # noqa: BLE001 - the engine's failure is a finding (execution.faults)
            answered = folder.done | folder.failed
            pending = [item for item in items if item.key not in answered]
            if not pending:
                raise  # every item was answered: the failure is not an engine call's
            first = pending[0]
            emit(FailedItem.of(first, err, derive_seed(executor.cfg.seed, first.prompt.id, first.sample)))
            items = pending[1:]
