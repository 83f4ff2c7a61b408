"""The two fast paths of `traffic` give what the plain ones give: pyarrow's columnar parse of a chunk
(the same rows as the per-line parse, or it hands the chunk over), and the roll-up table (the same
sums, counts and baseline cut as the per-request rows)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specaudit.errors import InputError
from specaudit.traffic import evaluate, ingest, open_traffic_store
from specaudit.traffic._columnar import columnar_rows
from specaudit.traffic._ingest import per_line_rows
from specaudit.traffic._read import Chunk
from specaudit.traffic._rollup import ROW_COLUMNS, STRATA, SUM_COLUMNS, rollup_sums
from specaudit.traffic._store import Group
from specaudit.traffic.simulate import TrafficModel, simulate, write_log


def chunk_of(lines: list) -> Chunk:
    raw = [x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)).encode() for x in lines]
    return Chunk("log.jsonl", raw, list(range(1, len(raw) + 1)))


def base(**over) -> dict:
    line = {
        "time": "2026-01-01T00:00:00.250Z",
        "request": {"prompt": "hi", "temperature": 0.7},
        "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 20}, "timings": {"draft_n": 16, "draft_n_accepted": 12}},
        "latency_s": 0.5,
        "labels": {"tenant": "a", "language": "fr"},
    }
    line.update(over)
    return line


# Shapes the columnar path takes: it must give exactly the per-line rows.
COMMON = [
    base(),
    base(time="2026-01-01T01:00:00+02:00", labels={"tenant": "b", "n": 3, "flag": True}),
    base(response={"timings": {"draft_n": 8, "prompt_n": 4, "predicted_n": 9}}),  # no draft_n_accepted: 0 kept
    base(
        response={
            "usage": {"completion_tokens": 5},
            "metrics": {"speculative_decoding": {"num_draft_tokens": 6, "num_accepted_draft_tokens": 2}},
        }
    ),
    base(
        response={
            "metrics": {"speculative_decoding": {"num_draft_tokens": 6, "num_accepted_draft_tokens": 2, "num_spec_steps": 2}},
            "tokens_evaluated": 3,
            "tokens_predicted": 7,
        }
    ),
    base(response={"usage": {"prompt_tokens": 1, "completion_tokens": 2}}, request={}, status=503, ttft_s=0.1, in_flight=4),
    base(labels={"route": 'chat "v2" {x}'}, request={"temperature": None, "messages": [{"role": "user", "content": "x"}]}),
    {k: v for k, v in base().items() if k != "labels"},
    base(response={"choices": [{"text": '"labels": {"x": 1}'}], "usage": {"completion_tokens": 3}}),
]
# Shapes it hands over to the per-line path (which reads them, or names the line).
ODD = [
    base(time=1767225600.5),  # Unix seconds
    base(time="2026-01-01T00:00:00"),  # no zone: an error, per line
    base(response={"meta_info": {"spec_num_proposed_drafts": 4, "spec_num_correct_drafts": 1, "completion_tokens": 3}}),
    base(response={"timings": {"draft_n": None}}),
    base(response={"usage": {"completion_tokens": None}, "timings": {"predicted_n": 4}}),
    base(
        response={
            "metrics": {"speculative_decoding": {"num_draft_tokens": 6, "num_accepted_draft_tokens": 2, "acceptance_histogram": [0, 2]}}
        }
    ),
    base(response={"timings": {"draft_n": 4, "draft_n_accepted": 5}}),  # impossible: an error, per line
    base(latency_s=-1.0),
    base(latency_s="0.5"),
    base(labels={"nested": {"a": 1}}),
    base(request={"metadata": {"labels": {"a": 1}}}),
    base(status=True),
    base(response={"usage": {"completion_tokens": 2.5}}),
    "[1, 2]",
    "{not json",
    b'{"time": "2026-01-01T00:00:00Z", "latency_s": 0.5, "labels": {"t": "\xff"}}',  # not UTF-8
]


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns="text").astype(object).where(frame.drop(columns="text").notna(), None).reset_index(drop=True)


def test_columnar_rows_equal_the_per_line_rows_on_the_common_shapes():
    fast = columnar_rows(chunk_of(COMMON))
    assert fast is not None, "the common shapes must take the columnar path"
    slow = per_line_rows(chunk_of(COMMON), {})
    pd.testing.assert_frame_equal(comparable(fast), comparable(slow))
    assert list(fast["source"][:4]) == ["timings.draft_n", "timings.draft_n", "timings.draft_n", "metrics.speculative_decoding"]
    assert list(fast["accepted"][:3]) == [12, 12, 0]


@pytest.mark.parametrize("odd", range(len(ODD)))
def test_an_odd_line_sends_its_chunk_the_per_line_way(odd):
    assert columnar_rows(chunk_of([*COMMON, ODD[odd]])) is None


@pytest.mark.parametrize("first", ["null", "[]", '"x"', "1"])
def test_a_first_line_that_is_not_an_object_goes_per_line(tmp_path, first):
    # pyarrow 26's JSON reader with a schema dies of SIGSEGV on a first line `null` (found by the fuzz test).
    assert columnar_rows(chunk_of([first, base()])) is None
    (tmp_path / "log.jsonl").write_text(first + "\n" + json.dumps(base()) + "\n")
    with open_traffic_store(tmp_path / "t.db") as store, pytest.raises(InputError, match=r"log.jsonl:1 is a JSON"):
        ingest(store, [str(tmp_path / "log.jsonl")])


def test_simulated_log_ingests_columnar_with_the_per_line_rows(tmp_path):
    log = write_log(tmp_path / "sim.jsonl", simulate(TrafficModel(), 3000, seed=4))
    raw = [line.strip() for line in log.read_bytes().splitlines()]
    chunk = Chunk(str(log), raw, list(range(1, len(raw) + 1)))
    fast = columnar_rows(chunk)
    assert fast is not None
    pd.testing.assert_frame_equal(comparable(fast), comparable(per_line_rows(chunk, {})))


def stored_rows(db) -> pd.DataFrame:
    with sqlite3.connect(db) as conn:
        return pd.read_sql_query(f"SELECT {', '.join(ROW_COLUMNS)} FROM traffic_requests", conn)


def direct_sums(rows: pd.DataFrame, group: Group, until: float | None) -> pd.DataFrame:
    period = (rows["time"] >= until).astype(int) if until is not None else 1
    sums = rollup_sums(rows.assign(grp=group.of_rows(rows, "t.db"), period=period), ["grp", "period", *STRATA])
    sums[SUM_COLUMNS] = sums[SUM_COLUMNS].astype(float)
    return sums.sort_values(["grp", "period", *STRATA]).reset_index(drop=True)


@pytest.fixture()
def hours_store(tmp_path):
    """Six hours of simulated traffic (one request every 5 s on average), in three logs ingested apart."""
    model = TrafficModel(rate_per_s=0.2)
    lines = list(simulate(model, 4000, seed=9))
    for i, label in enumerate(lines):
        label["labels"]["tenant"] = "ab"[i % 2]
    for part in range(3):
        write_log(tmp_path / f"log{part}.jsonl", iter(lines[part::3]))
    db = tmp_path / "t.db"
    with open_traffic_store(db) as store:
        for part in range(3):
            ingest(store, [str(tmp_path / f"log{part}.jsonl")], chunk_lines=700)
    return db


@pytest.mark.parametrize("group_by", ["language", "label:tenant"])
def test_rollup_sums_equal_the_rows_sums_with_a_cut_inside_an_hour(hours_store, group_by):
    rows = stored_rows(hours_store)
    times = np.sort(rows["time"].to_numpy())
    assert times[-1] - times[0] > 5 * 3600
    group = Group.parse(group_by)
    with open_traffic_store(hours_store, create=False) as store:
        assert store.count() == len(rows) == 4000
        for rank in (1, 1001, 2345, 4000):
            assert store.time_at(rank) == times[rank - 1]
        assert store.time_at(4001) is None
        until = store.time_at(2345)
        assert 60 < until % 3600 < 3540  # the cut falls inside an hour, which the roll-up cannot split
        got = store.aggregates(group, baseline_until=until).sort_values(["grp", "period", *STRATA]).reset_index(drop=True)
    want = direct_sums(rows, group, until)
    pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False, rtol=1e-9)


def test_reingest_leaves_the_rollup_alone_and_an_old_store_gets_one(hours_store, tmp_path):
    with open_traffic_store(hours_store) as store:
        before = evaluate(store, baseline_requests=1000).to_dict()
        again = ingest(store, [str(tmp_path / f"log{part}.jsonl") for part in range(3)])
        assert again.added == 0
        assert evaluate(store, baseline_requests=1000).to_dict() == before
    with sqlite3.connect(hours_store) as conn:  # a store made before the roll-up table existed
        conn.execute("DROP TABLE traffic_rollup")
    with open_traffic_store(hours_store, create=False) as store:
        rebuilt = evaluate(store, baseline_requests=1000).to_dict()
    assert rebuilt["requests"] == before["requests"] == 4000
    for got, want in zip(rebuilt["checks"], before["checks"]):
        assert got["ratio"] == pytest.approx(want["ratio"], rel=1e-9)
        assert got["p_value"] == pytest.approx(want["p_value"], rel=1e-6)


# Any JSON value, small: what a damaged or unusual log may hold in any field.
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "draft_n", "labels", "time"]), inner, max_size=3),
    max_leaves=8,
)
_paths = st.sampled_from(
    [
        ("time",),
        ("latency_s",),
        ("ttft_s",),
        ("in_flight",),
        ("status",),
        ("labels",),
        ("labels", "tenant"),
        ("request",),
        ("request", "temperature"),
        ("response",),
        ("response", "usage"),
        ("response", "usage", "completion_tokens"),
        ("response", "timings"),
        ("response", "timings", "draft_n"),
        ("response", "timings", "draft_n_accepted"),
        ("response", "metrics"),
        ("response", "tokens_predicted"),
    ]
)


@settings(max_examples=150, deadline=None, database=None)
@given(edits=st.lists(st.tuples(_paths, _values), min_size=1, max_size=3))
def test_any_edit_of_a_line_gives_the_per_line_rows_or_the_per_line_path(edits):
    line = base()
    for path, value in edits:
        node = line
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = value
    chunk = chunk_of([base(), line])
    fast = columnar_rows(chunk)
    try:
        slow = per_line_rows(chunk, {})
    except InputError:
        assert fast is None, "the columnar path took a line the per-line path rejects"
        return
    if fast is not None:
        pd.testing.assert_frame_equal(comparable(fast), comparable(slow))


def test_reading_ahead_hands_over_errors_and_stops_when_the_writer_fails():
    from specaudit.traffic._ingest import _ahead

    def chunks():
        yield 1
        yield 2
        raise InputError("log.jsonl:3 is not a JSON object")

    got = []
    with pytest.raises(InputError, match="log.jsonl:3"):
        for item in _ahead(chunks()):
            got.append(item)
    assert got == [1, 2]
    made = []

    def many():
        for i in range(1000):
            made.append(i)
            yield i

    with pytest.raises(RuntimeError):
        for item in _ahead(many()):
            if item == 1:
                raise RuntimeError("the store failed")  # the reader must stop, not fill the queue forever
    assert len(made) < 10


def test_a_malformed_line_in_a_later_chunk_is_named_and_nothing_of_the_ingest_is_stored(tmp_path):
    lines = [json.dumps(base(time=f"2026-01-01T00:00:{i:02d}Z")) for i in range(30)]
    (tmp_path / "first.jsonl").write_text(lines[0] + "\n")
    lines[25] = "{not json"
    (tmp_path / "log.jsonl").write_text("\n".join(lines) + "\n")
    store = tmp_path / "t.db"
    with open_traffic_store(store) as opened:
        ingest(opened, [str(tmp_path / "first.jsonl")])
    with pytest.raises(InputError, match=r"log.jsonl:26 is not a JSON object"):
        with open_traffic_store(store) as opened:
            ingest(opened, [str(tmp_path / "log.jsonl")], chunk_lines=10)
    with sqlite3.connect(store) as conn:  # two chunks read and inserted before line 26: rolled back with it
        assert conn.execute("SELECT count(*) FROM traffic_requests").fetchone() == (1,)
        assert conn.execute("SELECT sum(n) FROM traffic_rollup").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM traffic_ingests").fetchone() == (1,)
