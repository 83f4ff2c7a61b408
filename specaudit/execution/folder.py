"""A run folder while a run writes it: resume check, lock, manifest, record writer, progress, summary.

    with RunFolder(cfg, out_dir, engines=..., command=...) as folder:   # prompts, lock, resume check
        folder.todo                                                     # plan items not yet recorded
        folder.write_manifest(models=..., device=..., versions=...)
        with folder.writer("decoding", "gen", progress=True) as emit:
            emit(record)                                                # one line, flushed
    folder.summary()

One writer per folder: a lock file holds the writer's host and pid; a second writer is refused
naming them, and the lock of a process that no longer runs (killed) is taken over.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from specaudit._files import check_output_folder, write_json_atomic
from specaudit.contracts.run import (
    FAULTS_FILE,
    MANIFEST_FILE,
    RECORDS_FILE,
    SCHEMA_VERSION,
    SCREEN_ENGINE,
    Fault,
    PlanItem,
    Record,
)
from specaudit.errors import InputError
from specaudit.execution.faults import FailedItem
from specaudit.execution.plan import SEED_DERIVATION, engine_subset, plan_items, shard_prompts
from specaudit.execution.preflight import check_plant_targets

if TYPE_CHECKING:
    from typing import Any

    from specaudit.config import RunConfig
    from specaudit.prompts import PromptSet

LOCK_FILE = ".specaudit.lock"
RESUME_SECTIONS = ("decoding", "prompt_set_checksum", "shard")  # what a resumed run must share with the folder's
MANIFEST_FIELDS = (
    "schema_version",
    "created",
    "command",
    "invocations",
    "config",
    *RESUME_SECTIONS,
    "models",
    "versions",
    "device",
    "seeds",
    "prompt_set",
)  # every executor's; an executor adds its own after them


@dataclass(frozen=True)
class RunSummary:
    out_dir: Path
    records: int  # records in the file after this run
    written: int  # records this invocation added
    skipped: int  # records already present (resumed)
    seconds: float
    faults: int = 0  # engine faults this invocation met (faults.jsonl; execution.faults)


# ----------------------------------------------------------------------------- the lock
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


@contextlib.contextmanager
def folder_lock(folder: str | Path) -> Iterator[Path]:
    """Hold `folder`'s lock file for the duration: one writer per run folder."""
    path = Path(folder) / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text(encoding="utf-8") or "{}")
            except (OSError, ValueError):
                holder = {}
            pid, host = holder.get("pid"), holder.get("host")
            if isinstance(pid, int) and host not in (None, me["host"]):
                raise InputError(
                    f"{folder} is being written by specaudit process {pid} on {host} (lock file {path}); wait for it "
                    "to finish, or delete the lock file if that process is gone"
                ) from None
            if isinstance(pid, int) and _pid_alive(pid):
                raise InputError(
                    f"{folder} is being written by another specaudit process (pid {pid}); wait for it to finish or choose another --out"
                ) from None
            path.unlink(missing_ok=True)  # its holder is gone (killed): take the lock over
            continue
        except OSError as err:
            raise InputError(f"cannot write into {folder}: {err.strerror or err}") from None
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(me, handle)
        break
    else:
        raise InputError(f"{folder}: another process took the lock {path} at the same moment; run again")
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            holder = json.loads(path.read_text(encoding="utf-8") or "{}")
            if holder.get("pid") == me["pid"]:
                path.unlink()


# ----------------------------------------------------------------------------- the folder
def _check_resumable(out_dir: Path, previous: dict, current: dict) -> None:
    """A run folder resumes only with the settings that made its records."""
    for section in RESUME_SECTIONS:
        old, new = previous.get(section), current.get(section)
        if old != new:
            if isinstance(old, dict) and isinstance(new, dict):
                detail = "; ".join(
                    f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
                )
            else:
                detail = f"{section}: {old!r} -> {new!r}"
            raise InputError(f"{out_dir} holds a run with other settings ({detail}); resume with the same settings or choose a new --out")


def load_run_prompts(cfg: RunConfig, prompt_set: PromptSet | None = None) -> PromptSet:
    """The run's prompt set (loaded from cfg unless given); a selection of none is an InputError."""
    from specaudit.prompts import load_prompts

    if prompt_set is None:
        prompt_set = load_prompts(
            cfg.prompts, column_map=cfg.column_map, dimensions=cfg.dimensions, per_group=cfg.per_group, seed=cfg.sample_seed
        )
    if not prompt_set.prompts:
        raise InputError(f"prompt set {cfg.prompts!r} selected no prompts (check --dimensions / --per-group)")
    check_plant_targets(cfg.plant_disparity, prompt_set)
    return prompt_set


