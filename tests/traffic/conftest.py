"""Fixtures of the traffic tests: a throwaway PostgreSQL cluster (tests/postgres_cluster.py)."""

from postgres_cluster import pg_server, pg_url  # noqa: F401 (fixtures of the PostgreSQL tests)
