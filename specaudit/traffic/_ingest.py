"""`specaudit traffic ingest`: request logs into the traffic store, a chunk of lines at a time.

Each chunk becomes one DataFrame (one Python pass over its lines to flatten them, then column
operations for digests, strata and load), is inserted in one transaction, and is dropped: memory
is bounded by the chunk, not the log.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specaudit.errors import InputError
from specaudit.traffic._fields import ROW_FIELDS, request_row
from specaudit.traffic._language import DEFAULT_MIN_CONFIDENCE, UNDETERMINED, detect
from specaudit.traffic._read import CHUNK_LINES, Chunk, log_files, read_chunks
from specaudit.traffic._store import TrafficStore
from specaudit.traffic._strata import add_strata, in_flight_at_arrival

# Labels that declare a request's language (the log's word beats the identifier's guess).
LANGUAGE_LABELS = ("language", "lang")


@dataclass(frozen=True)
class IngestResult:
    files: list[str]
    lines: int
    added: int

    @property
    def duplicates(self) -> int:
        return self.lines - self.added


def chunk_frame(
    chunk: Chunk,
    *,
    column_map: Mapping[str, str] | None = None,
    detect_language: bool = False,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    keep_text: bool = False,
) -> pd.DataFrame:
    """The store's rows for one chunk of log lines."""
    cmap = dict(column_map or {})
    rows = [request_row(obj, f"{chunk.source}:{line}", cmap) for obj, line in zip(chunk.objects, chunk.lines)]
    frame = pd.DataFrame(rows, columns=list(ROW_FIELDS))
    frame["digest"] = [hashlib.blake2b(raw, digest_size=16).hexdigest() for raw in chunk.raw]
    for name in ("prompt_tokens", "output_tokens", "proposed", "accepted", "in_flight"):
        frame[name] = frame[name].astype("Int64")
    declared = [next((labels[k] for k in LANGUAGE_LABELS if k in labels), None) for labels in frame["labels"]]
    if detect_language:
        languages, confidences = detect(frame["text"].tolist(), min_confidence=min_confidence)
    else:
        languages, confidences = [UNDETERMINED] * len(frame), [None] * len(frame)
    frame["language"] = [d if d else guess for d, guess in zip(declared, languages)]
    frame["language_confidence"] = [None if d else c for d, c in zip(declared, confidences)]
    frame["labels"] = [json.dumps(labels, sort_keys=True, ensure_ascii=False) for labels in frame["labels"]]
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
    """Read `paths` (files, folders, '-' for stdin) into `store`; requests already there are skipped by digest."""
    if not 0.0 <= min_confidence <= 1.0:
        raise InputError(f"--min-confidence {min_confidence} is not in [0, 1]")
    files = log_files(paths)
    lines = added = 0
    for chunk in read_chunks(files, chunk_lines=chunk_lines):
        frame = chunk_frame(
            chunk, column_map=column_map, detect_language=detect_language, min_confidence=min_confidence, keep_text=keep_text
        )
        # The same line twice in one chunk (a log copied into two files) counts once.
        frame = frame.drop_duplicates("digest")
        lines += len(chunk.objects)
        added += store.add(frame)
    store.note_ingest(files, lines, added)
    return IngestResult(files, lines, added)
