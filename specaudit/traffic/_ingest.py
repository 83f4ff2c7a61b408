"""`specaudit traffic ingest`: request logs into the traffic store, a chunk of lines at a time.

Each chunk becomes one DataFrame (pyarrow's JSON reader over the whole chunk when every line has
the common shape, `_columnar.py`; else one Python pass over its lines; then column operations for
digests, strata and load), is inserted with its roll-up sums, and is dropped. A second thread
parses the next chunk while one is inserted: memory is bounded by three chunks, not the log.
The whole ingest is one transaction: a bad line anywhere in any file stores nothing (the message
names the file and line), and a second ingest of the same logs adds nothing (digests).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd

from specaudit.errors import InputError
from specaudit.traffic._columnar import columnar_rows
from specaudit.traffic._fields import ROW_FIELDS, canonical_labels, request_row
from specaudit.traffic._language import DEFAULT_MIN_CONFIDENCE, UNDETERMINED, detect
from specaudit.traffic._read import CHUNK_LINES, Chunk, log_files, read_chunks
from specaudit.traffic._store import TrafficStore
from specaudit.traffic._strata import add_strata, in_flight_at_arrival

T = TypeVar("T")


@dataclass(frozen=True)
class IngestResult:
    files: list[str]
    lines: int
    added: int

    @property
    def duplicates(self) -> int:
        return self.lines - self.added


def per_line_rows(chunk: Chunk, column_map: Mapping[str, str]) -> pd.DataFrame:
    """The chunk's rows one line at a time (any shape, a column map, the prompt's text): what
    `columnar_rows` makes for the common shape."""
    rows = [request_row(obj, f"{chunk.source}:{line}", column_map) for obj, line in zip(chunk.objects, chunk.lines)]
    frame = pd.DataFrame(rows, columns=list(ROW_FIELDS))
    stored, declared = zip(*(canonical_labels(labels) for labels in frame["labels"])) if rows else ((), ())
    frame["labels"] = list(stored)
    frame["declared_language"] = list(declared)
    for name in ("prompt_tokens", "output_tokens", "proposed", "accepted", "in_flight"):
        frame[name] = frame[name].astype("Int64")
    return frame


def chunk_frame(
    chunk: Chunk,
    *,
    column_map: Mapping[str, str] | None = None,
    detect_language: bool = False,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    keep_text: bool = False,
) -> pd.DataFrame:
    """The store's rows for one chunk of log lines: columnar when every line has the common shape
    and no prompt text is needed, else line by line."""
    cmap = dict(column_map or {})
    frame = None
    if not cmap and not detect_language and not keep_text and chunk.parsed is None:
        frame = columnar_rows(chunk)
    if frame is None:
        frame = per_line_rows(chunk, cmap)
    frame["digest"] = [hashlib.blake2b(raw, digest_size=16).hexdigest() for raw in chunk.raw]
    declared = frame.pop("declared_language").tolist()
    if detect_language:
        languages, confidences = detect(frame["text"].tolist(), min_confidence=min_confidence)
    else:
        languages, confidences = [UNDETERMINED] * len(frame), [None] * len(frame)
    declared = [d if isinstance(d, str) and d else None for d in declared]  # a str column holds NaN for None
    frame["language"] = [d if d else guess for d, guess in zip(declared, languages)]
    frame["language_confidence"] = [None if d else c for d, c in zip(declared, confidences)]
    if not keep_text:
        frame["text"] = None
    missing = frame["in_flight"].isna().to_numpy()
    if missing.any():
        # Requests in flight at arrival, from the chunk's own arrival and latency (logs are in time order).
        load = in_flight_at_arrival(frame["time"].to_numpy(dtype=float), frame["latency_s"].to_numpy(dtype=float))
        frame.loc[missing, "in_flight"] = load[missing]
    frame["in_flight"] = frame["in_flight"].astype(np.int64)
    return add_strata(frame)


def ingest(
    store: TrafficStore,
    paths: Sequence[str],
    *,
    column_map: Mapping[str, str] | None = None,
    detect_language: bool = False,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    keep_text: bool = False,
    chunk_lines: int = CHUNK_LINES,
) -> IngestResult:
    """Read `paths` (files, folders, '-' for stdin) into `store`, all or nothing; requests already there are skipped by digest."""
    if not 0.0 <= min_confidence <= 1.0:
        raise InputError(f"--min-confidence {min_confidence} is not in [0, 1]")
    files = log_files(paths)
    lines = added = 0

    def frames() -> Iterator[tuple[int, pd.DataFrame]]:
        for chunk in read_chunks(files, chunk_lines=chunk_lines):
            frame = chunk_frame(
                chunk, column_map=column_map, detect_language=detect_language, min_confidence=min_confidence, keep_text=keep_text
            )
            # The same line twice in one chunk (a log copied into two files) counts once.
            yield len(chunk.raw), frame.drop_duplicates("digest")

    with store.ingesting() as transaction:
        for count, frame in _ahead(frames()):
            lines += count
            added += transaction.add(frame)
        transaction.note(files, lines, added)
    return IngestResult(files, lines, added)


def _ahead(items: Iterator[T]) -> Iterator[T]:
    """`items`, made one ahead in a second thread: the next chunk is parsed while this one is inserted
    (pyarrow and SQLite release the GIL). Memory: at most three chunks. An error there is raised here."""
    done = object()
    slot: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: object) -> bool:
        """Put `item` in the slot unless the consumer has stopped; False once it has."""
        while not stop.is_set():
            try:
                slot.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def make() -> None:
        try:
            for item in items:
                if not hand_over(item):
                    return
            hand_over(done)
        except BaseException as err:  # noqa: BLE001 (handed to the consumer, which raises it)
            hand_over(err)

    worker = threading.Thread(target=make, name="traffic-ingest-reader", daemon=True)
    worker.start()
    try:
        while (item := slot.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()
