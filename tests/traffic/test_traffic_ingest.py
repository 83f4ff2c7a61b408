"""`traffic ingest`: the log shape, the three servers' fields, dedupe, torn and malformed lines, privacy."""

from __future__ import annotations

import gzip
import io
import json
import sqlite3
import sys

import pytest

from specaudit.cli import main
from specaudit.errors import InputError
from specaudit.traffic import ingest, open_traffic_store, parse_column_map
from specaudit.traffic.simulate import TrafficModel, simulate, write_log


def line(**over):
    base = {
        "time": "2026-01-01T00:00:00Z",
        "request": {"prompt": "Bonjour, comment allez-vous aujourd'hui ?", "temperature": 0.0},
        "response": {"usage": {"prompt_tokens": 10, "completion_tokens": 20}, "timings": {"draft_n": 16, "draft_n_accepted": 12}},
        "latency_s": 0.5,
    }
    base.update(over)
    return base


def write(path, lines, tail=""):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + tail)
    return path


def rows(db):
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM traffic_requests ORDER BY time")]


def test_three_servers_fields_and_token_counts(tmp_path):
    log = write(
        tmp_path / "a.jsonl",
        [
            line(),
            line(time="2026-01-01T00:00:01Z", response={"timings": {"draft_n": 8, "draft_n_accepted": 2, "prompt_n": 4, "predicted_n": 9}}),
            line(
                time="2026-01-01T00:00:02Z",
                response={
                    "meta_info": {"spec_num_correct_drafts": 3, "spec_num_proposed_drafts": 7, "prompt_tokens": 5, "completion_tokens": 6}
                },
            ),
            line(time="2026-01-01T00:00:03Z", response={"usage": {"prompt_tokens": 1, "completion_tokens": 2}}),  # no speculation info
        ],
    )
    with open_traffic_store(tmp_path / "t.db") as store:
        result = ingest(store, [str(log)])
    assert (result.lines, result.added) == (4, 4)
    got = [(r["proposed"], r["accepted"], r["prompt_tokens"], r["output_tokens"], r["source"]) for r in rows(tmp_path / "t.db")]
    assert got == [
        (16, 12, 10, 20, "timings.draft_n"),
        (8, 2, 4, 9, "timings.draft_n"),
        (7, 3, 5, 6, "meta_info.spec_num_proposed_drafts"),
        (None, None, 1, 2, ""),
    ]


