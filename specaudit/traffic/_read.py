"""Reading request logs: files, folders and stdin, in chunks of lines, each line with its file and number.

A log that a server (or `specaudit proxy`) is still writing may end in a line cut short: the last
line of a file without its newline is left for the next ingest, not reported. Any other line that
is not one JSON object of UTF-8 text is an InputError naming the file and line; so is NaN or
Infinity (Python writes them, JSON has no such numbers) and a `.gz` file that is not gzip or is cut
short (a compressed file is complete or it is damaged: no line of it is taken).
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specaudit.errors import InputError
from specaudit.traffic._fields import json_type

STDIN = "-"
LOG_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".log", ".parquet")
# Lines per chunk: what ingest holds in memory at once (a few tens of MB of log).
CHUNK_LINES = 50_000


@dataclass
class Chunk:
    """Log lines of one file: their raw bytes (for the digest and the columnar parser) and line numbers.
    `objects` parses them one by one (the per-line path), naming the file and line of a bad one."""

    source: str
    raw: list[bytes]
    lines: list[int]
    parsed: list[dict[str, Any]] | None = None  # Parquet rows come parsed

    @property
    def objects(self) -> list[dict[str, Any]]:
        if self.parsed is None:
            self.parsed = [_parse(raw, self.source, line) for raw, line in zip(self.raw, self.lines)]
        return self.parsed


def log_files(paths: Sequence[str]) -> list[str]:
    """The files to read: each path itself, a folder's log files (sorted, recursively), or '-' for stdin."""
    files: list[str] = []
    for name in paths:
        if name == STDIN:
            files.append(STDIN)
            continue
        path = Path(name)
        if path.is_dir():
            found = sorted(str(p) for p in path.rglob("*") if p.is_file() and p.name.endswith(LOG_SUFFIXES))
            if not found:
                raise InputError(f"{path} is a folder with no log files ({', '.join(LOG_SUFFIXES)})")
            files.extend(found)
        elif path.is_file():
            files.append(str(path))
        else:
            raise InputError(f"{path}: no such file or folder")
    return files


class _NotJsonNumber(ValueError):
    pass


def _not_json_number(name: str) -> None:
    raise _NotJsonNumber(name)


def _parse(raw: bytes, source: str, line: int) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{source}:{line} is not UTF-8 text (byte {err.start + 1} is {raw[err.start : err.start + 1]!r})") from None
    try:
        obj = json.loads(text.removeprefix("\ufeff"), parse_constant=_not_json_number)  # a BOM some editors write
    except _NotJsonNumber as err:
        raise InputError(f"{source}:{line} holds {err}, which is not a JSON number (write null for a missing value)") from None
    except ValueError as err:
        raise InputError(f"{source}:{line} is not a JSON object ({err.__class__.__name__}: {str(err)[:80]})") from None
    except RecursionError:
        raise InputError(f"{source}:{line} is JSON nested too deeply to be a request log line") from None
    if not isinstance(obj, dict):
        raise InputError(f"{source}:{line} is a JSON {json_type(obj)}, not an object (one request per line)")
    return obj


def _jsonl_chunks(handle: Any, source: str, chunk_lines: int) -> Iterator[Chunk]:
    """Chunks of the non-empty lines, unparsed; a last line without its newline only if it is whole JSON."""
    chunk = Chunk(source, [], [])
    for number, line in enumerate(handle, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if not line.endswith(b"\n"):
            # The last line of a file being written: take it only if it is whole.
            try:
                _parse(stripped, source, number)
            except InputError:
                break
        chunk.raw.append(stripped)
        chunk.lines.append(number)
        if len(chunk.raw) >= chunk_lines:
            yield chunk
            chunk = Chunk(source, [], [])
    if chunk.raw:
        yield chunk


def _parquet_chunks(path: str, chunk_lines: int) -> Iterator[Chunk]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow comes with datasets
        raise InputError(f"{path}: reading Parquet needs pyarrow; pip install pyarrow") from None
    try:
        table = pq.ParquetFile(path)
    except Exception as err:  # noqa: BLE001 (any pyarrow failure is a bad file)
        raise InputError(f"{path} is not a readable Parquet file ({str(err)[:80]})") from None
    row = 0
    for batch in table.iter_batches(batch_size=chunk_lines):
        objects = batch.to_pylist()
        raw = [json.dumps(obj, sort_keys=True, default=str).encode() for obj in objects]
        lines = list(range(row + 1, row + 1 + len(objects)))
        row += len(objects)
        yield Chunk(path, raw, lines, objects)


def read_chunks(files: Sequence[str], *, chunk_lines: int = CHUNK_LINES) -> Iterator[Chunk]:
    """Chunks of parsed lines from each file in turn (stdin for '-'; .gz read as gzip; .parquet rows)."""
    for source in files:
        if source == STDIN:
            yield from _jsonl_chunks(sys.stdin.buffer, "<stdin>", chunk_lines)
        elif source.endswith(".parquet"):
            yield from _parquet_chunks(source, chunk_lines)
        else:
            yield from _file_chunks(source, chunk_lines)


def _file_chunks(path: str, chunk_lines: int) -> Iterator[Chunk]:
    if not path.endswith(".gz"):
        with open(path, "rb") as handle:
            yield from _jsonl_chunks(handle, path, chunk_lines)
        return
    try:
        with gzip.open(path, "rb") as handle:
            yield from _jsonl_chunks(handle, path, chunk_lines)
    except EOFError:
        raise InputError(f"{path} is cut short: its gzip stream ends before the end marker (a damaged or unfinished copy)") from None
    except (gzip.BadGzipFile, zlib.error) as err:
        raise InputError(f"{path} is not a readable gzip file ({str(err)[:80]}); name plain JSONL logs without .gz") from None
