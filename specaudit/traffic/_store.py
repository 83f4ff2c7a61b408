"""The traffic store: one row per served request, in SQLite (default) or PostgreSQL, via SQLAlchemy Core.

Its own tables (`traffic_requests`, `traffic_ingests`), so it can share a database with the
monitor's history or live alone. URLs are read as the history store reads them
(`monitor._store`): sqlite:///relative.db, sqlite:////absolute.db, a bare path, postgresql://...
A request is stored once: `digest` (BLAKE2b of the log line) is unique and a second copy is skipped.

Checks read sums per group, period and stratum (`aggregates`). Ingest keeps those sums per hour,
language, label set and stratum in a roll-up table (`traffic_rollup`, see _rollup.py), so a check
over ten million requests reads about a hundred thousand roll-up rows, plus the rows of the hour
the baseline ends in; the per-request table stays for regrouping and for the fallback rule.
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
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
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
from specaudit.traffic._rollup import HOUR_S, ROW_COLUMNS, STRATA, SUM_COLUMNS, hour_of, rollup_sums

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.engine import Connection, Engine

SQLITE_CACHE_KB = 65536
# Rows per read when the roll-up is rebuilt from the requests (a store made before it existed).
REBUILD_ROWS = 500_000

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
ROLLUP = Table(
    "traffic_rollup",
    _metadata,
    Column("hour", BigInteger, nullable=False),
    Column("language", String(16), nullable=False),
    Column("labels", Text, nullable=False),
    *(Column(s, Integer, nullable=False) for s in STRATA),
    *(Column(name, BigInteger if name == "n" or name.endswith("_n") else Float, nullable=False) for name in SUM_COLUMNS),
)
ROLLUP_KEY = ("hour", "language", "labels", *STRATA)
Index("traffic_rollup_key", *(ROLLUP.c[k] for k in ROLLUP_KEY), unique=True)


@dataclass(frozen=True)
class Group:
    """How requests are grouped: by the detected language, or by one of their labels."""

    key: str  # "language" or "label:NAME"

    @classmethod
    def parse(cls, spelling: str) -> Group:
        if spelling == "language" or (spelling.startswith("label:") and len(spelling) > len("label:")):
            return cls(spelling)
        raise InputError(f"--group-by {spelling!r}: write 'language' or 'label:NAME' (a key of the log lines' labels, e.g. label:tenant)")

    def column(self, kind: str, table: Table | None = None) -> Any:
        table = REQUESTS if table is None else table
        if self.key == "language":
            return table.c.language
        name = self.key.split(":", 1)[1]
        if kind == "postgresql":
            return func.coalesce(text(f"({table.name}.labels::json ->> {_quoted(name)})"), "_none")
        return func.coalesce(func.json_extract(table.c.labels, f"$.{_quoted_path(name)}"), "_none")

    def of_rows(self, frame: pd.DataFrame, store: str) -> pd.Series:
        """The group of each request row (language, or the label's value; "_none" without it); an InputError
        naming `store` for labels that are not what ingest writes (a JSON object of strings)."""
        if self.key == "language":
            return frame["language"].astype(str)
        name = self.key.split(":", 1)[1]
        values = {}
        for stored in frame["labels"].unique():
            try:
                labels = json.loads(stored)
            except (TypeError, ValueError):
                labels = None
            value = labels.get(name, "_none") if isinstance(labels, dict) else None
            if not isinstance(value, str):
                raise InputError(
                    f"traffic store {store}: a request's labels {str(stored)[:60]!r} are not a JSON object of names to strings "
                    "(edited by hand?); ingest the logs into a new store"
                )
            values[stored] = value
        return frame["labels"].map(values)


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

    @contextmanager
    def ingesting(self) -> Iterator[Ingesting]:
        """One transaction for a whole ingest: on any error (a bad line in the last file, Ctrl-C) nothing
        of it is stored and the store is as it was."""
        with self._conn() as conn:
            yield Ingesting(self, conn)

    def add(self, frame: pd.DataFrame) -> int:
        """Insert the rows of `frame` (columns STORED) whose digest is new, in a transaction of their own."""
        with self.ingesting() as ingesting:
            return ingesting.add(frame)

    def _add(self, conn: Connection, frame: pd.DataFrame) -> int:
        """Insert the rows of `frame` whose digest is new, and add them to the roll-up; the number added."""
        if frame.empty:
            return 0
        if self.kind == "postgresql":
            # One writer at a time: the rows after `before` must be this transaction's alone.
            conn.exec_driver_sql(f"LOCK TABLE {REQUESTS.name} IN SHARE ROW EXCLUSIVE MODE")
        before = conn.execute(select(func.coalesce(func.max(REQUESTS.c.id), 0))).scalar_one()
        if self.kind == "sqlite":
            # The driver's executemany on plain tuples: SQLAlchemy's per-row parameter dicts cost more than the insert.
            columns = ", ".join(STORED)
            marks = ", ".join("?" * len(STORED))
            conn.exec_driver_sql(
                f"INSERT INTO {REQUESTS.name} ({columns}) VALUES ({marks}) ON CONFLICT (digest) DO NOTHING", _tuples(frame, STORED)
            )
        else:
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            rows = [dict(zip(STORED, values)) for values in _tuples(frame, STORED)]
            conn.execute(pg_insert(REQUESTS).on_conflict_do_nothing(index_elements=["digest"]), rows)
        added = conn.execute(select(func.count()).select_from(REQUESTS).where(REQUESTS.c.id > before)).scalar_one()
        if added < len(frame):
            new = {d for (d,) in conn.execute(select(REQUESTS.c.digest).where(REQUESTS.c.id > before))}
            frame = frame[frame["digest"].isin(new)]
        self._roll_up(conn, frame)
        return int(added)

    def _roll_up(self, conn: Connection, rows: pd.DataFrame) -> None:
        """Add the sums of `rows` (new requests) to the roll-up, per hour, language, labels and stratum."""
        if rows.empty:
            return
        sums = rollup_sums(rows.assign(hour=hour_of(rows["time"].to_numpy(dtype=float))), list(ROLLUP_KEY))
        if self.kind == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        else:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        statement = dialect_insert(ROLLUP)
        statement = statement.on_conflict_do_update(
            index_elements=list(ROLLUP_KEY), set_={c: ROLLUP.c[c] + statement.excluded[c] for c in SUM_COLUMNS}
        )
        conn.execute(statement, sums.to_dict("records"))

    def rebuild_rollup(self) -> None:
        """Recompute the roll-up from the requests (a store made before the roll-up, or rows inserted by hand)."""

        with self._conn() as conn:
            conn.execute(ROLLUP.delete())
            last = 0
            while True:
                query = select(REQUESTS.c.id, *(REQUESTS.c[c] for c in ROW_COLUMNS)).where(REQUESTS.c.id > last)
                chunk = conn.execute(query.order_by(REQUESTS.c.id).limit(REBUILD_ROWS)).all()
                if not chunk:
                    break
                frame = self._frame(chunk, ["id", *ROW_COLUMNS])
                last = int(frame["id"].max())
                self._roll_up(conn, frame)

    def count(self) -> int:
        with self._conn() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(ROLLUP.c.n), 0))).scalar_one())

    def time_at(self, rank: int) -> float | None:
        """The arrival time of the `rank`-th request (1-based) in time order, or None past the end: the
        roll-up's counts per hour find the hour, that hour's rows the time."""
        import numpy as np

        with self._conn() as conn:
            query = select(ROLLUP.c.hour, func.sum(ROLLUP.c.n).label("n")).group_by(ROLLUP.c.hour).order_by(ROLLUP.c.hour)
            per_hour = self._frame(conn.execute(query).all(), ["hour", "n"])
            hours = per_hour["hour"].to_numpy(dtype=np.int64)
            through = np.cumsum(per_hour["n"].to_numpy(dtype=np.int64))
            at = int(np.searchsorted(through, rank))
            if at >= len(hours):
                return None
            times = np.sort(self._hour_rows(conn, int(hours[at]), ["time"])["time"].to_numpy(dtype=float))
            before = int(through[at - 1]) if at else 0
            if len(times) != int(through[at]) - before:
                raise InputError(
                    f"traffic store {self.url}: its roll-up counts {int(through[at]) - before} requests in the hour from "
                    f"{int(hours[at]) * HOUR_S:.0f} (Unix seconds) but the store holds {len(times)} there (edited by hand?); "
                    "ingest the logs into a new store"
                )
            return float(times[rank - before - 1])

    def _hour_rows(self, conn: Connection, hour: int, columns: Sequence[str]) -> pd.DataFrame:
        """The request rows (`columns`) that arrived in `hour` (hour_of, as the roll-up counts them)."""

        # A second of margin each side for the float rounding of time / 3600; hour_of decides.
        start = hour * HOUR_S
        query = select(*(REQUESTS.c[c] for c in columns)).where(REQUESTS.c.time >= start - 1, REQUESTS.c.time < start + HOUR_S + 1)
        frame = self._frame(conn.execute(query).all(), columns)
        return frame[hour_of(frame["time"].to_numpy(dtype=float)) == hour]

    def _frame(self, rows: Sequence[Any], columns: Sequence[str]) -> pd.DataFrame:
        """`rows` read from the store as a frame, refused (InputError) where a number column holds text
        or a non-finite number: SQLite keeps what a hand edit writes, whatever the column's type."""
        import numpy as np
        import pandas as pd

        frame = pd.DataFrame(rows, columns=list(columns))
        for name in columns:
            if name in ("language", "labels", "grp", "source", "digest", "text"):
                continue
            column = frame[name]
            numbers = column if pd.api.types.is_numeric_dtype(column) else pd.to_numeric(column, errors="coerce")
            values = numbers.to_numpy(dtype=float, na_value=np.nan)
            bad = (np.isnan(values) & column.notna().to_numpy()) | np.isinf(values)
            if bad.any():
                value = column[bad].iloc[0]
                shown = repr(value.item() if isinstance(value, np.generic) else value)[:40]
                raise InputError(
                    f"traffic store {self.url}: its {name} column holds {shown}, not a finite number (edited by hand?); "
                    "ingest the logs into a new store"
                )
            frame[name] = numbers
        return frame

    def aggregates(self, group: Group, *, baseline_until: float | None = None) -> pd.DataFrame:
        """Sums per (group, period, stratum): n and, per metric, n with x > 0, Σx, Σy, Σx², Σy², Σxy.
        `period` is 0 for requests before `baseline_until` (the baseline), else 1. Whole hours come
        from the roll-up; the hour the baseline ends in from its rows."""
        import pandas as pd

        grp = group.column(self.kind, ROLLUP).label("grp")
        cut = int(hour_of(baseline_until)) if baseline_until is not None else None
        period = (ROLLUP.c.hour > cut).cast(Integer) if cut is not None else literal_column("1")
        keys = [grp, period.label("period"), *(ROLLUP.c[s] for s in STRATA)]
        query = select(*keys, *(func.sum(ROLLUP.c[c]).label(c) for c in SUM_COLUMNS))
        if cut is not None:
            query = query.where(ROLLUP.c.hour != cut)
        query = query.group_by(*(literal_column(str(i)) for i in range(1, len(keys) + 1)))
        columns = ["grp", "period", *STRATA, *SUM_COLUMNS]
        with self._conn() as conn:
            frame = self._frame(conn.execute(query).all(), columns)
            if cut is not None:
                rows = self._hour_rows(conn, cut, ROW_COLUMNS)
                rows = rows.assign(grp=group.of_rows(rows, self.url), period=(rows["time"] >= baseline_until).astype(int))
                frame = pd.concat([frame, rollup_sums(rows, ["grp", "period", *STRATA])], ignore_index=True)
        frame[SUM_COLUMNS] = frame[SUM_COLUMNS].astype(float)
        return frame.groupby(["grp", "period", *STRATA], as_index=False)[SUM_COLUMNS].sum()

    def requests(self, columns: Sequence[str]) -> pd.DataFrame:
        """Whole columns of every stored request (for the fallback evaluation; small stores)."""

        with self._conn() as conn:
            rows = conn.execute(select(*(REQUESTS.c[c] for c in columns))).all()
        return self._frame(rows, columns)


@dataclass(frozen=True)
class Ingesting:
    """The transaction of one ingest (`TrafficStore.ingesting`): rows added, then the ingest noted."""

    store: TrafficStore
    conn: Connection

    def add(self, frame: pd.DataFrame) -> int:
        """Insert the rows of `frame` whose digest is new, with their roll-up sums; the number added."""
        return self.store._add(self.conn, frame)

    def note(self, sources: Sequence[str], lines: int, added: int) -> None:
        self.conn.execute(insert(INGESTS), [{"time": utc_now(), "sources": json.dumps(list(sources)), "lines": lines, "added": added}])


def _bigger_cache(dbapi_connection: Any, _record: object) -> None:
    # 64 MB of page cache (the default is 2 MB): the digest index of millions of requests is read at every insert.
    dbapi_connection.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KB}")


def _tuples(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple]:
    """The rows of `frame` as tuples of plain Python values, None where missing (column by column: fast)."""
    values = []
    for name in columns:
        column = frame[name]
        values.append(column.astype(object).where(column.notna(), None).tolist() if column.hasnans else column.tolist())
    return list(zip(*values))


def open_traffic_store(url: str | Path, *, create: bool = True) -> TrafficStore:
    """Open (with `create`, make) the traffic store at `url`; a store that does not exist is an InputError without `create`."""
    if not str(url).strip():
        raise InputError("--store is empty; name a store such as sqlite:///traffic.db")
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
        event.listen(engine, "connect", _bigger_cache)
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
            if REQUESTS.name not in tables and not create:
                raise InputError(f"{shown} holds no traffic (no {REQUESTS.name} table); ingest a log first with `specaudit traffic ingest`")
            _metadata.create_all(conn)
        if REQUESTS.name in tables and ROLLUP.name not in tables:
            store.rebuild_rollup()  # a store from before the roll-up
    except BaseException:
        engine.dispose()
        raise
    return store


def finite_or_none(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None
