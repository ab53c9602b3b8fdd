"""StoreCore: what every part of the store shares (reliable/store/store.py assembles the parts).

One engine and its pool, the named queries (SqlRunner, with group commit), the clock, the schema
check, the listeners fed after each commit, the job read every write falls back on to say why it
lost, and the writes of events that change no state. The parts (claims, progress, completion,
registration, transitions, sweeps, reads) are classes deriving from it, each one concern; a
caller that needs one of them can be typed with it alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, func, literal, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from ..errors import JobNotFound, LeaseLost, StoreNotMigrated
from ..redact import redact_url
from .batching import WriteResult
from .db import (
    DEFAULT_MAX_CONNECTIONS,
    POOL_TIMEOUT,
    check_max_connections,
    now_expression,
    pool_capacity,
    read_connection,
    write_transaction,
)
from .engine import connect_engine
from .json_text import _detail, _truncate
from .records import Job
from .schema import job_events, jobs
from .sqlrunner import RECORD_TIMING, SqlRunner, Tx
from .writes import JobWrite, event_write

__all__ = ["KEEPS_LEFT", "EventListener", "StoreCore"]

logger = logging.getLogger("reliable.store")

#: Called with each event row after its transaction committed.
EventListener = Callable[[dict[str, Any]], None]

#: What `record_event` may set on an event row.
_EVENT_FIELDS = frozenset({"worker_id", "lease_id", "operator", "reason", "host", "detail", "error_class",
                           "error_type", "error_message"})


#: Connections a pool must still have for the rest of the process (reliable's heartbeat and recovery
#: threads) beside the ones group commit keeps checked out, or the sends' batches keep none.
KEEPS_LEFT = 2


class StoreCore:
    """The shared part of the store: engine, named queries, clock, schema check and listeners
    (the parameters are StateStore's)."""

    def __init__(self, url: str | None = None, *, engine: Engine | None = None,
                 host: str | None = None, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 pool_timeout: float = POOL_TIMEOUT, listeners: Sequence[EventListener] = (),
                 clock: Callable[[], float | None] | None = None, group_commit: bool = False) -> None:
        if engine is None:
            if url is None:
                raise TypeError("StateStore needs a url or an engine")
            engine = connect_engine(url, max_connections=max_connections, pool_timeout=pool_timeout)
        self.engine = engine
        self.dialect = engine.dialect.name
        self.host = host or socket.gethostname()
        self._clock = clock
        self._db_now = now_expression(engine)
        self._ready = False
        self._ready_lock = threading.Lock()
        self.max_connections = check_max_connections(max_connections)
        self.pool_timeout = pool_timeout
        self.group_commit = group_commit
        # Group commit keeps one connection of the pool: with a pool of one, nothing would be left.
        # The sends' batches keep one more only where the pool leaves KEEPS_LEFT beside both
        # (reliable's heartbeat and recovery, reads). The pool's own size decides, not
        # `max_connections`: a given engine's pool may be smaller.
        capacity = pool_capacity(engine)
        self._sql = SqlRunner(engine, clock=clock, group_commit=group_commit and capacity > 1,
                              keep_sending=capacity >= 2 + KEEPS_LEFT)
        self._listeners: list[EventListener] = list(listeners)

    def group_commit_stats(self) -> tuple[int, int] | None:
        """(batches, writes) this process's group commit has sent so far; None when it is off."""
        group = self._sql.group_commit
        return None if group is None else (group.batches, group.writes)

    def scope_submitted_callbacks(self, scope: Callable[[], contextlib.AbstractContextManager[object]]) -> bool:
        """Open `scope` around each group-commit batch's callbacks of submitted writes (`_submit`'s
        `done`), in the thread that runs them, once for all of them (GroupCommit.callbacks_scope);
        False when group commit is off. `scope` must not raise."""
        group = self._sql.group_commit
        if group is None:
            return False
        group.callbacks_scope = scope
        return True

    def add_listener(self, listener: EventListener) -> None:
        """Call `listener(event)` with every event row this store writes, after its commit.

        The event is a dict with the `reliable_job_events` columns (detail and checkpoint decoded)
        plus `started_at`, `scheduled_at` and `dispatched_at` of the job. A listener that raises is
        logged and otherwise ignored: observers never break a transition.
        """
        self._listeners.append(listener)

    def _emit(self, events: Iterable[dict[str, Any]]) -> None:
        for event in events:
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception:
                    logger.exception("event listener %r failed on %s", listener, event.get("event"))

    @staticmethod
    def _record(event: Mapping[str, Any], job: Mapping[str, Any] | None) -> dict[str, Any]:
        """What listeners get: the event row as written (decoded), plus the job's timing columns."""
        record = dict(event)
        record.pop("id", None)
        detail, checkpoint = record.get("detail"), record.get("checkpoint")
        record["detail"] = json.loads(detail) if detail else {}
        record["checkpoint"] = json.loads(checkpoint) if checkpoint else None
        for name in RECORD_TIMING:
            record[name] = job.get(name) if job is not None else None
        return record

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The store's URL with any password hidden."""
        return redact_url(self.engine.url)

    def upgrade(self) -> tuple[str | None, str]:
        """Apply the schema migrations (idempotent); return the revisions before and after."""
        from . import migrate  # alembic loads only when migrating or checking the schema

        result = migrate.upgrade(self.engine)
        self._ready = True
        return result

    def check_schema(self) -> None:
        """Raise StoreNotMigrated (saying what to run) unless the schema is at the newest revision."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            from . import migrate

            current = migrate.current_revision(self.engine)
            head = migrate.head_revision()
            if current != head:
                state = "has no reliable schema" if current is None else f"is at revision {current}"
                raise StoreNotMigrated(
                    f"the store at {self.url} {state}, this version needs {head}: "
                    f"run `reliable db upgrade --store {self.url}`"
                )
            self._ready = True

    def close(self) -> None:
        """Close every pooled connection (and the one group commit keeps)."""
        self._sql.release_kept()
        self.engine.dispose()

    def now(self) -> float:
        """The store's current time in epoch seconds (the database's clock, or the injected one)."""
        if self._clock is not None and (now := self._clock()) is not None:
            return now
        with self._read() as conn:
            return float(conn.execute(select(self._db_now)).scalar_one())

    @property
    def _now(self) -> ColumnElement[float]:
        """SQL for the store's current time (reads compare lease expiry and due times with it)."""
        if self._clock is not None and (now := self._clock()) is not None:
            return literal(now)
        return self._db_now

    def serving_since(self) -> float | None:
        """When the database server last started (epoch seconds), where the database can tell.

        PostgreSQL: ``pg_postmaster_start_time()``; SQLite has no server: None.
        """
        if self.dialect != "postgresql":
            return None
        with self._read() as conn:
            value = conn.execute(select(func.extract("epoch", func.pg_postmaster_start_time()))).scalar_one()
        return float(value)

    def outage_ended_at(self) -> float | None:
        """When the last store outage ended, as seen by the first heartbeat after it (None: never).

        Every heartbeat stamps the store; one that finds the previous stamp (of any process) older
        than its lease TTL records that nobody could reach the store until now.
        """
        self.check_schema()
        return self._sql.outage_ended_at()

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for queries other modules run on the store's tables (errors translated)."""
        with self._read() as conn:
            yield conn

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A connection in a write transaction for the store's other tables (alerts), errors translated.

        Job rows are never written through it: their writes are `transition`, `finish` and friends.
        """
        self.check_schema()
        with write_transaction(self.engine) as conn:
            yield conn

    @property
    def now_sql(self) -> ColumnElement[float]:
        """SQL for the store's current time, for queries other modules build (lease and due times)."""
        return self._now

    def find(self, job_id: str) -> Job | None:
        """The job's current projection, or None."""
        with self._read() as conn:
            return self._get(conn, job_id)

    # -- events that change no state ------------------------------------------------------------

    def record_event(self, job_id: str, event: str, **fields: Any) -> None:
        """Append an event that changes no state (claim refused, stale commit, escalation...).

        `fields`: worker_id, lease_id, operator, reason, host, detail (a mapping) and the error
        fields error_class, error_type, error_message.
        """
        unknown = set(fields) - _EVENT_FIELDS
        if unknown:
            raise TypeError(f"unknown event fields: {sorted(unknown)}")
        self.check_schema()
        error = None
        if any(fields.get(k) is not None for k in ("error_class", "error_type", "error_message")):
            error = {"error_class": fields.get("error_class"), "error_type": fields.get("error_type"),
                     "message": _truncate(fields.get("error_message"))}
        operator = fields.get("operator")
        result = self._sql.write(event_write(
            job_id, event, lease_id=fields.get("lease_id"), worker_id=fields.get("worker_id"), error=error,
            operator=operator, reason=fields.get("reason"),
            host=fields.get("host") or (self.host if operator is not None else None),
            detail=_detail(fields.get("detail"))))
        if result is None:
            raise JobNotFound(job_id)
        self._emit_one(result)

    def announce(self, job_id: str, event: str, *, actor: str | None = None, queue: str | None = None,
                 worker_id: str | None = None, reason: str | None = None,
                 detail: Mapping[str, Any] | None = None) -> None:
        """Give the listeners (JSON event log, metrics) an event about a message the store holds no
        job for (a refused delivery of an unknown id): the same record as a stored event's, no row
        written (an event row belongs to a job)."""
        at = self._clock() if self._clock is not None else None  # no round trip for a log line's time
        row: dict[str, Any] = {column.name: None for column in job_events.columns}
        row.update(job_id=job_id, event=event, at=time.time() if at is None else at, actor=actor, queue=queue,
                   worker_id=worker_id, reason=reason, detail=_detail(detail))
        self._emit([self._record(row, None)])

    # -- internals -------------------------------------------------------------------------------

    def _read(self) -> contextlib.AbstractContextManager[Connection]:
        self.check_schema()
        return read_connection(self.engine)

    def _get(self, conn: Connection, job_id: str) -> Job | None:
        row = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).mappings().first()
        return None if row is None else Job.from_row(row)
    def _emit_one(self, written: tuple[Mapping[str, Any], Mapping[str, Any]]) -> None:
        if self._listeners:
            job, event = written
            self._emit([self._record(event, job)])

    def _write_in(self, tx: Tx, write: JobWrite) -> tuple[dict[str, Any], dict[str, Any]]:
        written = self._sql.write(write, tx)
        if written is None:
            raise JobNotFound(write.job_id)
        return written

    def _stale(self, job_id: str, lease_id: int, what: str, worker_id: str | None) -> Exception:
        """Record a fenced write that lost (`stale_commit_rejected`, committed) and return its error."""
        current = self.find(job_id)
        if current is None:
            return JobNotFound(job_id)
        job = self._record_stale(job_id, lease_id=lease_id, worker_id=worker_id,
                                 detail={"write": what, "current_lease_id": current.lease_id})
        if job is None:
            return JobNotFound(job_id)
        return LeaseLost(job_id, lease_id, current_lease_id=job["lease_id"], status=job["status"])

    def _record_stale(self, job_id: str, *, lease_id: int | None, worker_id: str | None,
                      detail: Mapping[str, Any]) -> dict[str, Any] | None:
        """Commit a `stale_commit_rejected` event (a worker's write that lost); the job row, None if gone."""
        result = self._sql.write(event_write(job_id, "stale_commit_rejected", lease_id=lease_id, worker_id=worker_id,
                                             detail=_detail(detail)))
        if result is None:
            return None
        self._emit_one(result)
        return result[0]

    def _submit(self, write: JobWrite, done: Callable[[bool], None]) -> bool:
        """Queue `write` for the group commit's next batch without waiting (PostgreSQL; False, nothing
        queued, without group commit): a slim write (JobWrite.slim: only its event record is used,
        for the listeners). `done(True)` once it committed, listeners fed; `done(False)`
        when its batch did not commit it (the store could not be reached, or its guard did not
        match). `done` runs in the flusher or the group commit's callbacks thread, once."""
        group = self._sql.group_commit
        if group is None:
            return False
        self.check_schema()

        def answered(result: WriteResult, error: BaseException | None) -> None:
            if error is not None or result is None:
                done(False)
                return
            try:
                self._emit_one(result)
            finally:
                done(True)

        group.submit(write, answered)
        return True
