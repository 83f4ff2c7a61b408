"""records.jsonl and manifest.json: reading and writing the run's output contract
(specaudit.contracts.run; docs/ARCHITECTURE.md, "Contracts").

records.jsonl holds one JSON object per (prompt, engine, sample), appended and flushed one line
at a time, so a killed run loses at most the line it was writing. Reading drops a torn last line
with a warning; `repair=True` also cuts it off the file so that appending can resume cleanly.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from specaudit._files import write_json_atomic
from specaudit.contracts.run import (
    MANIFEST_FILE,
    RECORDS_FILE,
    SCHEMA_VERSION,
    Record,
    record_key,
)
from specaudit.errors import InputError

__all__ = [
    "MANIFEST_FILE",
    "RECORDS_FILE",
    "SCHEMA_VERSION",
    "Record",
    "RecordWriter",
    "iter_run_records",
    "load_records",
    "read_manifest",
    "read_records",
    "record_key",
    "write_json_atomic",
]


def read_records(path: str | Path, *, repair: bool = False) -> list[dict]:
    """All complete records of a records.jsonl file, in file order, as the JSON objects of the
    file (each checked by Record.from_json: a field of the wrong type is an InputError naming the
    file, line and field). See load_records for the typed form."""
    return [record.to_json() for record in load_records(path, repair=repair)]


def load_records(path: str | Path, *, repair: bool = False) -> list[Record]:
    """All complete records of a records.jsonl file, in file order.

    A last line without its newline or that does not parse is a write cut short by a kill: it is
    dropped with a warning (and removed from the file when `repair`). A bad line anywhere else is
    corruption, reported with its line number.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    records: list[Record] = []
    good_bytes = 0
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        is_last = number == len(lines)
        if not raw.strip():
            if not is_last:
                good_bytes += len(raw) + 1
            continue
        try:
            payload = json.loads(raw)
            if not isinstance(payload, dict) or "key" not in payload:
                raise ValueError("not a record object")
        except ValueError:
            torn = is_last or all(not rest.strip() for rest in lines[number:])
            if not torn:
                raise InputError(
                    f"{path}, line {number}: not a valid record (corrupted file); remove the line or start a new --out"
                ) from None
            warnings.warn(f"{path}: dropped a torn last line {number} (a write cut short by a kill)", stacklevel=3)
            break
        record = Record.from_json(payload, where=f"{path}, line {number}")
        if is_last:  # parsed but never got its newline: complete data, so keep it and mend the file
            records.append(record)
            good_bytes += len(raw)
            if repair:
                with open(path, "ab") as handle:
                    handle.write(b"\n")
                good_bytes += 1
            break
        records.append(record)
        good_bytes += len(raw) + 1
    if repair and good_bytes < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(good_bytes)
    return records


class RecordWriter:
    """Appends records one line at a time, flushed, so every finished record survives a kill."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")

    def write(self, record: Record | dict) -> None:
        payload = record.to_json() if isinstance(record, Record) else record
        self._handle.write(json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_manifest(run_dir: str | Path) -> dict:
    path = Path(run_dir) / MANIFEST_FILE
    if not path.is_file():
        raise InputError(f"{run_dir} has no {MANIFEST_FILE}; is it a specaudit run folder (made by `specaudit run`)?")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise InputError(f"{path} is not valid JSON; the run folder is damaged") from None


def iter_run_records(run_dir: str | Path, *, include_timing: bool = True) -> Iterator[dict]:
    for record in read_records(Path(run_dir) / RECORDS_FILE):
        if include_timing or not record.get("timing_only"):
            yield record
