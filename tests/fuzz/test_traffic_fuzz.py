"""Property-based fuzzing of `specaudit traffic ingest`, in process, with hostile logs: lines of any
JSON shape or bytes, damaged fields of a real line, and compressed files cut, padded or not gzip.

Whatever the input: the exit code is 0 or 2 (never 70, never a traceback), a refusal is one sentence
that names the file, and a refused ingest leaves the store exactly as it was (the requests, the
roll-up and the ingest notes). An accepted one adds each new request once: a second ingest of the
same files adds nothing.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_in_process import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# About 30 s in the normal suite; SPECAUDIT_FUZZ_EXAMPLES=500 for a deeper search before a release.
EXAMPLES = int(os.environ.get("SPECAUDIT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

# Numbers a hostile log holds: too large for SQLite or C, not finite, negative, fractional, or numbers as text.
hostile_numbers = st.sampled_from([0, 1, -1, -200, 0.5, 200.5, 2**53, 2**63, 10**30, 1e30, 1e300, math.inf, -math.inf, math.nan])
hostile_numbers = hostile_numbers | st.integers() | st.floats() | st.sampled_from(["500", "1e3", "", "NaN"])
scalars = st.none() | st.booleans() | hostile_numbers | st.text(max_size=12)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=10
)

# Where a line's fields are: the ones the store reads, and their neighbours.
FIELDS = [
    ("time",),
    ("latency_s",),
    ("ttft_s",),
    ("in_flight",),
    ("status",),
    ("labels",),
    ("labels", "tenant"),
    ("labels", "language"),
    ("request",),
    ("request", "temperature"),
    ("request", "prompt"),
    ("request", "messages"),
    ("response",),
    ("response", "usage"),
    ("response", "usage", "prompt_tokens"),
    ("response", "usage", "completion_tokens"),
    ("response", "timings"),
    ("response", "timings", "draft_n"),
    ("response", "timings", "draft_n_accepted"),
    ("response", "timings", "predicted_n"),
    ("response", "metrics", "speculative_decoding"),
    ("response", "metrics", "speculative_decoding", "num_draft_tokens"),
    ("response", "metrics", "speculative_decoding", "num_accepted_draft_tokens"),
    ("response", "metrics", "speculative_decoding", "acceptance_histogram"),
    ("response", "meta_info", "spec_num_proposed_drafts"),
    ("response", "tokens_predicted"),
]


def good_line(i: int) -> dict:
    return {
        "time": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
        "request": {"prompt": f"request {i}", "temperature": 0.7},
        "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 20}, "timings": {"draft_n": 16, "draft_n_accepted": 12}},
        "latency_s": 0.5,
        "labels": {"tenant": "ab"[i % 2]},
    }


def dumps(value) -> str:
    """JSON as Python writes it: NaN and Infinity where the value holds them (what a careless logger does)."""
    return json.dumps(value, allow_nan=True)


@st.composite
def damaged_lines(draw) -> bytes:
    """One log line: a real line with a field replaced, raw bytes, any JSON value, or a line cut short."""
    how = draw(st.sampled_from(["field", "field", "field", "json", "bytes", "cut"]))
    line = good_line(draw(st.integers(0, 10_000)))
    if how == "field":
        for _ in range(draw(st.integers(1, 3))):
            path = draw(st.sampled_from(FIELDS))
            node = line
            for key in path[:-1]:
                if not isinstance(node.get(key), dict):
                    node[key] = {}
                node = node[key]
            node[path[-1]] = draw(json_values)
        return dumps(line).encode()  # ASCII: a lone surrogate is written as its \\ud800 escape
    if how == "json":
        return dumps(draw(json_values)).encode()
    if how == "bytes":
        return draw(st.binary(max_size=60)).replace(b"\n", b" ")
    text = dumps(line).encode()
    return text[: draw(st.integers(0, len(text) - 1))]


def store_state(db: Path) -> tuple:
    """Everything the store holds, in order: requests, roll-up and the ingest notes."""
    with sqlite3.connect(db) as conn:
        return tuple(
            tuple(conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3").fetchall())
            for table in ("traffic_requests", "traffic_rollup", "traffic_ingests")
        )


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory) -> Path:
    """A store with 30 requests already in it: a refused ingest must leave them as they are."""
    folder = tmp_path_factory.mktemp("seed")
    (folder / "seed.jsonl").write_text("".join(json.dumps(good_line(10_000 + i)) + "\n" for i in range(30)))
    code, err = run_cli("traffic", "ingest", folder / "seed.jsonl", "--store", folder / "t.db")
    assert code == 0, err
    return folder / "t.db"


def ingest_and_check(folder: Path, seeded: Path, files: list[Path], flags: list[str]) -> None:
    db = folder / "t.db"
    shutil.copy(seeded, db)
    before = store_state(db)
    argv = ("traffic", "ingest", *files, "--store", db, *flags)
    code, err = run_cli(*argv)
    assert code in (0, 2), f"exit {code}: {err[-800:]}"
    assert "Traceback" not in err and "internal error" not in err, err[-800:]
    if code == 2:
        assert err.count("\n") == 1 and "nothing of this ingest was stored" in err, err
        assert any(f.name in err for f in files), err
        assert store_state(db) == before  # nothing stored, nothing lost
    else:
        requests, rollup, _ = store_state(db)
        assert requests[: len(before[0])] == before[0]  # what was there is still there
        assert run_cli(*argv)[0] == 0  # again: every request is already there, nothing doubles
        assert store_state(db)[:2] == (requests, rollup)


@FUZZ
@given(
    lines=st.lists(damaged_lines(), min_size=1, max_size=4),
    good=st.integers(0, 3),
    torn=st.booleans(),
    keep_text=st.booleans(),
)
def test_ingest_of_damaged_log_lines(tmp_path_factory, seeded_store, lines, good, torn, keep_text):
    folder = tmp_path_factory.mktemp("lines")
    body = [json.dumps(good_line(i)).encode() for i in range(good)] + lines
    log = folder / "log.jsonl"
    log.write_bytes(b"\n".join(body) + (b"" if torn else b"\n"))  # torn: the last line without its newline
    ingest_and_check(folder, seeded_store, [log], ["--keep-text", "--detect-language"] if keep_text else [])
    shutil.rmtree(folder)


@FUZZ
@given(data=st.data())
def test_ingest_of_damaged_compressed_files(tmp_path_factory, seeded_store, data):
    folder = tmp_path_factory.mktemp("gz")
    text = "".join(json.dumps(good_line(i)) + "\n" for i in range(data.draw(st.integers(0, 40), label="lines"))).encode()
    whole = gzip.compress(text)
    how = data.draw(st.sampled_from(["cut", "flip", "pad", "plain", "bytes", "twice", "whole"]), label="how")
    if how == "cut":
        damaged = whole[: data.draw(st.integers(0, max(0, len(whole) - 1)), label="at")]
    elif how == "flip":
        at = data.draw(st.integers(0, len(whole) - 1), label="at")
        damaged = whole[:at] + bytes([whole[at] ^ data.draw(st.integers(1, 255), label="xor")]) + whole[at + 1 :]
    elif how == "pad":
        damaged = whole + data.draw(st.binary(min_size=1, max_size=20), label="tail")
    elif how == "plain":
        damaged = text
    elif how == "bytes":
        damaged = data.draw(st.binary(max_size=80), label="bytes")
    elif how == "twice":
        damaged = whole + whole  # two gzip members: one stream, each line once
    else:
        damaged = whole
    log = folder / "log.jsonl.gz"
    log.write_bytes(damaged)
    ingest_and_check(folder, seeded_store, [log], [])
    shutil.rmtree(folder)
