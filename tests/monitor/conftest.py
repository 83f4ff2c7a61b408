"""Fixtures of the monitoring tests: synthetic snapshots on disk, a SQLite store URL, a PostgreSQL cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from monitor_factory import base_snapshot, write
from postgres_cluster import pg_server, pg_url  # noqa: F401 (fixtures of the PostgreSQL tests)

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'history.db'}"


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    return write(base_snapshot(), tmp_path / "run-0" / "snapshot.json")
