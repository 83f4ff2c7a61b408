"""History store on SQLite: contents, ordering, migrations, refusal of foreign/corrupted/newer files,
and several processes appending at once without losing a run."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from monitor_factory import GROUPS, base_snapshot, edited, history, write
from sqlalchemy import create_engine, func, select, text, update

from specaudit.contracts import CheckStatus
from specaudit.errors import InputError
from specaudit.monitor import OVERALL, _schema, metric_points, open_store
from specaudit.monitor._store import HistoryStore, _configure_sqlite


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_add_stores_run_metrics_tags_and_verdicts_once(store_url, snapshot_file):
    with open_store(store_url) as store:
        first = store.add(snapshot_file, environment="prod", tags={"region": "eu"})
        again = store.add(snapshot_file.parent, environment="prod")  # the run folder works too; same content
        assert first.added and not again.added and again.run.id == first.run.id
        run = first.run
        assert store.count() == 1
        assert (run.name, run.environment, run.equivalence_status) == ("run-0", "prod", "PASS")
        assert run.tags == {"model": "default", "draft": "int8", "environment": "prod", "prompt_set": "core@1", "region": "eu"}
        points = store.points([run])[run.id]
        expected = metric_points(base_snapshot())
        # 9 rows (8 groups + overall) x 5 metrics; the null per_position_acceptance rows are kept as nulls.
        assert len(points) == len(expected) == 8 * 5 + 4
        assert sorted(points, key=lambda p: p.key) == sorted(expected, key=lambda p: p.key)
        aave = {p.metric: p for p in points if p.group == "aave"}
        assert aave["acceptance_rate"].value == pytest.approx(0.312)
        assert aave["per_position_acceptance"].value is None
        assert {p.group for p in points} == {*GROUPS, OVERALL}
        assert store.engine_verdicts([run])[run.id] == {"vanilla": "PASS", "speculative": "PASS"}
        assert store.snapshot(run) == base_snapshot()  # stored verbatim
        assert store.integrity_problems() == []


def test_history_rows_from_before_the_contracts_read_in_the_contracts_spelling(store_url, snapshot_file):
    """Rows written when analyze spelt statuses in lower case ("pass") read back as CheckStatus
    values, so a status never changes between two runs only because its spelling did."""
    with open_store(store_url) as store:
        run = store.add(snapshot_file, environment="prod").run
        runs, verdicts = store._t["runs"], store._t["equivalence"]
        with store._write() as conn:
            conn.execute(update(runs).where(runs.c.id == run.id).values(equivalence_status="pass"))
            conn.execute(update(verdicts).where(verdicts.c.run_id == run.id).values(verdict=func.lower(verdicts.c.verdict)))
            assert conn.execute(select(verdicts.c.verdict)).scalars().all() == ["pass", "pass"]
        (again,) = store.runs()
        assert again.equivalence_status == CheckStatus.PASS
        assert store.engine_verdicts([again])[again.id] == {"vanilla": CheckStatus.PASS, "speculative": CheckStatus.PASS}


def test_runs_are_ordered_by_creation_and_found_by_id_name_digest(store_url, tmp_path):
    snaps = history(seed=1, n=4)
    with open_store(store_url) as store:
        # Ingested out of order (a backfill): the history is still in creation order.
        for i in (2, 0, 3, 1):
            store.add(snaps[i], environment="prod" if i != 3 else "staging")
        assert [r.name for r in store.runs()] == ["run-0", "run-1", "run-2", "run-3"]
        assert [r.name for r in store.runs(environment="prod")] == ["run-0", "run-1", "run-2"]
        assert [r.name for r in store.runs(limit=2)] == ["run-2", "run-3"]
        assert [r.name for r in store.runs(tags={"environment": "staging"})] == ["run-3"]
        run1 = store.get("run-1")
        assert [r.name for r in store.runs(before=run1)] == ["run-0"]
        assert [r.name for r in store.runs(since=run1, environment="prod")] == ["run-1", "run-2"]
        assert store.get(run1.id) == store.get(f"#{run1.id}") == store.get(run1.digest[:10]) == run1
        assert store.get("latest").name == "run-3" and store.latest(environment="prod").name == "run-2"
        with pytest.raises(InputError, match="no run 'nope'.*monitor list"):
            store.get("nope")


def test_baselines_are_pinned_per_environment(store_url):
    snaps = history(seed=2, n=3)
    with open_store(store_url) as store:
        for s in snaps:
            store.add(s, environment="prod")
        assert store.baseline("prod") is None
        store.set_baseline("run-0")
        store.set_baseline("run-1")  # re-pinning replaces
        assert store.baseline("prod").name == "run-1"
        assert store.set_baseline("run-2", environment="canary").name == "run-2"
        assert {env: r.name for env, r in store.baselines().items()} == {"prod": "run-1", "canary": "run-2"}
        assert store.clear_baseline("prod") and not store.clear_baseline("prod")


def test_wal_journal_and_schema_version(store_url, tmp_path):
    with open_store(store_url) as store:
        store.add(base_snapshot())
        assert store.schema_version == _schema.LATEST == 2
    con = sqlite3.connect(tmp_path / "history.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [r[0] for r in con.execute("SELECT version FROM specaudit_schema_version ORDER BY version")] == [1, 2]
    con.close()


def test_migration_from_version_1_keeps_everything(tmp_path):
    path = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{path}")
    _configure_sqlite(engine)
    old = HistoryStore(engine, str(path), "sqlite")
    assert old.migrate(target=1) == 1  # a store as the first release left it: no alerts table
    old.add(base_snapshot(), environment="prod")
    old.close()
    con = sqlite3.connect(path)
    assert "specaudit_alerts" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()

    with open_store(f"sqlite:///{path}", create=False) as store:
        assert store.schema_version == 2
        run = store.get("run-0")
        assert len(store.points([run])[run.id]) == 44 and store.snapshot(run) == base_snapshot()
        store.record_alerts(run, "test", [])  # the v2 table is usable
        assert store.alerts() == []
        assert store.integrity_problems() == []


def test_store_from_a_newer_specaudit_is_refused_untouched(store_url, tmp_path):
    with open_store(store_url) as store:
        store.add(base_snapshot())
    path = tmp_path / "history.db"
    con = sqlite3.connect(path)
    con.execute("INSERT INTO specaudit_schema_version VALUES (99, 'x', 'from the future')")
    con.commit()
    con.close()
    before = _sha(path)
    with pytest.raises(InputError, match="schema version 99, newer than this specaudit"):
        open_store(store_url)
    assert _sha(path) == before


def test_foreign_sqlite_database_is_refused_untouched(tmp_path):
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO users VALUES (1, 'ada')")
    con.commit()
    con.close()
    before = _sha(path)
    with pytest.raises(InputError, match="not a specaudit history store.*users"):
        open_store(f"sqlite:///{path}")
    assert _sha(path) == before
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not even switched to WAL
    con.close()


def test_garbage_file_is_refused_untouched(tmp_path):
    path = tmp_path / "history.db"
    path.write_bytes(b"this is not sqlite\n" * 300)
    before = _sha(path)
    with pytest.raises(InputError, match="not a SQLite database.*nothing was changed"):
        open_store(f"sqlite:///{path}")
    assert _sha(path) == before


def test_corrupted_pages_are_an_error_not_a_crash_and_nothing_is_written(store_url, tmp_path):
    with open_store(store_url) as store:
        for s in history(seed=3, n=5):
            store.add(s)
    path = tmp_path / "history.db"
    data = bytearray(path.read_bytes())
    assert len(data) > 3 * 4096
    data[4096:] = bytes((i * 37 + 11) % 251 for i in range(len(data) - 4096))  # every page after the schema page
    path.write_bytes(bytes(data))
    before = _sha(path)
    with pytest.raises(InputError, match="history store .*(corrupted|not a SQLite database)"):
        with open_store(store_url) as store:
            store.add(edited(base_snapshot(), **{"run.id": "new"}))
    assert _sha(path) == before


def test_bad_urls_and_missing_stores(tmp_path):
    with pytest.raises(InputError, match="unknown scheme 'mysql'"):
        open_store("mysql://user@host/db")
    with pytest.raises(InputError, match="names no file"):
        open_store("sqlite://")
    with pytest.raises(InputError, match="is a folder"):
        open_store(f"sqlite:///{tmp_path}")
    missing = tmp_path / "nowhere" / "history.db"
    with pytest.raises(InputError, match="no history store at .*monitor add"):
        open_store(f"sqlite:///{missing}", create=False)
    assert not missing.exists() and not missing.parent.exists()
    with open_store(str(tmp_path / "bare.db")) as store:  # a bare path means a SQLite file
        assert store.kind == "sqlite"
    assert (tmp_path / "bare.db").is_file()


def test_bad_snapshots_leave_the_store_as_it_was(store_url, tmp_path, snapshot_file):
    with open_store(store_url) as store:
        store.add(snapshot_file)
        cases = [
            (tmp_path / "missing.json", "missing.json does not exist"),
            (write(edited(base_snapshot(), schema_version=7), tmp_path / "v7.json"), "schema_version 7 but this specaudit reads version 1"),
            (write({"hello": 1}, tmp_path / "other.json"), "not a specaudit snapshot"),
            (
                write(edited(base_snapshot(), **{"groups.dialect.by_group.aave.metrics.speedup.value": "fast"}), tmp_path / "bad.json"),
                r"groups\.dialect\.by_group\.aave\.metrics\.speedup\.value must be a number",
            ),
        ]
        (tmp_path / "torn.json").write_text('{"schema_version": 1, "run": {', encoding="utf-8")
        cases.append((tmp_path / "torn.json", "not valid JSON"))
        for path, message in cases:
            with pytest.raises(InputError, match=message):
                store.add(path)
        assert store.count() == 1 and store.integrity_problems() == []


_WRITER = textwrap.dedent("""
    import json, sys
    from specaudit.monitor import open_store
    url, files = sys.argv[1], json.loads(sys.argv[2])
    added = 0
    for path in files:
        with open_store(url) as store:   # a fresh connection per snapshot, as separate cron jobs would
            added += store.add(path, environment="prod").added
    print(added)
