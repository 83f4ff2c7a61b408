"""The history store on a real PostgreSQL server, started by the test in a temporary folder.

The server binaries come from the Debian `postgresql` package (initdb and pg_ctl, on PATH or in
/usr/lib/postgresql/*/bin); PostgreSQL refuses to run as root, so as root the cluster runs as the
`postgres` user. Without the binaries or the psycopg driver the tests skip and say which is missing.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest
from monitor_factory import base_snapshot, edited, history, noisy_run, write
from postgres_cluster import free_port, pytestmark  # noqa: F401 (the module's skip without a server)

from specaudit.cli import main
from specaudit.monitor import check, open_store, write_trend_report


def test_store_check_and_report_on_postgres(pg_url, tmp_path):
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:  # a team database already holds other tables
        conn.execute("CREATE TABLE invoices (id integer primary key)")
    with open_store(pg_url) as store:
        assert store.kind == "postgresql" and store.schema_version == 2
        snaps = history(seed=51, n=5)
        for snap in snaps:
            assert store.add(snap, environment="prod").added
        assert not store.add(snaps[0], environment="prod").added
        quiet = check(store, environment="prod")
        assert quiet.exit_code == 0
        dropped = store.add(noisy_run(random.Random(6), 5, shift={("aave", "acceptance_rate"): -0.35}), environment="prod").run
        result = check(store, dropped.id)
        assert result.exit_code == 1 and result.alerts[0].group == "aave"
        assert [a["group"] for a in store.alerts([dropped]) if a["status"] == "FAIL"][0] == "aave"
        assert store.snapshot(store.get("run-2")) == snaps[2]
        assert store.integrity_problems() == []
        report = write_trend_report(store, tmp_path / "trend")
        assert report.n_runs == 6
    with open_store(pg_url, create=False) as again:  # reopening does not migrate twice
        assert again.count() == 6
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM specaudit_schema_version").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM invoices").fetchone()[0] == 0


_WRITER = textwrap.dedent("""
    import json, sys
    from specaudit.monitor import open_store
    url, files = sys.argv[1], json.loads(sys.argv[2])
    added = 0
    for path in files:
        with open_store(url) as store:
            added += store.add(path).added
    print(added)
""")


@pytest.mark.slow
def test_concurrent_writers_on_postgres_lose_nothing(pg_url, tmp_path):
    """Two processes, 6 snapshots each plus one both add, into a database neither has migrated:
    13 runs, every metric row, one migration."""
    import psycopg

    snaps = history(seed=52, n=12)
    shared = str(write(edited(base_snapshot(), **{"run.id": "shared"}), tmp_path / "shared.json"))
    batches = [[str(write(snaps[w * 6 + i], tmp_path / f"w{w}" / f"{i}.json")) for i in range(6)] for w in range(2)]
    for files in batches:
        files.insert(3, shared)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, pg_url, json.dumps(files)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for files in batches
    ]
    outputs = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    assert sum(int(out) for out, _ in outputs) == 13
    with open_store(pg_url, create=False) as store:
        runs = store.runs()
        assert len(runs) == 13 and len({r.digest for r in runs}) == 13
        assert all(len(points) == 44 for points in store.points(runs).values())
        assert store.integrity_problems() == []
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM specaudit_schema_version").fetchone()[0] == 2


def test_unreachable_server_is_exit_2(capsys, tmp_path, snapshot_file):
    code = main(["monitor", "add", str(snapshot_file), "--store", f"postgresql://nobody:secret@127.0.0.1:{free_port()}/db"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("specaudit: error: history store ")
    assert "secret" not in err  # the password is masked
