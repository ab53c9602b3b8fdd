"""Runs the store's named queries (reliable/store/sql/<dialect>.sql) on raw DB-API connections.

Every write of the store goes through here: `write` executes one `JobWrite` (a transition, a
checkpoint or a plain event) with its event row; the other queries (registration, heartbeat,
effects, the sweeper's compare-and-set) are named in the same files. Connections come from the
store's one bounded pool, checked out per call: no thread keeps one. Group commit's batches are
the exception: the worker's writes and the sends' registrations each keep one connection of the
pool (`_kept_connection`, `register_together`), used by one batch at a time.

On PostgreSQL a single write is one statement in autocommit mode (one round trip); several writes
that must commit together share a transaction. On SQLite every call is one BEGIN IMMEDIATE
transaction under the file's in-process writer lock, and `now` is resolved first so that every
statement of a write shares one time.
"""

from __future__ import annotations

import functools
import json
import operator
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple

from sqlalchemy import Engine
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ..compat.sqlalchemy_internals import invalidate_all
from ..deadlines import deadline, unbounded
from ..states import ACTIVE_STATES
from .batching import GroupCommit, WriteResult, batch_rows, batch_write_sql
from .db import DEADLINE_WATCH, arm_connection, hung_up, pool_exhausted, pooled, sqlite_writer_lock, translate
from .schema import job_events, jobs
from .writes import JobWrite

__all__ = ["EVENT_COLUMNS", "EVENT_OWN", "JOB_COLUMNS", "LEASE_COLUMNS", "RECORD_TIMING", "SLIM_KEPT", "Registered",
           "Registering", "SqlRunner", "Tx", "load_queries"]

JOB_COLUMNS: tuple[str, ...] = tuple(c.name for c in jobs.c)
EVENT_COLUMNS: tuple[str, ...] = tuple(c.name for c in job_events.c)
#: The event's columns the insert copies from the job row it wrote: event column -> job column.
_EVENT_COPIES: Mapping[str, str] = {"to_status": "status", **{name: name for name in (
    "job_id", "version", "attempt", "attempt_id", "queue", "actor", "workflow_id", "trace_id", "retry_count",
    "checkpoint")}}
#: The event columns `write_job` returns on PostgreSQL, after the job's: those that are not a copy
#: of one of the job's, in EVENT_COLUMNS' order (sql/postgresql.sql).
EVENT_OWN: tuple[str, ...] = tuple(name for name in EVENT_COLUMNS if name not in _EVENT_COPIES)
_WRITTEN_WIDTH = len(JOB_COLUMNS) + len(EVENT_OWN)
#: A written row's event columns, in EVENT_COLUMNS' order, picked from the row in one C call.
_event_values = operator.itemgetter(*(
    JOB_COLUMNS.index(_EVENT_COPIES[name]) if name in _EVENT_COPIES else len(JOB_COLUMNS) + EVENT_OWN.index(name)
    for name in EVENT_COLUMNS))


#: The job's columns the listeners' record of an event adds to the event row (StoreCore._record).
RECORD_TIMING: tuple[str, ...] = ("started_at", "scheduled_at", "dispatched_at")
#: The job columns a `slim` write returns (JobWrite.slim): those its event record takes, the event's
#: copies and RECORD_TIMING; `write_job` returns NULL for the others.
SLIM_KEPT: frozenset[str] = frozenset(_EVENT_COPIES.values()) | frozenset(RECORD_TIMING)
_timing_values = operator.itemgetter(*(JOB_COLUMNS.index(name) for name in RECORD_TIMING))


