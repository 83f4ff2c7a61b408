"""A throwaway PostgreSQL cluster for the store tests (the monitor's history, the traffic store).

The server binaries come from the Debian `postgresql` package (initdb and pg_ctl, on PATH or in
/usr/lib/postgresql/*/bin); PostgreSQL refuses to run as root, so as root the cluster runs as the
`postgres` user. Without the binaries or the psycopg driver the tests skip and say which is missing:
a test module imports `pg_server`, `pg_url` and `pytestmark` from here.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_server():
    """A throwaway cluster: trust auth on 127.0.0.1, no fsync (speed), stopped and removed afterwards."""
    bindir = _pg_bindir()
    root = Path(tempfile.mkdtemp(prefix="specaudit-pg-"))
    data, port = root / "data", free_port()
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
