"""The history store on a real PostgreSQL server, started by the test in a temporary folder.

The server binaries come from the Debian `postgresql` package (initdb and pg_ctl, on PATH or in
/usr/lib/postgresql/*/bin); PostgreSQL refuses to run as root, so as root the cluster runs as the
`postgres` user. Without the binaries or the psycopg driver the tests skip and say which is missing.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest
from monitor_factory import base_snapshot, edited, history, noisy_run, write

from specaudit.cli import main
from specaudit.monitor import check, open_store, write_trend_report


def _pg_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0
    )
    return Path(versions[-1]).parent if versions else None


def _skip_reason() -> str | None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install 'specaudit[postgres]')"
    if _pg_bindir() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) not found; install the Debian package `postgresql`"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run the server as"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_server():
    """A throwaway cluster: trust auth on 127.0.0.1, no fsync (speed), stopped and removed afterwards."""
    bindir = _pg_bindir()
    root = Path(tempfile.mkdtemp(prefix="specaudit-pg-"))
    data, port = root / "data", _free_port()
    prefix: list[str] = []
    if os.geteuid() == 0:
        import pwd

        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        root.chmod(0o700)
        prefix = ["runuser", "-u", "postgres", "--"]

    def pg(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120)

    init = pg(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    assert init.returncode == 0, init.stderr
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=40"
    start = pg(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"), "-w", "start")
    assert start.returncode == 0, start.stderr + (root / "server.log").read_text(errors="replace")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        pg(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh database per test."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{pg_server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{pg_server}/{name}"


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
    code = main(["monitor", "add", str(snapshot_file), "--store", f"postgresql://nobody:secret@127.0.0.1:{_free_port()}/db"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("specaudit: error: history store ")
    assert "secret" not in err  # the password is masked
