"""History-store schema: the current tables, and the ordered migrations that build them.

Every table is prefixed `specaudit_` so a team's PostgreSQL database can hold them beside its
own. `specaudit_schema_version` has one row per applied migration; a store is at the highest
version listed. Migrations are append-only: a released one is never edited, a change is a new
function at the end of MIGRATIONS. Each one runs inside the caller's transaction, so a failed
upgrade leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Column, Connection, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

PREFIX = "specaudit_"
VERSION_TABLE = f"{PREFIX}schema_version"


def _version_table(metadata: MetaData) -> Table:
    return Table(
        VERSION_TABLE,
        metadata,
        Column("version", Integer, primary_key=True, autoincrement=False),
        Column("applied", String(40), nullable=False),
        Column("description", Text, nullable=False),
    )


def _v1_tables(metadata: MetaData) -> dict[str, Table]:
    runs = Table(
        f"{PREFIX}runs",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("digest", String(64), nullable=False),
        Column("name", Text, nullable=False),
        Column("created", String(40), nullable=False),
        Column("ingested", String(40), nullable=False),
        Column("snapshot_schema", Integer, nullable=False),
        Column("equivalence_status", String(32), nullable=False),
        Column("target", Text, nullable=False),
        Column("target_hash", String(64), nullable=False),
        Column("draft", Text, nullable=False),
        Column("draft_hash", String(64), nullable=False),
        Column("prompt_set", Text, nullable=False),
        Column("prompt_set_version", Text, nullable=False),
        Column("prompt_set_checksum", String(128), nullable=False),
        Column("config_hash", String(64), nullable=False),
        Column("versions_hash", String(64), nullable=False),
        Column("environment", Text, nullable=False),
        Column("ci_level", Float, nullable=False),
        Column("source", Text, nullable=False),
        Column("snapshot", Text, nullable=False),
        UniqueConstraint("digest", name=f"{PREFIX}runs_digest_key"),
    )
    Index(f"{PREFIX}runs_environment_created", runs.c.environment, runs.c.created)
    tags = Table(
        f"{PREFIX}run_tags",
        metadata,
        Column("run_id", Integer, ForeignKey(runs.c.id, ondelete="CASCADE"), primary_key=True),
        Column("key", String(200), primary_key=True),
        Column("value", Text, nullable=False),
    )
    metrics = Table(
        f"{PREFIX}metrics",
        metadata,
        Column("run_id", Integer, ForeignKey(runs.c.id, ondelete="CASCADE"), primary_key=True),
        Column("dimension", String(200), primary_key=True),
        Column("group_name", String(400), primary_key=True),
        Column("metric", String(200), primary_key=True),
        Column("value", Float),
        Column("ci_low", Float),
        Column("ci_high", Float),
        Column("n_prompts", Integer),
        Column("n_tokens", Integer),
    )
    equivalence = Table(
        f"{PREFIX}equivalence",
        metadata,
        Column("run_id", Integer, ForeignKey(runs.c.id, ondelete="CASCADE"), primary_key=True),
        Column("engine", String(200), primary_key=True),
        Column("verdict", String(32), nullable=False),
    )
    baselines = Table(
        f"{PREFIX}baselines",
        metadata,
        Column("environment", String(200), primary_key=True),
        Column("run_id", Integer, ForeignKey(runs.c.id), nullable=False),
        Column("pinned", String(40), nullable=False),
    )
    return {"runs": runs, "tags": tags, "metrics": metrics, "equivalence": equivalence, "baselines": baselines}


def _v2_tables(metadata: MetaData, runs: Table) -> dict[str, Table]:
    alerts = Table(
        f"{PREFIX}alerts",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("run_id", Integer, ForeignKey(runs.c.id, ondelete="CASCADE"), nullable=False),
        Column("checked", String(40), nullable=False),
        Column("baseline", Text, nullable=False),
        Column("kind", String(32), nullable=False),
        Column("status", String(8), nullable=False),
        Column("subject", Text, nullable=False),
        Column("dimension", String(200)),
        Column("group_name", String(400)),
        Column("metric", String(200)),
        Column("message", Text, nullable=False),
    )
    Index(f"{PREFIX}alerts_run", alerts.c.run_id)
    return {"alerts": alerts}


def _migrate_v1(conn: Connection) -> None:
    metadata = MetaData()
    _v1_tables(metadata)
    metadata.create_all(conn)


def _migrate_v2(conn: Connection) -> None:
    # Alerts are kept so the trend report can mark them; a metric index serves the time series.
    metadata = MetaData()
    runs = _v1_tables(metadata)["runs"]
    alerts = _v2_tables(metadata, runs)["alerts"]
    alerts.create(conn)
    Index(f"{PREFIX}metrics_series", metadata.tables[f"{PREFIX}metrics"].c.dimension, metadata.tables[f"{PREFIX}metrics"].c.metric).create(
        conn
    )


# (version, description, function), in order. Append only.
MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "runs, tags, per-group metrics, equivalence verdicts, pinned baselines", _migrate_v1),
    (2, "alerts table; metric series index", _migrate_v2),
]
LATEST = MIGRATIONS[-1][0]


def current_tables() -> tuple[MetaData, dict[str, Table]]:
    """The tables as the latest migration leaves them, for queries."""
    metadata = MetaData()
    tables = _v1_tables(metadata)
    tables.update(_v2_tables(metadata, tables["runs"]))
    tables["version"] = _version_table(metadata)
    return metadata, tables