def test_dedupe_torn_last_line_and_folder_and_gzip(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    lines = [line(time=f"2026-01-01T00:00:0{i}Z") for i in range(5)]
    write(folder / "a.jsonl", lines[:3], tail='{"time": "2026-01-01T00:00:09Z", "requ')  # being written
    with gzip.open(folder / "b.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(x) + "\n" for x in lines[2:]))  # line 2 is in both files
    db = tmp_path / "t.db"
    with open_traffic_store(db) as store:
        first = ingest(store, [str(folder)])
        again = ingest(store, [str(folder)])
    assert (first.lines, first.added) == (6, 5)
    assert (again.lines, again.added) == (6, 0)


def test_malformed_line_names_file_and_line(tmp_path):
    log = tmp_path / "bad.jsonl"
    log.write_text(json.dumps(line()) + "\n{not json\n" + json.dumps(line()) + "\n")
    with open_traffic_store(tmp_path / "t.db") as store, pytest.raises(InputError, match=r"bad\.jsonl:2 is not a JSON object"):
        ingest(store, [str(log)])
    write(log, [line(), line(latency_s="slow")])
    with open_traffic_store(tmp_path / "t.db") as store, pytest.raises(InputError, match=r"bad\.jsonl:2: latency_s is 'slow'"):
        ingest(store, [str(log)])
    write(log, [line(response={"timings": {"draft_n": 2, "draft_n_accepted": 5}})])
    with open_traffic_store(tmp_path / "t.db") as store, pytest.raises(InputError, match=r"bad\.jsonl:1: .*cannot accept more"):
        ingest(store, [str(log)])


def test_cli_exit_2_on_bad_input_and_reads_stdin(tmp_path, monkeypatch, capsys):
    db = str(tmp_path / "t.db")
    assert main(["traffic", "ingest", str(tmp_path / "missing.jsonl"), "--store", db]) == 2
    assert "no such file" in capsys.readouterr().err
    stdin = io.TextIOWrapper(io.BytesIO((json.dumps(line()) + "\n").encode()))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["traffic", "ingest", "-", "--store", db]) == 0
    assert "ingested 1 new requests" in capsys.readouterr().out
    assert main(["traffic", "ingest", "-", "--store", db, "--column-map", "when=time"]) == 2


def test_text_is_kept_only_when_asked_and_language_detected(tmp_path):
    log = write(
        tmp_path / "a.jsonl",
        [
            line(),
            line(time="2026-01-01T00:00:01Z", labels={"language": "de"}),  # declared: beats the identifier
            line(time="2026-01-01T00:00:02Z", request={"messages": [{"role": "user", "content": "!!"}]}),  # too little text
        ],
    )
    with open_traffic_store(tmp_path / "private.db") as store:
        ingest(store, [str(log)], detect_language=True)
    stored = rows(tmp_path / "private.db")
    assert [r["text"] for r in stored] == [None, None, None]
    assert [r["language"] for r in stored] == ["fr", "de", "und"]
    assert stored[0]["language_confidence"] > 0.9
    assert "Bonjour" not in (tmp_path / "private.db").read_bytes().decode("latin-1")
    with open_traffic_store(tmp_path / "kept.db") as store:
        ingest(store, [str(log)], keep_text=True)
    assert rows(tmp_path / "kept.db")[0]["text"].startswith("Bonjour")


def test_column_map_reads_another_log_shape(tmp_path):
    other = {"ts": "2026-01-01T00:00:00+00:00", "timing": {"total": 1.5}, "spec": {"p": 10, "a": 7}, "req": {"prompt": "x"}, "res": {}}
    log = write(tmp_path / "other.jsonl", [other])
    cmap = parse_column_map(["time=ts,latency_s=timing.total,proposed=spec.p,accepted=spec.a", "request=req,response=res"])
    with open_traffic_store(tmp_path / "t.db") as store:
        ingest(store, [str(log)], column_map=cmap)
    (row,) = rows(tmp_path / "t.db")
    assert (row["latency_s"], row["proposed"], row["accepted"]) == (1.5, 10, 7)


def test_parquet_log(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    lines = [line(time=f"2026-01-01T00:00:0{i}Z", latency_s=0.1 * (i + 1)) for i in range(3)]
    pd.DataFrame(lines).to_parquet(tmp_path / "log.parquet")
    with open_traffic_store(tmp_path / "t.db") as store:
        result = ingest(store, [str(tmp_path / "log.parquet")])
    assert result.added == 3
    assert [round(r["latency_s"], 3) for r in rows(tmp_path / "t.db")] == [0.1, 0.2, 0.3]


def test_in_flight_from_arrivals_when_the_log_has_none(tmp_path):
    log = write_log(tmp_path / "sim.jsonl", simulate(TrafficModel(rate_per_s=50.0), 300, seed=3))
    with open_traffic_store(tmp_path / "t.db") as store:
        ingest(store, [str(log)])
    loads = [r["in_flight"] for r in rows(tmp_path / "t.db")]
    assert max(loads) >= 2 and min(loads) == 0  # 50 requests/s of ~0.1-1 s each overlap


BIG = 10**30
# Hostile lines, each refused with its file and line (exit 2), whichever path (columnar or per line) reads it.
HOSTILE = [
    (json.dumps(line(status=1e30)), "'status' is 1e+30, not an HTTP status"),
    (json.dumps(line(status="500")), "'status' is '500', not an HTTP status"),
    (json.dumps(line(status=-200)), "'status' is -200"),
    (json.dumps(line(status=200.5)), "'status' is 200.5"),
    (json.dumps(line(response={"usage": {"prompt_tokens": BIG, "completion_tokens": 2}})), "prompt tokens is 1000000"),
    (json.dumps(line(response={"usage": {"prompt_tokens": 1e300, "completion_tokens": 2}})), "prompt tokens is 1e+300"),
    (json.dumps(line(response={"timings": {"draft_n": BIG, "draft_n_accepted": 1}})), "timings.draft_n is 1000000"),
    (json.dumps(line(response={"meta_info": {"spec_num_proposed_drafts": BIG, "spec_num_correct_drafts": 1}})), "spec_num_proposed_drafts"),
    (json.dumps(line(in_flight=BIG)), "in_flight is 1000000"),
    (json.dumps(line(time=1e300)), "'time' 1e+300 is not between 1970 and the end of 9999"),
    (json.dumps(line(time=-5)), "'time' -5 is not between 1970"),
    (json.dumps(line(latency_s=1e308)), "latency_s is 1e+308, not seconds"),
    (json.dumps(line()).replace('"latency_s": 0.5', '"latency_s": NaN'), "holds NaN, which is not a JSON number"),
    (json.dumps(line()).replace('"draft_n": 16', '"draft_n": Infinity'), "holds Infinity"),
    (json.dumps(line()).replace('"temperature": 0.0', '"temperature": -Infinity'), "holds -Infinity"),
    (json.dumps(line(labels={"a": {"b": 1}})), "label 'a' is a JSON object"),
    (json.dumps(line(labels={"language": "x" * 40})), "longer than 16 characters"),
    (json.dumps(line(labels={"t": "\ud800"})), "lone UTF-16 surrogate"),
    (json.dumps(line(response={"usage": "many"})), "the server's 'usage' is a JSON string, not an object"),
    (json.dumps(line(response={"metrics": {"speculative_decoding": [1]}})), "'metrics.speculative_decoding' is a JSON array"),
    ('{"time": "2026-01-01T00:00:00Z", "request": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
]


@pytest.mark.parametrize("text, words", HOSTILE, ids=[w[:30] for _, w in HOSTILE])
def test_a_hostile_line_is_refused_with_its_file_and_line_and_nothing_stored(tmp_path, capsys, text, words):
    db = str(tmp_path / "t.db")
    write(tmp_path / "first.jsonl", [line(time="2025-12-31T00:00:00Z")])
    assert main(["traffic", "ingest", str(tmp_path / "first.jsonl"), "--store", db]) == 0
    before = rows(db)
    (tmp_path / "bad.jsonl").write_text(json.dumps(line(time="2026-01-02T00:00:00Z")) + "\n" + text + "\n")
    for flags in ([], ["--keep-text", "--detect-language"]):  # the columnar path and the per-line one
        assert main(["traffic", "ingest", str(tmp_path / "bad.jsonl"), "--store", db, *flags]) == 2
        err = capsys.readouterr().err
        assert "bad.jsonl:2" in err and words in err and "nothing of this ingest was stored" in err, err
        assert err.count("\n") == 1
    assert rows(db) == before


def test_bytes_that_are_not_utf8_or_not_gzip_are_refused(tmp_path, capsys):
    db = str(tmp_path / "t.db")
    (tmp_path / "latin.jsonl").write_bytes(json.dumps(line()).encode().replace(b"Bonjour", b"Bj\xf6rk") + b"\n")  # Latin-1
    whole = gzip.compress("".join(json.dumps(line(time=f"2026-01-01T00:00:{i:02d}Z")) + "\n" for i in range(40)).encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "plain.jsonl.gz").write_text(json.dumps(line()) + "\n")
    (tmp_path / "trailing.jsonl.gz").write_bytes(whole + b"junk")
    expected = {
        "latin.jsonl": "latin.jsonl:1 is not UTF-8 text",
        "cut.jsonl.gz": "cut.jsonl.gz is cut short",
        "plain.jsonl.gz": "plain.jsonl.gz is not a readable gzip file",
        "trailing.jsonl.gz": "trailing.jsonl.gz is not a readable gzip file",
    }
    for name, words in expected.items():
        assert main(["traffic", "ingest", str(tmp_path / name), "--store", db]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
    assert rows(db) == []


def test_the_request_body_is_the_clients_own(tmp_path):
    """What a client put in its request does not make the log malformed: documented defaults instead."""
    log = write(
        tmp_path / "a.jsonl",
        [
            line(request={"prompt": "x", "temperature": "hot"}),  # not a number: 1.0, the OpenAI default
            line(time="2026-01-01T00:00:01Z", request={"messages": [{"role": "user", "content": 5}, "oops"]}),  # no text
            line(time="2026-01-01T00:00:02Z", request={"messages": "hello"}),
            line(time="2026-01-01T00:00:03Z", request={"prompt": "cut \ud83d pair"}),  # a lone surrogate: U+FFFD
        ],
    )
    with open_traffic_store(tmp_path / "t.db") as store:
        ingest(store, [str(log)], keep_text=True)
    stored = rows(tmp_path / "t.db")
    assert stored[0]["temperature"] == 1.0 and stored[0]["sampling_bin"] == 2
    assert [r["text"] for r in stored] == ["x", "", "", "cut \ufffd pair"]


@pytest.mark.parametrize("argv", [["traffic"], ["traffic", "ingest"], ["traffic", "check"], ["traffic", "fallback"], ["proxy"]])
def test_help_is_plain_text(capsys, argv):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    out = capsys.readouterr().out
    assert "option_strings" not in out and "usage: specaudit" in out
    if argv == ["traffic"]:
        assert "below X% acceptance" in " ".join(out.split())  # a literal % (argparse formats help with %)