""")


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(tmp_path):
    """Three processes append 8 snapshots each to a store none of them has created yet, plus one
    snapshot all three add: 25 runs afterwards, every metric row present, the database consistent."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    rng_runs = history(seed=4, n=24)
    shared = write(edited(base_snapshot(), **{"run.id": "shared"}), tmp_path / "shared.json")
    batches = []
    for w in range(3):
        files = [str(write(rng_runs[w * 8 + i], tmp_path / f"w{w}" / f"{i}.json")) for i in range(8)]
        files.insert(4, str(shared))
        batches.append(files)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, json.dumps(files)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
        )
        for files in batches
    ]
    outputs = [p.communicate(timeout=180) for p in procs]
    for p, (_out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    assert sum(int(out) for out, _ in outputs) == 25  # the shared snapshot counted as new exactly once
    with open_store(url, create=False) as store:
        runs = store.runs()
        assert len(runs) == 25
        assert sorted(r.name for r in runs) == sorted([f"run-{i}" for i in range(24)] + ["shared"])
        points = store.points(runs)
        assert all(len(points[r.id]) == 44 for r in runs)
        assert store.integrity_problems() == []
    with create_engine(url).connect() as conn:
        assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
        assert conn.execute(text("SELECT count(*) FROM specaudit_schema_version")).scalar() == 2  # migrated once
