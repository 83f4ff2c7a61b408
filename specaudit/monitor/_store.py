"""The history store: one row per audited run, per-group metric rows, verdicts, tags, baselines.

SQLite by default (a file, WAL journal, every write in a `BEGIN IMMEDIATE` transaction so two
scheduled jobs appending at once queue instead of failing), PostgreSQL for teams. Both go
through SQLAlchemy Core. Opening a store never changes a file that is not already a specaudit
store: it is inspected first, read-only, and refused with an InputError if it is foreign,
corrupted or from a newer specaudit.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, and_, create_engine, delete, event, func, insert, inspect, or_, select, text, true
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError

import specaudit.monitor._schema as _schema
from specaudit.contracts import CheckStatus
from specaudit.contracts.snapshot import Snapshot, load_snapshot_and_view, parse_verdict, spelt, validate_snapshot
from specaudit.errors import InputError
from specaudit.monitor._snapshot import MetricPoint, RunIdentity, canonical_json, snapshot_digest, summarize, utc_now

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy import ColumnElement
    from sqlalchemy.engine import URL, Connection

STORE_ENV = "SPECAUDIT_STORE"
DEFAULT_STORE = "sqlite:///specaudit-history.db"
# SQLite waits this long for another writer's transaction before giving up.
BUSY_TIMEOUT_MS = 30_000
# Key of the PostgreSQL advisory lock that serialises migrations between concurrent jobs.
_MIGRATION_LOCK = 0x5BEC_A0D1


@dataclass(frozen=True)
class StoredRun(RunIdentity):
    """One audited run in the history store (the snapshot itself is fetched on demand)."""

    id: int
    digest: str
    ingested: str
    environment: str
    source: str
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"#{self.id} {self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **asdict(self), "tags": dict(self.tags)}


# The tag that marks a stored snapshot of an audit run the store already holds (same run folder name
# and creation time): a re-analysis of the same records, not a new audit.
SAME_RUN_TAG = "same_run_as"


@dataclass(frozen=True)
class AddResult:
    run: StoredRun
    added: bool  # False: the same snapshot (same content digest) was already stored
    same_run: StoredRun | None = None  # stored, but the store already holds a snapshot of this audit run (SAME_RUN_TAG)

    @property
    def note(self) -> str | None:
        """One sentence where the snapshot is not a new audit, else None."""
        if not self.added:
            return (
                f"run {self.run.label} was already stored (the same snapshot: the same records analysed the same way); "
                "it is not a new audit, and nothing was added"
            )
        if self.same_run is not None:
            return (
                f"run {self.run.label} re-analyses the records of run {self.same_run.label} (same run folder, created "
                f"{self.same_run.created}): it is not a new audit, and a check against it compares the run with itself"
            )
        return None


class _Conflict(InputError):
    """A uniqueness conflict with a concurrent writer (PostgreSQL); callers may treat it as done."""


def _damaged_metric(row: Mapping[str, Any]) -> str:
    """What is wrong with a stored metric row ("" when nothing): numbers where numbers belong."""
    for name in ("value", "ci_low", "ci_high"):
        value = row[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)):
            return f"{name} is {value!r}, not a number"
    for name in ("n_prompts", "n_tokens"):
        value = row[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"{name} is {value!r}, not an integer"
    return ""


def parse_tags(items: Sequence[str] | None) -> dict[str, str]:
    """{key: value} from KEY=VALUE strings (the CLI's repeated --tag)."""
    tags = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--tag {item!r}: write KEY=VALUE, e.g. --tag region=eu")
        tags[key.strip()] = value.strip()
    return tags


def default_store_url() -> str:
    return os.environ.get(STORE_ENV) or DEFAULT_STORE


def _parse_url(url: str) -> tuple[URL, str, Path | None]:
    """(SQLAlchemy URL, kind, sqlite path or None) for a store URL or a bare SQLite file path."""
    if "://" not in url:
        return make_url(f"sqlite:///{url}"), "sqlite", Path(url)
    scheme = url.split("://", 1)[0].lower()
    if scheme == "postgres":  # the short spelling many hosting providers print
        url = "postgresql" + url[len("postgres") :]
        scheme = "postgresql"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InputError(
            f"--store {url!r} is not a database URL; write sqlite:///path/to/history.db or postgresql://user@host/db"
        ) from None
    if scheme in ("sqlite", "sqlite+pysqlite"):
        if not parsed.database or parsed.database == ":memory:":
            raise InputError(f"--store {url!r} names no file; an in-memory store would be lost, write sqlite:///path/to/history.db")
        return parsed, "sqlite", Path(parsed.database)
    if scheme == "postgresql":
        return parsed.set(drivername="postgresql+psycopg"), "postgresql", None
    if scheme.startswith("postgresql+"):
        return parsed, "postgresql", None
    raise InputError(f"--store {url!r}: unknown scheme '{scheme}'; use sqlite:///path/to/history.db or postgresql://user@host/db")


def open_store(url: str | None = None, *, create: bool = True) -> HistoryStore:
    """Open (and, with `create`, initialise) the history store at `url`.

    `url`: sqlite:///relative.db, sqlite:////absolute.db, a bare file path, or postgresql://...;
    default $SPECAUDIT_STORE, else sqlite:///specaudit-history.db. Without `create`, a store that
    does not exist yet is an InputError (reading commands must not create empty files).
    """
    url = url or default_store_url()
    parsed, kind, path = _parse_url(url)
    shown = parsed.render_as_string(hide_password=True) if kind != "sqlite" else str(path)
    if kind == "sqlite":
        if path.is_dir():
            raise InputError(f"--store {url!r} is a folder; name a file such as {path / 'history.db'}")
        if not path.exists():
            if not create:
                raise InputError(f"no history store at {path}; add a snapshot first with `specaudit monitor add SNAPSHOT --store {url}`")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:  # a file where a folder should be, or a folder we may not write
                raise InputError(f"--store {url!r}: cannot create the folder {path.parent} ({err.strerror})") from None
        engine = create_engine(parsed)
        _configure_sqlite(engine)
    else:
        try:
            engine = create_engine(parsed, pool_pre_ping=True)
        except NoSuchModuleError:
            raise InputError(f"--store {url!r}: unknown PostgreSQL driver '{parsed.drivername}'; write postgresql://user@host/db") from None
        except ImportError as err:
            raise InputError(
                f"PostgreSQL stores need the {err.name or 'psycopg'} driver; install it with pip install 'specaudit[postgres]'"
            ) from None
    store = HistoryStore(engine, shown, kind)
    try:
        store._prepare(create=create)
    except BaseException:
        engine.dispose()
        raise
    return store


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # We emit BEGIN ourselves: the sqlite3 module's implicit transactions start too late
        # (at the first write), which is what turns concurrent writers into "database is locked".
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        connection.exec_driver_sql(f"BEGIN {mode}")


def _reason(err: SQLAlchemyError) -> str:
    original = getattr(err, "orig", None) or err
    return str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__


class HistoryStore:
    """Snapshots of audited runs over time. Use `open_store`; close it (or use `with`)."""

    def __init__(self, engine: Engine, url: str, kind: str) -> None:
        self._engine = engine
        # Reads take no write lock, so a trend report never holds up a scheduled writer.
        self._reader = engine.execution_options(sqlite_begin="DEFERRED")
        self.url = url
        self.kind = kind
        self._metadata, self._t = _schema.current_tables()
        self.schema_version = 0

    # ------------------------------------------------------------------ plumbing
    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Database failures become one sentence naming the store; nothing half-written (transactions roll back)."""
        try:
            yield
        except InputError:
            raise
        except IntegrityError as err:
            raise _Conflict(f"history store {self.url}: a concurrent job wrote the same entry ({_reason(err)}); retry") from None
        except SQLAlchemyError as err:
            reason = _reason(err)
            low = reason.lower()
            if "file is not a database" in low or "not a database" in low:
                hint = "it is not a SQLite database (another kind of file, or corrupted); nothing was changed: point --store at a specaudit history file or a new path"
            elif "malformed" in low or "corrupt" in low:
                hint = f"the database file is corrupted ({reason}); nothing was changed: restore it from a backup or start a new store"
            elif self.kind == "postgresql" and ("connection" in low or "connect" in low):
                hint = f"cannot connect ({reason}); check that the server is running and the URL, user and database are right"
            elif "locked" in low or "busy" in low:
                hint = f"another job held the database longer than {BUSY_TIMEOUT_MS // 1000} s ({reason}); retry"
            else:
                hint = f"the database reported: {reason}"
            raise InputError(f"history store {self.url}: {hint}") from None

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._errors(), self._engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._errors(), self._reader.begin() as conn:
            yield conn

    def _prepare(self, *, create: bool) -> None:
        """Inspect read-only, refuse foreign/damaged/newer stores, then create or migrate."""
        with self._read() as conn:
            names = set(inspect(conn).get_table_names())
            ours = {n for n in names if n.startswith(_schema.PREFIX)}
            version = None
            if _schema.VERSION_TABLE in names:
                version = conn.execute(select(func.max(self._t["version"].c.version))).scalar()
        if self.kind == "sqlite" and names and _schema.VERSION_TABLE not in names:
            shown = ", ".join(sorted(names)[:5])
            raise InputError(
                f"{self.url} is a SQLite database but not a specaudit history store (it has tables {shown}); "
                "nothing was changed: point --store at a new file"
            )
        if ours and version is None:
            raise InputError(
                f"history store {self.url} has specaudit tables but no schema version; it is damaged, "
                "nothing was changed: restore it from a backup or start a new store"
            )
        if version is not None and version > _schema.LATEST:
            raise InputError(
                f"history store {self.url} has schema version {version}, newer than this specaudit understands "
                f"({_schema.LATEST}); upgrade specaudit"
            )
        if version is None and not create:
            raise InputError(f"no specaudit history in {self.url}; add a snapshot first with `specaudit monitor add SNAPSHOT`")
        if self.kind == "sqlite":
            self._enable_wal()
        if version != _schema.LATEST:
            self.migrate()
        else:
            self.schema_version = version

    def _enable_wal(self) -> None:
        # journal_mode cannot change inside a transaction, and WAL persists in the file: set once.
        with self._errors():
            raw = self._engine.raw_connection()
            try:
                cursor = raw.cursor()
                mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() != "wal":
                    cursor.execute("PRAGMA journal_mode = WAL")
                cursor.close()
            finally:
                raw.close()

    def migrate(self, target: int | None = None) -> int:
        """Apply pending migrations up to `target` (default: latest) in one transaction; the new version."""
        target = _schema.LATEST if target is None else target
        with self._write() as conn:
            if self.kind == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            self._t["version"].create(conn, checkfirst=True)
            # Re-read inside the lock: a concurrent job may have migrated meanwhile.
            current = conn.execute(select(func.max(self._t["version"].c.version))).scalar() or 0
            for version, description, apply in _schema.MIGRATIONS:
                if current < version <= target:
                    apply(conn)
                    conn.execute(insert(self._t["version"]).values(version=version, applied=utc_now(), description=description))
                    current = version
        self.schema_version = current
        return current

    # --------------------------------------------------------------------- write
    def add(
        self,
        snapshot: str | Path | Mapping[str, Any],
        *,
        environment: str = "",
        tags: Mapping[str, str] | None = None,
        source: str | None = None,
    ) -> AddResult:
        """Store a snapshot (path, run folder or dict). Adding the same snapshot twice stores it once."""
        if source is None:
            source = "" if isinstance(snapshot, Mapping) else str(snapshot)
        snapshot, typed = load_snapshot_and_view(snapshot)  # stored as read (the digest is the file's), summarised typed
        summary = summarize(typed)
        digest = snapshot_digest(snapshot)
        runs = self._t["runs"]
        all_tags = {
            "model": summary.target,
            "draft": summary.draft,
            "environment": environment,
            "prompt_set": f"{summary.prompt_set}@{summary.prompt_set_version}" if summary.prompt_set else "",
            **{str(k): str(v) for k, v in (tags or {}).items()},
        }
        row = dict(
            **summary.identity(),
            digest=digest,
            ingested=utc_now(),
            snapshot_schema=int(snapshot["schema_version"]),
            environment=environment,
            source=source,
            snapshot=canonical_json(snapshot),
        )
        try:
            with self._write() as conn:
                existing = conn.execute(select(runs.c.id).where(runs.c.digest == digest)).scalar()
                if existing is not None:
                    return AddResult(self._runs_where(conn, runs.c.id == existing)[0], added=False)
                # an audit run is its folder and its creation time: another snapshot of it re-analyses the same records
                same = (
                    self._runs_where(conn, runs.c.name == summary.name, runs.c.created == summary.created, limit=1)
                    if typed.run.created
                    else []
                )
                if same:
                    all_tags[SAME_RUN_TAG] = str(same[0].id)
                run_id = conn.execute(insert(runs).values(**row)).inserted_primary_key[0]
                if summary.points:
                    conn.execute(
                        insert(self._t["metrics"]),
                        [
                            dict(
                                run_id=run_id,
                                dimension=p.dimension,
                                group_name=p.group,
                                metric=p.metric,
                                value=p.value,
                                ci_low=p.ci_low,
                                ci_high=p.ci_high,
                                n_prompts=p.n_prompts,
                                n_tokens=p.n_tokens,
                            )
                            for p in summary.points
                        ],
                    )
                if summary.engine_verdicts:
                    conn.execute(
                        insert(self._t["equivalence"]),
                        [dict(run_id=run_id, engine=e, verdict=v) for e, v in summary.engine_verdicts.items()],
                    )
                conn.execute(insert(self._t["tags"]), [dict(run_id=run_id, key=k, value=v) for k, v in all_tags.items()])
                return AddResult(self._runs_where(conn, runs.c.id == run_id)[0], added=True, same_run=same[0] if same else None)
        except _Conflict:
            # PostgreSQL: a concurrent job stored the very same snapshot first; that is success.
            with self._read() as conn:
                found = self._runs_where(conn, runs.c.digest == digest)
            if found:
                return AddResult(found[0], added=False)
            raise

    def set_baseline(self, ref: str | int, *, environment: str | None = None) -> StoredRun:
        """Pin run `ref` as the baseline of its environment (or of `environment`)."""
        run = self.get(ref)
        env = run.environment if environment is None else environment
        table = self._t["baselines"]
        with self._write() as conn:
            conn.execute(delete(table).where(table.c.environment == env))
            conn.execute(insert(table).values(environment=env, run_id=run.id, pinned=utc_now()))
        return run

    def clear_baseline(self, environment: str = "") -> bool:
        table = self._t["baselines"]
        with self._write() as conn:
            return conn.execute(delete(table).where(table.c.environment == environment)).rowcount > 0

    def record_alerts(self, run: StoredRun, baseline: str, checks: Sequence[Any]) -> None:
        """Keep the non-PASS checks of the latest check of `run` (earlier ones for that run are replaced)."""
        table = self._t["alerts"]
        now = utc_now()
        rows = [
            dict(
                run_id=run.id,
                checked=now,
                baseline=baseline,
                kind=c.kind,
                status=str(c.status),
                subject=c.subject,
                dimension=c.dimension,
                group_name=c.group,
                metric=c.metric,
                message=c.message,
            )
            for c in checks
            if c.status != CheckStatus.PASS
        ]
        with self._write() as conn:
            conn.execute(delete(table).where(table.c.run_id == run.id))
            if rows:
                conn.execute(insert(table), rows)

    # ---------------------------------------------------------------------- read
    def _runs_where(
        self, conn: Connection, *conditions: ColumnElement[bool], limit: int | None = None, newest_first: bool = False
    ) -> list[StoredRun]:
        runs, tags = self._t["runs"], self._t["tags"]
        columns = [c for c in runs.c if c.name not in ("snapshot", "snapshot_schema")]
        order = (runs.c.created.desc(), runs.c.id.desc()) if newest_first else (runs.c.created, runs.c.id)
        query = select(*columns).where(true(), *conditions).order_by(*order)
        if limit is not None:
            query = query.limit(limit)
        rows = conn.execute(query).mappings().all()
        ids = [r["id"] for r in rows]
        tag_map: dict[int, dict[str, str]] = {i: {} for i in ids}
        for chunk in range(0, len(ids), 500):
            for run_id, key, value in conn.execute(
                select(tags.c.run_id, tags.c.key, tags.c.value).where(tags.c.run_id.in_(ids[chunk : chunk + 500]))
            ):
                tag_map[run_id][key] = value
        # rows written before the contracts spell the equivalence status in lower case ("pass")
        return [StoredRun(**{**r, "equivalence_status": spelt(r["equivalence_status"])}, tags=tag_map[r["id"]]) for r in rows]

    def runs(
        self,
        *,
        environment: str | None = None,
        tags: Mapping[str, str] | None = None,
        before: StoredRun | None = None,
        since: StoredRun | None = None,
        limit: int | None = None,
    ) -> list[StoredRun]:
        """Stored runs, oldest first (by snapshot creation time, then storage order).

        `before`/`since`: only runs strictly before / at or after that run; `limit`: the last N.
        """
        runs, tag_table = self._t["runs"], self._t["tags"]
        conditions = []
        if environment is not None:
            conditions.append(runs.c.environment == environment)
        for key, value in (tags or {}).items():
            conditions.append(runs.c.id.in_(select(tag_table.c.run_id).where(tag_table.c.key == key, tag_table.c.value == value)))
        if before is not None:
            conditions.append(or_(runs.c.created < before.created, and_(runs.c.created == before.created, runs.c.id < before.id)))
        if since is not None:
            conditions.append(or_(runs.c.created > since.created, and_(runs.c.created == since.created, runs.c.id >= since.id)))
        with self._read() as conn:
            found = self._runs_where(conn, *conditions, limit=limit, newest_first=limit is not None)
        return sorted(found, key=lambda r: (r.created, r.id))

    def count(self) -> int:
        with self._read() as conn:
            return int(conn.execute(select(func.count()).select_from(self._t["runs"])).scalar())

    def latest(self, *, environment: str | None = None) -> StoredRun | None:
        found = self.runs(environment=environment, limit=1)
        return found[-1] if found else None

    def get(self, ref: str | int, *, environment: str | None = None) -> StoredRun:
        """A run by id (12 or #12), 'latest', name (the latest run of that name) or digest prefix."""
        runs = self._t["runs"]
        text_ref = str(ref).strip().lstrip("#")
        with self._read() as conn:
            env = [runs.c.environment == environment] if environment is not None else []
            if text_ref == "latest":
                found = self._runs_where(conn, *env, limit=1, newest_first=True)
            elif text_ref.isdigit():
                found = self._runs_where(conn, runs.c.id == int(text_ref))
            else:
                found = self._runs_where(conn, runs.c.name == text_ref, *env, limit=1, newest_first=True)
                if not found and len(text_ref) >= 6 and all(c in "0123456789abcdef" for c in text_ref.lower()):
                    found = self._runs_where(conn, runs.c.digest.startswith(text_ref.lower()), limit=1, newest_first=True)
        if not found:
            where = f" (environment {environment!r})" if environment else ""
            raise InputError(f"no run {ref!r} in history store {self.url}{where}; `specaudit monitor list` shows the stored runs")
        return found[0]

    def baseline(self, environment: str = "") -> StoredRun | None:
        table = self._t["baselines"]
        with self._read() as conn:
            run_id = conn.execute(select(table.c.run_id).where(table.c.environment == environment)).scalar()
            if run_id is None:
                return None
            return self._runs_where(conn, self._t["runs"].c.id == run_id)[0]

    def baselines(self) -> dict[str, StoredRun]:
        table = self._t["baselines"]
        with self._read() as conn:
            pins = conn.execute(select(table.c.environment, table.c.run_id)).all()
            runs = {r.id: r for r in self._runs_where(conn, self._t["runs"].c.id.in_([p[1] for p in pins]))}
        return {env: runs[run_id] for env, run_id in pins}

    def snapshot(self, run: StoredRun | str | int) -> dict:
        """The snapshot exactly as it was stored (validated, not changed)."""
        run = run if isinstance(run, StoredRun) else self.get(run)
        raw = self._stored_json(run.id, self._payload(run.id))
        validate_snapshot(raw, self._where(run.id))
        return raw

    def typed_snapshot(self, run: StoredRun | str | int) -> Snapshot:
        """A stored snapshot as the typed view the checks read."""
        run = run if isinstance(run, StoredRun) else self.get(run)
        return self._typed(run.id, self._payload(run.id))

    def _payload(self, run_id: int) -> Any:
        runs = self._t["runs"]
        with self._read() as conn:
            return conn.execute(select(runs.c.snapshot).where(runs.c.id == run_id)).scalar()

    def _where(self, run_id: int) -> str:
        return f"history store {self.url}, run #{run_id}: the stored snapshot"

    def _typed(self, run_id: int, payload: Any) -> Snapshot:
        """A stored snapshot read through the snapshot contract; a damaged one is one sentence naming the store and run."""
        return validate_snapshot(self._stored_json(run_id, payload), self._where(run_id))

    def _stored_json(self, run_id: int, payload: Any) -> Any:
        try:
            return json.loads(payload)
        except (TypeError, ValueError, RecursionError):
            raise InputError(
                f"{self._where(run_id)} is not JSON (the database was edited or damaged); remove that run or restore the store"
            ) from None

    def points(self, runs: Sequence[StoredRun]) -> dict[int, list[MetricPoint]]:
        """Metric points of each run, keyed by run id."""
        table = self._t["metrics"]
        levels = {r.id: r.ci_level for r in runs}
        out: dict[int, list[MetricPoint]] = {r.id: [] for r in runs}
        ids = list(levels)
        with self._read() as conn:
            for chunk in range(0, len(ids), 500):
                rows = conn.execute(
                    select(table)
                    .where(table.c.run_id.in_(ids[chunk : chunk + 500]))
                    .order_by(table.c.run_id, table.c.dimension, table.c.group_name, table.c.metric)
                )
                for r in rows.mappings():
                    damaged = _damaged_metric(r)
                    if damaged:  # one bad row is named and skipped: the run's other rows still load
                        warnings.warn(
                            f"history store {self.url}, run #{r['run_id']}: metric row {r['dimension']}/{r['group_name']}/"
                            f"{r['metric']} is damaged ({damaged}); it is left out",
                            stacklevel=2,
                        )
                        continue
                    out[r["run_id"]].append(
                        MetricPoint(
                            r["dimension"],
                            r["group_name"],
                            r["metric"],
                            r["value"],
                            r["ci_low"],
                            r["ci_high"],
                            r["n_prompts"],
                            r["n_tokens"],
                            levels[r["run_id"]],
                        )
                    )
        return out

    def engine_verdicts(self, runs: Sequence[StoredRun]) -> dict[int, dict[str, str]]:
        table = self._t["equivalence"]
        out: dict[int, dict[str, str]] = {r.id: {} for r in runs}
        with self._read() as conn:
            for run_id, engine, verdict in conn.execute(
                select(table.c.run_id, table.c.engine, table.c.verdict).where(table.c.run_id.in_(list(out)))
            ):
                out[run_id][engine] = spelt(verdict, parse_verdict)
        return out

    def alerts(self, runs: Sequence[StoredRun] | None = None) -> list[dict[str, Any]]:
        """Stored non-PASS checks (of each run's latest check), oldest run first."""
        table = self._t["alerts"]
        query = select(table).order_by(table.c.run_id, table.c.id)
        if runs is not None:
            query = query.where(table.c.run_id.in_([r.id for r in runs]))
        with self._read() as conn:
            return [{**dict(r), "group": r["group_name"]} for r in conn.execute(query).mappings()]

    def integrity_problems(self) -> list[str]:
        """Database-level consistency checks (SQLite integrity and foreign keys; metric rows per run)."""
        problems = []
        runs, metrics = self._t["runs"], self._t["metrics"]
        with self._read() as conn:
            if self.kind == "sqlite":
                problems += [r[0] for r in conn.exec_driver_sql("PRAGMA integrity_check").all() if r[0] != "ok"]
                problems += [f"foreign key: {tuple(r)}" for r in conn.exec_driver_sql("PRAGMA foreign_key_check").all()]
            for run_id, payload in conn.execute(select(runs.c.id, runs.c.snapshot)):
                try:
                    expected = len(summarize(self._typed(run_id, payload)).points)
                except InputError as err:
                    problems.append(str(err))
                    continue
                stored = conn.execute(select(func.count()).select_from(metrics).where(metrics.c.run_id == run_id)).scalar()
                if stored != expected:
                    problems.append(f"run #{run_id}: {stored} metric rows, its snapshot has {expected}")
        return problems
