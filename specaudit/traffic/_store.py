"""The traffic store: one row per served request, in SQLite (default) or PostgreSQL, via SQLAlchemy Core.

Its own tables (`traffic_requests`, `traffic_ingests`), so it can share a database with the
monitor's history or live alone. URLs are read as the history store reads them
(`monitor._store`): sqlite:///relative.db, sqlite:////absolute.db, a bare path, postgresql://...
A request is stored once: `digest` (BLAKE2b of the log line) is unique and a second copy is skipped.
Checks read sums per group, period and stratum (`aggregates`), one GROUP BY in the database, so a
check over millions of rows never loads them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    func,
    insert,
    inspect,
    literal_column,
    select,
    text,
)
from sqlalchemy.exc import SQLAlchemyError

from specaudit.errors import InputError
from specaudit.monitor._store import _configure_sqlite, _parse_url, utc_now

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Connection, Engine

# The strata every comparison is adjusted over (see _strata.py).
STRATA = ("prompt_bin", "output_bin", "sampling_bin", "load_bin")
# Per-request columns summed per group and stratum: (x, y) pairs for the two ratio metrics.
METRIC_COLUMNS = {"acceptance": ("proposed", "accepted"), "latency_per_token": ("output_tokens", "latency_s")}

_metadata = MetaData()
REQUESTS = Table(
    "traffic_requests",
    _metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("digest", String(32), nullable=False, unique=True),
    Column("time", Float, nullable=False),
    Column("prompt_tokens", Integer),
    Column("output_tokens", Integer),
    Column("proposed", Integer),
    Column("accepted", Integer),
    Column("latency_s", Float, nullable=False),
    Column("ttft_s", Float),
    Column("temperature", Float, nullable=False),
    Column("in_flight", Integer, nullable=False),
    Column("status", Integer, nullable=False),
    Column("source", String(64), nullable=False),
    Column("labels", Text, nullable=False),
    Column("language", String(16), nullable=False),
    Column("language_confidence", Float),
    Column("text", Text),
    Column("prompt_bin", Integer, nullable=False),
    Column("output_bin", Integer, nullable=False),
    Column("sampling_bin", Integer, nullable=False),
    Column("load_bin", Integer, nullable=False),
)
Index("traffic_requests_time", REQUESTS.c.time)
Index("traffic_requests_language", REQUESTS.c.language)
INGESTS = Table(
    "traffic_ingests",
    _metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time", String(40), nullable=False),
    Column("sources", Text, nullable=False),
    Column("lines", Integer, nullable=False),
    Column("added", Integer, nullable=False),
)
STORED = [c.name for c in REQUESTS.columns if c.name != "id"]


@dataclass(frozen=True)
class Group:
    """How requests are grouped: by the detected language, or by one of their labels."""

    key: str  # "language" or "label:NAME"

    @classmethod
    def parse(cls, spelling: str) -> Group:
        if spelling == "language" or (spelling.startswith("label:") and len(spelling) > len("label:")):
            return cls(spelling)
        raise InputError(f"--group-by {spelling!r}: write 'language' or 'label:NAME' (a key of the log lines' labels, e.g. label:tenant)")

    def column(self, kind: str) -> Any:
        if self.key == "language":
            return REQUESTS.c.language
        name = self.key.split(":", 1)[1]
        if kind == "postgresql":
            return func.coalesce(text(f"(labels::json ->> {_quoted(name)})"), "_none")
        return func.coalesce(func.json_extract(REQUESTS.c.labels, f"$.{_quoted_path(name)}"), "_none")


def _quoted(name: str) -> str:
    return "'" + name.replace("'", "''") + "'"


def _quoted_path(name: str) -> str:
    return '"' + name.replace('"', '\\"') + '"'


class TrafficStore:
    """Requests served, for `traffic report` and `traffic check`. Use `open_traffic_store`; close it (or `with`)."""

    def __init__(self, engine: Engine, url: str, kind: str) -> None:
        self._engine = engine
        self.url = url
        self.kind = kind

    def __enter__(self) -> TrafficStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self._engine.dispose()

    @contextmanager
    def _conn(self) -> Iterator[Connection]:
        try:
            with self._engine.begin() as conn:
                yield conn
        except SQLAlchemyError as err:
            reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
            raise InputError(f"traffic store {self.url}: the database reported: {reason}") from None

    def add(self, frame: pd.DataFrame) -> int:
        """Insert the rows of `frame` (columns STORED) whose digest is new; the number added."""
        if frame.empty:
            return 0
        frame = frame[STORED].astype(object).where(frame[STORED].notna(), None)
        with self._conn() as conn:
            before = conn.execute(select(func.count()).select_from(REQUESTS)).scalar_one()
            if self.kind == "sqlite":
                # The driver's executemany on plain tuples: SQLAlchemy's per-row parameter dicts cost more than the insert.
                columns = ", ".join(STORED)
                marks = ", ".join("?" * len(STORED))
                conn.exec_driver_sql(
                    f"INSERT OR IGNORE INTO {REQUESTS.name} ({columns}) VALUES ({marks})", list(frame.itertuples(index=False, name=None))
                )
            else:
                rows = [dict(zip(STORED, values)) for values in frame.itertuples(index=False, name=None)]
                from sqlalchemy.dialects.postgresql import insert as pg_insert

                conn.execute(pg_insert(REQUESTS).on_conflict_do_nothing(index_elements=["digest"]), rows)
            after = conn.execute(select(func.count()).select_from(REQUESTS)).scalar_one()
        return int(after - before)

    def note_ingest(self, sources: Sequence[str], lines: int, added: int) -> None:
        with self._conn() as conn:
            conn.execute(insert(INGESTS), [{"time": utc_now(), "sources": json.dumps(list(sources)), "lines": lines, "added": added}])

    def count(self) -> int:
        with self._conn() as conn:
            return int(conn.execute(select(func.count()).select_from(REQUESTS)).scalar_one())

    def time_at(self, rank: int) -> float | None:
        """The arrival time of the `rank`-th request (1-based) in time order, or None past the end."""
        with self._conn() as conn:
            return conn.execute(select(REQUESTS.c.time).order_by(REQUESTS.c.time).offset(rank - 1).limit(1)).scalar()

    def aggregates(self, group: Group, *, baseline_until: float | None = None, since: float | None = None) -> pd.DataFrame:
        """Sums per (group, period, stratum): n and, per metric, n with x > 0, Σx, Σy, Σx², Σy², Σxy.
        `period` is 0 for requests before `baseline_until` (the baseline), else 1."""
        import pandas as pd

        grp = group.column(self.kind).label("grp")
        period = (REQUESTS.c.time >= baseline_until).cast(Integer) if baseline_until is not None else literal_column("1")
        sums = [func.count().label("n")]
        for metric, (x_name, y_name) in METRIC_COLUMNS.items():
            x, y = REQUESTS.c[x_name], REQUESTS.c[y_name]
            ok = (REQUESTS.c.status < 400) & (x > 0) & y.is_not(None)
            xs = func.coalesce(func.sum(_when(ok, x)), 0)
            ys = func.coalesce(func.sum(_when(ok, y)), 0)
            sums += [
                func.sum(_when(ok, 1)).label(f"{metric}_n"),
                xs.label(f"{metric}_x"),
                ys.label(f"{metric}_y"),
                func.coalesce(func.sum(_when(ok, x * x)), 0).label(f"{metric}_xx"),
                func.coalesce(func.sum(_when(ok, y * y)), 0).label(f"{metric}_yy"),
                func.coalesce(func.sum(_when(ok, x * y)), 0).label(f"{metric}_xy"),
            ]
        keys = [grp, period.label("period"), *(REQUESTS.c[s] for s in STRATA)]
        query = select(*keys, *sums)
        if since is not None:
            query = query.where(REQUESTS.c.time >= since)
        query = query.group_by(*(literal_column(str(i)) for i in range(1, len(keys) + 1)))
        with self._conn() as conn:
            frame = pd.DataFrame(conn.execute(query).all(), columns=["grp", "period", *STRATA, *(s.name for s in sums)])
        return frame.fillna(0)

    def requests(self, columns: Sequence[str]) -> pd.DataFrame:
        """Whole columns of every stored request (for the fallback evaluation; small stores)."""
        import pandas as pd

        with self._conn() as conn:
            rows = conn.execute(select(*(REQUESTS.c[c] for c in columns))).all()
        return pd.DataFrame(rows, columns=list(columns))


def _when(condition: Any, value: Any) -> Any:
    from sqlalchemy import case

    return case((condition, value), else_=None)


def open_traffic_store(url: str | Path, *, create: bool = True) -> TrafficStore:
    """Open (with `create`, make) the traffic store at `url`; a store that does not exist is an InputError without `create`."""
    parsed, kind, path = _parse_url(str(url))
    if kind == "sqlite":
        if path.is_dir():
            raise InputError(f"--store {url!r} is a folder; name a file such as {path / 'traffic.db'}")
        if not path.exists():
            if not create:
                raise InputError(f"no traffic store at {path}; ingest a log first with `specaudit traffic ingest LOG --store {url}`")
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed)
        _configure_sqlite(engine)
        shown = str(path)
    else:
        try:
            engine = create_engine(parsed, pool_pre_ping=True)
        except ImportError:
            raise InputError("PostgreSQL stores need the psycopg driver; install it with pip install 'specaudit[postgres]'") from None
        shown = parsed.render_as_string(hide_password=True)
    store = TrafficStore(engine, shown, kind)
    try:
        with store._conn() as conn:
            tables = set(inspect(conn).get_table_names())
            if REQUESTS.name not in tables:
                if not create:
                    raise InputError(
                        f"{shown} holds no traffic (no {REQUESTS.name} table); ingest a log first with `specaudit traffic ingest`"
                    )
                _metadata.create_all(conn)
    except BaseException:
        engine.dispose()
        raise
    return store


def finite_or_none(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None