class RunFolder:
    """The run folder of one invocation (see the module docstring). Entering it loads the prompts
    (bad input fails before any model loads or server is called), checks the output path, takes the
    lock, refuses a folder made with other settings, mends a torn last line and works out the plan
    and what is left of it. Leaving it closes the writer and releases the lock; a folder this
    invocation created and left empty is removed."""

    def __init__(
        self,
        cfg: RunConfig,
        out_dir: str | Path,
        *,
        prompt_set: PromptSet | None = None,
        shard: tuple[int, int] | None = None,
        engines: Sequence[str] | None = None,
        command: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self.shard = shard
        self.command = command
        self._prompt_set, self._engines = prompt_set, engines
        self.manifest: dict = {}
        self.written = 0
        self._started = time.perf_counter()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> RunFolder:
        from specaudit.execution.records import load_records, read_manifest

        self.prompt_set = load_run_prompts(self.cfg, self._prompt_set)
        created = not self.out_dir.exists()
        check_output_folder(self.out_dir)
        if created:
            self._stack.callback(self._remove_if_empty)
        try:
            self._stack.enter_context(folder_lock(self.out_dir))
            self.identity = {
                "decoding": self.cfg.decoding_identity(),
                "prompt_set_checksum": self.prompt_set.checksum,
                "shard": list(self.shard) if self.shard else None,
            }
            self.previous = read_manifest(self.out_dir) if (self.out_dir / MANIFEST_FILE).is_file() else {}
            if self.previous:
                _check_resumable(self.out_dir, self.previous, self.identity)
            self.existing = load_records(self.out_dir / RECORDS_FILE, repair=True)  # a torn last line is cut off here
            self.done = {record.key for record in self.existing}
            engines = tuple(self._engines or self.cfg.engines)
            subset = engine_subset(self.prompt_set, self.cfg) if SCREEN_ENGINE in engines and len(engines) > 1 else None
            self.plan: list[PlanItem] = plan_items(shard_prompts(self.prompt_set.prompts, self.shard), self.cfg, engines, subset)
            self.todo: list[PlanItem] = [item for item in self.plan if item.key not in self.done]
        except BaseException:
            self._stack.close()
            raise
        return self

    def require_backend(self, backend: str, name: str) -> None:
        """Refuse a folder whose earlier run was made by another backend or by the local engines:
        `name`'s records would be mixed with its records under the same keys."""
        made = self.previous.get("backend") if self.previous else backend
        if made != backend:
            made_by = f"by backend {made!r}" if made else "with local engines"
            raise InputError(
                f"{self.out_dir} holds a run made {made_by}; {name} records would be mixed with them under the same keys; choose a new --out"
            )

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _remove_if_empty(self) -> None:
        with contextlib.suppress(OSError):
            self.out_dir.rmdir()  # only succeeds when nothing was written

    # -- manifest.json
    def write_manifest(self, *, models: dict, device: dict | None, versions: dict | None, **extras: Any) -> dict:
        """manifest.json: the fields every executor writes, then its own `extras`; kept as
        `self.manifest`, which an executor may update and write again with save_manifest()."""
        previous = self.previous
        self.manifest = {
            "schema_version": SCHEMA_VERSION,
            "created": previous.get("created") or datetime.now(UTC).isoformat(timespec="seconds"),
            "command": previous.get("command") or self.command or " ".join(sys.argv),
            "invocations": previous.get("invocations", 0) + 1,
            "config": self.cfg.to_dict(),
            **self.identity,
            "models": models,
            "versions": versions,
            "device": device,
            "seeds": {"run": self.cfg.seed, "derivation": SEED_DERIVATION},
            "prompt_set": self.prompt_set.manifest_entry(),
            **extras,
        }
        self.save_manifest()
        return self.manifest

    def save_manifest(self) -> None:
        write_json_atomic(self.out_dir / MANIFEST_FILE, self.manifest)

    def carry_manifest_over(self) -> None:
        """Nothing left to run: count the invocation, keeping the models, device and executor
        fields of the run that wrote the records (no model loads, no server is called)."""
        previous = self.previous
        extras = {k: v for k, v in previous.items() if k not in MANIFEST_FIELDS}
        self.write_manifest(models=previous.get("models"), device=previous.get("device"), versions=previous.get("versions"), **extras)

    # -- records.jsonl
    @contextlib.contextmanager
    def writer(self, label: str = "decoding", unit: str = "gen", progress: bool = True) -> Iterator[Callable[[Record | FailedItem], None]]:
        """`emit(record)`: append one record (flushed) and advance the progress bar. A key already
        in the file is never written twice (a re-run shard may decode an item again). A FailedItem
        (execution.faults) is appended to faults.jsonl instead; the item stays unrecorded, and the
        run config's max_consecutive_faults in a row stop the run (FaultLimitReached)."""
        from tqdm.auto import tqdm

        from specaudit.execution.faults import FaultCounter
        from specaudit.execution.records import RecordWriter

        self.faults = FaultCounter(self.cfg.max_consecutive_faults, self.out_dir)
        self.failed: set[str] = set()  # keys that faulted in this invocation
        with (
            RecordWriter(self.out_dir / RECORDS_FILE) as writer,
            contextlib.ExitStack() as faults_file,
            tqdm(
                total=len(self.plan), initial=len(self.plan) - len(self.todo), desc=label, unit=unit, disable=not progress, file=sys.stderr
            ) as bar,
        ):
            fault_writer: list[RecordWriter] = []  # opened at the first fault: a run without faults has no faults.jsonl

            def emit(record: Record | FailedItem) -> None:
                if record.key in self.done:
                    return
                if isinstance(record, FailedItem):
                    if not fault_writer:
                        fault_writer.append(faults_file.enter_context(RecordWriter(self.out_dir / FAULTS_FILE)))
                    fault = self._fault(record)
                    fault_writer[0].write(fault.to_json())
                    self.failed.add(record.key)
                    bar.update(1)
                    self.faults.fault(fault)
                    return
                writer.write(record)
                self.done.add(record.key)
                self.written += 1
                self.faults.record()
                bar.update(1)

            yield emit

    def _fault(self, failed: FailedItem) -> Fault:
        item = failed.item
        return Fault(
            key=item.key,
            prompt_id=item.prompt.id,
            engine=item.engine,
            sample=item.sample,
            seed=failed.seed,
            timing_only=item.timing_only,
            error=failed.error,
            message=failed.message,
            records_before=len(self.existing) + self.written,
            invocation=int(self.manifest.get("invocations") or (self.previous.get("invocations") or 0) + 1),
            at=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    def summary(self) -> RunSummary:
        return RunSummary(
            self.out_dir,
            len(self.existing) + self.written,
            self.written,
            len(self.plan) - len(self.todo),
            time.perf_counter() - self._started,
            getattr(getattr(self, "faults", None), "total", 0),
        )