def _written(row: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A row of `write_job`/`write_jobs` (PostgreSQL: the job's columns, then its event's own) as
    (job row, event row). One length check, then plain zips (a strict zip checks twice per row)."""
    if len(row) != _WRITTEN_WIDTH:
        raise ValueError(f"a written row has {len(row)} columns, not {_WRITTEN_WIDTH}")
    return dict(zip(JOB_COLUMNS, row)), dict(zip(EVENT_COLUMNS, _event_values(row)))  # noqa: B905


def _slim_written(row: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A slim write's row (JobWrite.slim) as (the job's RECORD_TIMING columns, event row): no job
    row built, its caller takes only the event's record."""
    if len(row) != _WRITTEN_WIDTH:
        raise ValueError(f"a written row has {len(row)} columns, not {_WRITTEN_WIDTH}")
    return dict(zip(RECORD_TIMING, _timing_values(row))), dict(zip(EVENT_COLUMNS, _event_values(row)))  # noqa: B905


@dataclass(frozen=True, slots=True)
class Registering:
    """One send's job for the registration group commit: its row (Registrations._new_job_row), its
    `enqueued` event's detail, and whether its commit waits for the WAL flush."""

    job_id: str
    row: Mapping[str, Any]
    detail: str | None
    synchronous: bool = True


class Registered(NamedTuple):
    """What registering one job did: the `enqueued` event row of a new job (else None); for a job
    that existed, its registered actor and delivery digest (both None: registered by another
    transaction meanwhile, read them again); the synchronous_commit it committed with (PostgreSQL)."""

    event: dict[str, Any] | None
    actor: str | None
    digest: str | None
    commit_mode: str | None = None


#: A new job's `enqueued` event as `register_jobs` writes it, its own columns (id, at, job_id) and
#: the row's (to_status, queue, actor, workflow_id, trace_id, detail) left to fill in.
_ENQUEUED: Mapping[str, Any] = {**dict.fromkeys(EVENT_COLUMNS), "event": "enqueued", "version": 1, "attempt": 0,
                                "lease_id": 0, "retry_count": 0}


def _enqueued_event(event_id: int, at: float, sent: Mapping[str, Any]) -> dict[str, Any]:
    """The `enqueued` event `register_jobs` wrote for `sent` (its row, with its detail): its id and
    time as the statement answered them, the rest the row's own or a new job's constants (the
    statement returns only what the database chose)."""
    return {**_ENQUEUED, "id": event_id, "job_id": sent["job_id"], "at": at, "to_status": sent["status"],
            "queue": sent["queue"], "actor": sent["actor"], "workflow_id": sent["workflow_id"],
            "trace_id": sent["trace_id"], "detail": sent["detail"]}


def _registered(row: Sequence[Any], sent: Mapping[str, Any]) -> Registered:
    """A row of `register_jobs` (job_id, event id and time, registered actor and digest, commit
    mode) for the job `sent`."""
    event = _enqueued_event(row[1], row[2], sent) if row[1] is not None else None
    return Registered(event, row[3], row[4], row[5])


LEASE_COLUMNS: tuple[str, ...] = ("job_id", "lease_id", "status", "pause_requested", "stop_requested",
                                  "cancel_requested", "lease_expires_at", "stop_requested_at")
_ACTIVE = sorted(s.value for s in ACTIVE_STATES)
#: Every live runner, for `_forked_child` (weakly: a closed store's runner goes).
_RUNNERS: weakref.WeakSet[SqlRunner] = weakref.WeakSet()


def _forked_child() -> None:
    for runner in list(_RUNNERS):
        runner.forked()


os.register_at_fork(after_in_child=_forked_child)
_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_PG_PARAM = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class _Positional:
    """A PostgreSQL query with its named parameters turned into $1..$n once, at load; as bytes when
    ASCII (every client encoding's): the driver neither encodes it per execution nor hashes it
    again for its prepared-statement lookup (a bytes object keeps its hash)."""

    sql: str | bytes
    names: tuple[str, ...]

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


def _array_literal(values: Iterable[str]) -> str:
    """`values` as a PostgreSQL array literal, for a `::text[]` parameter: sent as text, where a
    list goes through the driver's array dumper (about 2 us per statement, and 1 us per element:
    a group-commit batch's job ids)."""
    quoted = ('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values)
    return "{" + ",".join(quoted) + "}"


#: JSON without the spaces `json.dumps` puts after separators (the batches' rows, the sends' rows:
#: fewer bytes for the server to parse), its encoder made once (`json.dumps` with separators makes
#: one per call).
_compact_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


@contextmanager
def _armed(raw: Any) -> Iterator[None]:
    """A kept connection `raw` armed with the current call's deadline (reliable.deadlines) for the
    block, disarmed at its end whatever happens: never left armed with a finished call's deadline."""
    watch: tuple[Any, Any] | None = None
    try:
        until = deadline()
        if until is not None and (watch := raw.info.get(DEADLINE_WATCH)) is not None:
            arm_connection(watch[0], watch[1], raw.driver_connection, until)
        yield
    finally:
        if watch is not None:
            watch[0].disarm(watch[1])


@functools.cache
def _text_array(values: tuple[str, ...]) -> str:
    """`_array_literal` of a write's `sources` (one of a few state sets: kept once made)."""
    return _array_literal(values)


def _positional(sql: str) -> _Positional:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    converted = _PG_PARAM.sub(number, sql)
    return _Positional(converted.encode("ascii") if converted.isascii() else converted, tuple(names))


@functools.cache
def load_queries(dialect: str) -> Mapping[str, str]:
    """The named queries of `dialect` ("postgresql" or "sqlite"), read once from the package."""
    text = resources.files("reliable.store").joinpath("sql", f"{dialect}.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{dialect}.sql: query {name!r} is defined twice")
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        # One line, single spaces: the text stays short enough for the driver's statement cache.
        queries[name] = " ".join(" ".join(lines).split()).rstrip(";")
    return queries


@dataclass
class Tx:
    """A cursor inside one transaction, with the write time every statement of it shares."""

    cursor: Any
    now: float | None  # None on PostgreSQL without an injected clock: each statement asks the database


class SqlRunner:
    """The named queries of one engine's dialect, run on its pool's raw connections.

    `clock` (tests) returns the time to use instead of the database's clock, or None. `keep_sending`:
    the sends' group commit keeps a connection of its own (`register_together`); the pool must have
    room for it beside the worker's batches' (`_kept_connection`) and everything else.
    """

    def __init__(self, engine: Engine, *, clock: Callable[[], float | None] | None = None,
                 group_commit: bool = False, keep_sending: bool = False) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.queries = load_queries(self.dialect)
        self._clock = clock or (lambda: None)
        self._postgres = self.dialect == "postgresql"
        #: A pooler in transaction mode (sessions.py): no session settings, nothing prepared.
        self._pooled = pooled(engine.url)
        self._dbapi: Any = engine.dialect.dbapi
        # PostgreSQL: psycopg's raw cursors take $n placeholders as they are, so a statement is
        # never re-parsed on the client (named parameters are converted once, here).
        self._positional = {name: _positional(sql) for name, sql in self.queries.items()} if self._postgres else {}
        if self._postgres:
            self._positional["write_jobs"] = _positional(batch_write_sql(self.queries["write_job"]))
        self._kept: tuple[Any, int] | None = None
        self._kept_cursor: tuple[Any, Any] | None = None  # (its connection, a cursor of it): `_batch_cursor`
        self._prefix_query: str | None = None  # PostgreSQL: which job id prefix query fits the collation
        self._kept_lock = threading.Lock()
        #: PostgreSQL: single writes outside a transaction go through the process's group commit.
        self.group_commit: GroupCommit[JobWrite, WriteResult] | None = GroupCommit(
            self.write_many, self._write_kept) if group_commit and self._postgres else None
        #: PostgreSQL: the sends of the process's threads registered together (a statement, a commit per batch).
        self.registrations: GroupCommit[Registering, Registered] | None = GroupCommit(
            self.register_together, self.register_alone) if group_commit and self._postgres else None
        self._keep_sending = keep_sending and self.registrations is not None
        self._sending: tuple[Any, Any, int] | None = None  # the sends' kept (connection, cursor, pid)
        self._sending_lock = threading.Lock()
        #: A child's copies of the parent's kept connections (`forked`): kept referenced, never used.
        self._parents: list[object] = []
        _RUNNERS.add(self)

    def forked(self) -> None:
        """In a child just forked (`os.register_at_fork`, before any thread of the child runs): new
        locks (a fork copies a lock held by a parent's thread mid-batch held, for ever) and no kept
        connection (theirs are the parent's: their sockets are shared with it). The parent's are
        kept referenced, not dropped: a collected one would be reset (a ROLLBACK) over the parent's
        socket."""
        self._parents.append((self._kept, self._sending, self._kept_cursor))
        self._kept, self._sending, self._kept_cursor = None, None, None
        self._kept_lock, self._sending_lock = threading.Lock(), threading.Lock()

    # -- connections -----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A cursor in a transaction that commits when the block exits (rolls back on an error)."""
        with sqlite_writer_lock(self.engine), self._connection() as raw:
            cursor = self._cursor(raw)
            try:
                if self._postgres:
                    with raw.driver_connection.transaction():
                        yield Tx(cursor, self._clock())
                    return
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    tx = Tx(cursor, None)
                    tx.now = self.resolve_now(tx)
                    yield tx
                except BaseException:
                    cursor.execute("ROLLBACK")
                    raise
                cursor.execute("COMMIT")
            finally:
                cursor.close()

    @contextmanager
    def single(self) -> Iterator[Tx]:
        """One statement on PostgreSQL (autocommit: one round trip); a transaction on SQLite."""
        if not self._postgres:
            with self.transaction() as tx:
                yield tx
            return
        with self._connection() as raw:
            cursor = self._cursor(raw)
            try:
                yield Tx(cursor, self._clock())
            finally:
                cursor.close()

    def _checkout(self) -> Any:
        """A raw connection from the pool; a full pool or an unreachable server as our errors."""
        try:
            return self.engine.raw_connection()
        except PoolTimeout as exc:
            raise pool_exhausted(self.engine) from exc
        except Exception as exc:
            raise translate(exc, self.engine.url) from exc

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled raw connection for one call (PostgreSQL: in autocommit while we hold it)."""
        raw = self._checkout()
        failed: BaseException | None = None
        try:
            if self._postgres:
                driver: Any = raw.driver_connection
                driver.autocommit = True
            yield raw
        except self._dbapi.Error as exc:
            failed = exc
            raise translate(exc, self.engine.url) from exc
        except BaseException as exc:  # e.g. an async interrupt landing mid-statement: state unknown
            failed = exc
            raise
        finally:
            self._release(raw, failed)

    def _release(self, raw: Any, failed: BaseException | None) -> None:
        if failed is not None and isinstance(failed, self._dbapi.OperationalError):
            # Like SQLAlchemy on a disconnect: every connection opened before now is recycled at
            # its next checkout, so one error (not one per pooled connection) reports a restart.
            invalidate_all(self.engine.pool, raw, failed)
            return
        if failed is not None and not isinstance(failed, self._dbapi.Error):
            raw.invalidate()  # interrupted mid-protocol: never hand this connection out again
            return
        try:
            if self._postgres:
                driver = raw.driver_connection
                driver.autocommit = False  # as the pool hands it to SQLAlchemy
            raw.close()  # back to the pool
        except Exception:
            raw.invalidate()

    def _cursor(self, raw: Any) -> Any:
        if self._postgres:
            import psycopg

            return psycopg.RawCursor(raw.driver_connection)
        return raw.cursor()

    def resolve_now(self, tx: Tx) -> float:
        self.execute(tx, "now", {})
        return float(tx.cursor.fetchone()[0])

    def execute(self, tx: Tx, name: str, params: Mapping[str, Any]) -> Any:
        params = {**params, "now": tx.now if tx.now is not None else self._clock()}
        if self._postgres:
            query = self._positional[name]
            tx.cursor.execute(query.sql, query.values(params))
        else:
            tx.cursor.execute(self.queries[name], params)
        return tx.cursor

    def array(self, values: Sequence[Any] | None) -> Any:
        """A list parameter: an array on PostgreSQL, JSON text for SQLite's json_each."""
        if values is None or self._postgres:
            return values
        return json.dumps(list(values))

    # -- writes ----------------------------------------------------------------------------------

    def write(self, write: JobWrite, tx: Tx | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Execute `write` with its event row: (job row, event row), or None when the guard failed.
        A slim write's job row holds only RECORD_TIMING on PostgreSQL (JobWrite.slim)."""
        if tx is None:
            if self.group_commit is not None:
                return self.group_commit.write(write)
            return self._write_alone(write)
        params = write.params(tx.now)
        params["sources"] = _text_array(tuple(write.sources)) if self._postgres and write.sources is not None \
            else self.array(write.sources)
        cursor = self.execute(tx, "write_job", params)
        row = cursor.fetchone()
        if self._postgres:
            if row is None:
                return None
            return _slim_written(row) if write.slim else _written(row)
        if row is None:
            return None
        job = dict(zip(JOB_COLUMNS, row, strict=True))
        event = self.execute(tx, "event", params).fetchone()
        return job, dict(zip(EVENT_COLUMNS, event, strict=True))

    def write_together(self, writes: Sequence[JobWrite]) -> list[WriteResult | BaseException]:
        """Execute `writes` in one group-commit batch (each its own guard and result, or the error
        that failed it); without group commit, one after another."""
        if self.group_commit is not None:
            return self.group_commit.write_all(writes)
        results: list[WriteResult | BaseException] = []
        for write in writes:
            try:
                results.append(self._write_alone(write))
            except Exception as exc:
                results.append(exc)
        return results

    @contextmanager
    def _kept_connection(self) -> Iterator[Any]:
        """The batches' own pooled connection, kept between them (one per process): its session
        plans `write_jobs` once, generically, instead of re-planning every batch (about 1 ms of
        PostgreSQL CPU each). Replaced after any error; never shared, so the settings stay on it.

        The session also never plans a sequential scan: `write_jobs` reaches its rows by primary
        key, but a generic plan made while the job table is small (a new store, not analyzed yet)
        locks the batch's rows through a scan of the whole table, and keeps doing so for the
        connection's life as the table grows (measured: 0.19, 0.41, 0.65 ms of PostgreSQL CPU per
        job over three rounds of 2,400 jobs, against 0.11 with the index).

        Behind a pooler (`pooled=true`) the connection is still kept, but neither setting is made
        nor the statement prepared: the pooler would hand both to other clients' transactions, and
        each batch is planned anew, with the table's statistics of the moment."""
        with self._kept_lock:
            if self._kept is not None and self._kept[1] == os.getpid() and hung_up(self._kept[0].driver_connection):
                # The server closed it while idle (a restart, a failover, an idle kill): replaced
                # before use, as the pool's checkout replaces one, so no write fails on it.
                self._kept[0].invalidate()
                self._kept = None
            if self._kept is None or self._kept[1] != os.getpid():
                # Not armed with the deadline of the call that happens to open it (reliable.deadlines):
                # it outlives that call, and would be cut at that deadline under a later batch, every
                # lease ttl. Its batches are bounded by the connection's TCP bounds (engine.tcp_bounds);
                # sends, which must end within their send_timeout, batch on an armed pooled connection.
                with unbounded():
                    raw = self._checkout()
                driver: Any = raw.driver_connection
                try:
                    driver.autocommit = True
                    if not self._pooled:
                        driver.execute("SET plan_cache_mode = force_generic_plan")
                        driver.execute("SET enable_seqscan = off")
                except BaseException as exc:
                    raw.invalidate()
                    if isinstance(exc, self._dbapi.Error):
                        raise translate(exc, self.engine.url) from exc
                    raise
                self._kept = (raw, os.getpid())
            raw = self._kept[0]
            try:
                yield raw
            except BaseException as exc:
                self._kept = None
                raw.invalidate()
                if isinstance(exc, self._dbapi.Error):
                    raise translate(exc, self.engine.url) from exc
                raise

    def _batch_cursor(self, driver: Any) -> Any:
        """The cursor of the batches' kept connection `driver` (`_kept_connection`, whose lock the
        caller holds): made once per connection, not per batch."""
        kept = self._kept_cursor
        if kept is None or kept[0] is not driver:
            import psycopg

            kept = self._kept_cursor = (driver, psycopg.RawCursor(driver))
        return kept[1]

    def release_kept(self) -> None:
        """Close the connections group commit keeps (this process's; never reused: the worker's
        session has the generic-plan and no-scan settings)."""
        with self._kept_lock:
            if self._kept is not None and self._kept[1] == os.getpid():
                self._kept[0].invalidate()
            self._kept = None
        with self._sending_lock:
            if self._sending is not None and self._sending[2] == os.getpid():
                self._sending[0].invalidate()
            self._sending = None

    def _write_alone(self, write: JobWrite) -> tuple[dict[str, Any], dict[str, Any]] | None:
        with self.single() as own:
            return self.write(write, own)

    def _write_kept(self, write: JobWrite) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """A group commit's single write (a batch of one; a failed batch's row-by-row retry) as
        `write_job`, on the batches' kept connection and cursor: not a connection checked out of
        the pool and given back per write (about 0.3 ms of the worker's CPU per lone write here,
        the common case at moderate load; docs/performance.md)."""
        # Armed with the caller's deadline while it runs, as its own pooled connection would be
        # (reliable.deadlines: a claim's try, a heartbeat's record end there on a silent network).
        with self._kept_connection() as raw, _armed(raw):
            return self.write(write, Tx(self._batch_cursor(raw.driver_connection), self._clock()))

    def write_many(self, writes: Sequence[JobWrite]) -> list[tuple[dict[str, Any], dict[str, Any]] | None]:
        """Execute several writes of distinct jobs as ONE statement (PostgreSQL, autocommit): each
        write's (job row, event row), or None where its guard did not match (see batching.py); a
        slim write's job row holds only RECORD_TIMING (JobWrite.slim)."""
        if not self._postgres:
            raise NotImplementedError("write_many is PostgreSQL's group commit; SQLite writes one at a time")
        ids = sorted({w.job_id for w in writes})
        if len(ids) != len(writes):
            raise ValueError("a batch holds each job once")
        rows, rules = batch_rows(writes)
        query = self._positional["write_jobs"]
        values = query.values({"rows": _compact_json(rows), "rules": _compact_json(rules), "now": self._clock(),
                               "ids": _array_literal(ids)})
        with self._kept_connection() as raw:
            cursor = self._batch_cursor(raw.driver_connection)
            cursor.execute(query.sql, values, prepare=not self._pooled)
            found = {row[0]: row for row in cursor.fetchall()}
        return [None if (row := found.get(w.job_id)) is None else _slim_written(row) if w.slim else _written(row)
                for w in writes]

    def register(self, rows: Sequence[Mapping[str, Any]], details: Sequence[str | None], tx: Tx | None = None,
                 *, synchronous: bool = True) -> list[Registered]:
        """Insert new PENDING jobs (existing job_ids are left alone) with their `enqueued` events.

        One `Registered` per row, in order. With `tx`, in that transaction (e.g. with the outcome
        of the attempt they follow); without, in a transaction of their own. `synchronous` False
        (PostgreSQL): that transaction commits without waiting for its WAL flush (see `register_jobs`).
        """
        if tx is None:
            if self._postgres:  # one statement: atomic on its own
                with self.single() as own:
                    return self.register(rows, details, own, synchronous=synchronous)
            with self.transaction() as own:
                return self.register(rows, details, own)
        if self._postgres:
            return self._register_jobs(tx, rows, details, synchronous)
        inserted = {row["job_id"] for row in rows
                    if self.execute(tx, "insert_job", row).fetchone() is not None}
        return [Registered(dict(zip(EVENT_COLUMNS, self.execute(tx, "enqueued_event", {
                    "job_id": row["job_id"], "detail": detail}).fetchone(), strict=True)), None, None)
                if row["job_id"] in inserted else Registered(None, None, None)
                for row, detail in zip(rows, details, strict=True)]

    def _register_jobs(self, tx: Tx, rows: Sequence[Mapping[str, Any]], details: Sequence[str | None],
                       synchronous: bool) -> list[Registered]:
        """`register_jobs` (PostgreSQL): the rows and their events in one statement."""
        batch: dict[str, dict[str, Any]] = {}
        for row, detail in zip(rows, details, strict=True):
            batch.setdefault(row["job_id"], {**row, "detail": detail})  # a job once: a repeat finds the first
        cursor = self.execute(tx, "register_jobs", {"rows": _compact_json(list(batch.values())),
                                                    "synchronous_commit": None if synchronous else "off"})
        found = {row[0]: _registered(row, batch[row[0]]) for row in cursor.fetchall()}
        seen: set[str] = set()
        done = []
        for row in rows:
            first = found[row["job_id"]]
            if row["job_id"] in seen:  # registered by its first copy in this statement
                first = Registered(None, row["actor"], row["delivery_digest"], first.commit_mode)
            seen.add(row["job_id"])
            done.append(first)
        return done

    def register_alone(self, registering: Registering) -> Registered:
        """Register one job in its own statement (a batch of one of the send's group commit)."""
        return self.register_together([registering])[0]

    def register_together(self, batch: Sequence[Registering]) -> list[Registered]:
        """Register the jobs of several sends as ONE statement, one commit (PostgreSQL; a job once):
        synchronous unless every send of the batch asked otherwise.

        With `keep_sending`, on the connection and cursor the sends' batches keep (one batch at a
        time: the group commit's leader's), not one checked out of the pool and given back per
        batch (about 0.15 ms of the producer's CPU per lone send; docs/performance.md).
        Not the one the worker's batches keep: a send's batch is armed with the leading send's
        deadline for as long as it runs (reliable.deadlines; a cut connection is replaced at the
        next batch, as the pool replaces one that hung up), and never waits behind a worker's batch.
        """
        synchronous = any(item.synchronous for item in batch)
        rows, details = [item.row for item in batch], [item.detail for item in batch]
        if not self._keep_sending:
            # A pooled connection per batch: armed with the leading send's deadline at checkout,
            # disarmed when the batch gives it back.
            return self.register(rows, details, synchronous=synchronous)
        with self._sending_lock:
            raw, cursor = self._sending_connection()
            with _armed(raw):
                return self._send_batch(raw, cursor, rows, details, synchronous)

    def _send_batch(self, raw: Any, cursor: Any, rows: Sequence[Mapping[str, Any]],
                    details: Sequence[str | None], synchronous: bool) -> list[Registered]:
        """One batch of sends on their kept connection (`register_together`)."""
        try:
            return self._register_jobs(Tx(cursor, self._clock()), rows, details, synchronous)
        except BaseException as exc:
            # As `_release` would: an error of the statement leaves the connection usable (kept);
            # a lost one recycles the pool; an interrupt mid-protocol drops this one.
            if isinstance(exc, self._dbapi.OperationalError):
                self._sending = None
                invalidate_all(self.engine.pool, raw, exc)
            elif not isinstance(exc, self._dbapi.Error):
                self._sending = None
                raw.invalidate()
            if isinstance(exc, self._dbapi.Error):
                raise translate(exc, self.engine.url) from exc
            raise

    def _sending_connection(self) -> tuple[Any, Any]:
        """The sends' kept connection and cursor (autocommit), checked out under the leading send's
        deadline (a connection opened for it waits at most what is left); replaced when it hung up
        (a restart, a deadline's cut: `db.hung_up`). Called with `_sending_lock` held."""
        # os.getpid(), not a pid kept by an at-fork hook: a server that forks without running
        # Python's hooks (uWSGI by default) would hand its children the parent's connection.
        kept, pid = self._sending, os.getpid()
        if kept is not None and kept[2] == pid:
            if not hung_up(kept[0].driver_connection):
                return kept[0], kept[1]
            kept[0].invalidate()
        self._sending = None
        raw = self._checkout()
        try:
            driver: Any = raw.driver_connection
            driver.autocommit = True
            import psycopg

            cursor = psycopg.RawCursor(driver)
        except BaseException as exc:
            raw.invalidate()
            if isinstance(exc, self._dbapi.Error):
                raise translate(exc, self.engine.url) from exc
            raise
        self._sending = (raw, cursor, pid)
        return raw, cursor

    def renew(self, worker_id: str, leases: Sequence[tuple[str, int]], lease_ttl: float) -> list[dict[str, Any]]:
        """Extend every given lease in one statement; the rows of the leases still held."""
        params: dict[str, Any] = {"worker_id": worker_id, "lease_ttl": lease_ttl,
                                  "active": self.array(_ACTIVE)}
        if self._postgres:
            params.update(job_ids=[j for j, _ in leases], lease_ids=[lease for _, lease in leases])
        else:
            params["leases"] = json.dumps([[j, lease] for j, lease in leases])
        with self.single() as tx:
            if not self._postgres:  # PostgreSQL: both in renew's own statement
                self.execute(tx, "beat", params)
                self.execute(tx, "process_beat", params)
            rows = self.execute(tx, "renew", params).fetchall()
        return [dict(zip(LEASE_COLUMNS, row, strict=True)) for row in rows]

    def process_beat(self, worker_id: str) -> None:
        """Stamp the process's own record (a heartbeat holding no lease)."""
        with self.single() as tx:
            self.execute(tx, "process_beat", {"worker_id": worker_id})

    def job_status(self, job_id: str) -> tuple[str, str | None] | None:
        """The job's state and delivery digest (None: no such job), read alone by primary key."""
        with self.single() as tx:
            row = self.execute(tx, "job_status", {"job_id": job_id}).fetchone()
        return None if row is None else (str(row[0]), row[1])

    def job_statuses(self, job_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """The state and delivery digest of each of these jobs that exists, by job id, in one read."""
        with self.single() as tx:
            rows = self.execute(tx, "job_statuses", {"job_ids": self.array(list(job_ids))}).fetchall()
        return {str(row[0]): (str(row[1]), row[2]) for row in rows}

    def registered_digests(self, tx: Tx, job_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """The actor and delivery digest of each of these jobs that exists, by job id."""
        rows = self.execute(tx, "registered_digests", {"job_ids": self.array(list(job_ids))}).fetchall()
        return {str(row[0]): (str(row[1]), row[2]) for row in rows}

    def job_ids_by_prefix(self, prefix: str, prefix_end: str, limit: int) -> list[str]:
        """The ids in [prefix, prefix_end) (character order) that start with `prefix`, smallest first."""
        params = {"prefix": prefix, "prefix_end": prefix_end, "limit": limit}
        with self.single() as tx:
            if self._postgres and self._prefix_query is None:
                # Migration 0008 made the character-order index where the collation is linguistic.
                found = self.execute(tx, "has_index", {"name": "ix_reliable_jobs_job_id_c"}).fetchone()
                self._prefix_query = "job_ids_by_prefix_c" if found else "job_ids_by_prefix"
            name = self._prefix_query or "job_ids_by_prefix"
            return [str(row[0]) for row in self.execute(tx, name, params).fetchall()]

    def outage_ended_at(self) -> float | None:
        """When the last outage ended, as the first heartbeat after it saw it (None: never)."""
        with self.single() as tx:
            row = self.execute(tx, "outage_ended_at", {}).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def holds_lease(self, tx: Tx, job_id: str, lease_id: int) -> bool:
        """Whether `lease_id` still holds the job (locked for the rest of the transaction on PostgreSQL)."""
        params = {"job_id": job_id, "lease_id": lease_id, "active": self.array(_ACTIVE)}
        return self.execute(tx, "holds_lease", params).fetchone() is not None

    def insert_effect(self, tx: Tx, job_id: str, op_key: str, *, attempt_id: str | None, lease_id: int,
                      result: str | None) -> bool:
        """Record the unit `op_key` as applied (with its result, JSON); False when it was recorded before."""
        params = {"job_id": job_id, "op_key": op_key, "attempt_id": attempt_id, "lease_id": lease_id,
                  "result": result}
        return self.execute(tx, "insert_effect", params).fetchone() is not None

    def count_duplicate_effect(self, tx: Tx, job_id: str, op_key: str) -> tuple[int, str | None]:
        """Count a replay of `op_key`; its duplicate count and the attempt that first applied it."""
        row = self.execute(tx, "count_duplicate_effect", {"job_id": job_id, "op_key": op_key}).fetchone()
        return int(row[0]), row[1]

    def event_details(self, tx: Tx, job_id: str, event: str) -> list[str | None]:
        """The detail (JSON text) of every `event` row of the job, oldest first."""
        return [row[0] for row in self.execute(tx, "event_details", {"job_id": job_id, "event": event})]

    def mark_dispatched(self, tx: Tx, job_id: str, *, status: str, version: int,
                        dispatched_at: float | None) -> bool:
        """The sweeper's compare-and-set on dispatched_at; True when this caller won."""
        params = {"job_id": job_id, "status": status, "version": version, "dispatched_at": dispatched_at}
        return self.execute(tx, "mark_dispatched", params).fetchone() is not None

    def create_barrier(self, barrier_id: str, parties: int) -> bool:
        """Create a group's completion barrier for `parties` members; False if it exists."""
        with self.transaction() as tx:
            return self.execute(tx, "create_barrier", {"barrier_id": barrier_id, "parties": parties}
                                 ).fetchone() is not None

    def arrive_at_barrier(self, tx: Tx, barrier_id: str) -> int | None:
        """One member arrived: the members still awaited (0: this one cleared it); None: no such barrier."""
        row = self.execute(tx, "arrive_at_barrier", {"barrier_id": barrier_id}).fetchone()
        return None if row is None else int(row[0])

    def save_node_result(self, tx: Tx, job_id: str, result: str | None, note: str | None) -> None:
        """Store a workflow node's result on the node whose current job is `job_id`."""
        self.execute(tx, "save_node_result", {"job_id": job_id, "result": result, "result_note": note})

    def now(self) -> float:
        """The store's current time (the database's clock, or the injected one)."""
        with self.single() as tx:
            return tx.now if tx.now is not None else self.resolve_now(tx)
