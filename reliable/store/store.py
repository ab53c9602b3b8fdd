"""StateStore: every job transition as one transaction (compare-and-set + one event row)."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Engine,
    and_,
    false,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from ..errors import ClaimRefused, JobNotFound, LeaseLost, StoreNotMigrated, TransitionRefused
from ..states import ACTIVE_STATES, TERMINAL_STATES, Event, JobStatus, sources, target
from .db import (
    DEFAULT_MAX_CONNECTIONS,
    POOL_TIMEOUT,
    check_max_connections,
    connect_engine,
    now_expression,
    read_connection,
    write_transaction,
)
from .hotpath import HotPath
from .records import Attempt, Claim, Effect, ErrorInfo, Job, JobEvent, LeaseStatus, NewJob
from .schema import attempts, effects, job_events, jobs

__all__ = ["EventListener", "StateStore"]

logger = logging.getLogger("reliable.store")

#: Called with each event row after its transaction committed.
EventListener = Callable[[dict[str, Any]], None]

_ACTIVE = [s.value for s in ACTIVE_STATES]
_MAX_ERROR_TEXT = 2000
_REGISTER_CHUNK = 500
_EVENT_FIELDS = frozenset(c.name for c in job_events.c) - {"id", "job_id", "at", "event"}


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str, separators=(",", ":"))


def _truncate(text: str | None, limit: int = _MAX_ERROR_TEXT) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 15] + "... [truncated]"


class StateStore:
    """The durable job state: a projection per job plus its append-only event history.

    Every change of status is `UPDATE ... WHERE status IN (allowed sources) [AND version = :v]
    [AND lease_id = :lease]` plus one INSERT into the event table, in one transaction. When the
    UPDATE matches no row the caller gets a typed error (TransitionRefused, ClaimRefused,
    LeaseLost), never a silent overwrite. Lease expiry is judged by the database's clock.

    Parameters:
      url: a SQLAlchemy URL, e.g. ``sqlite:///reliable.db`` or
        ``postgresql+psycopg://postgres@127.0.0.1:5432/reliable``.
      engine: an engine to use instead of creating one from `url` (its pool is used as it is).
      host: recorded on operator events; defaults to this machine's host name.
      max_connections: the most connections this store opens (one pool per store object, so per
        process in a worker); threads beyond it wait up to `pool_timeout` seconds for a free one,
        then get StoreUnavailable. Default 10; see docs/operations.md for sizing it against
        PostgreSQL's max_connections.
      listeners: callables given every event row after its commit (see add_listener).
    """

    def __init__(self, url: str | None = None, *, engine: Engine | None = None,
                 host: str | None = None, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 pool_timeout: float = POOL_TIMEOUT, listeners: Sequence[EventListener] = ()) -> None:
        if engine is None:
            if url is None:
                raise TypeError("StateStore needs a url or an engine")
            engine = connect_engine(url, max_connections=max_connections, pool_timeout=pool_timeout)
        self.engine = engine
        self.dialect = engine.dialect.name
        self.host = host or socket.gethostname()
        self._now = now_expression(engine)
        self._ready = False
        self._ready_lock = threading.Lock()
        self.max_connections = check_max_connections(max_connections)
        self.pool_timeout = pool_timeout
        self._hot_path: HotPath | None = None
        self._listeners: list[EventListener] = list(listeners)

    def add_listener(self, listener: EventListener) -> None:
        """Call `listener(event)` with every event row this store writes, after its commit.

        The event is a dict with the `reliable_job_events` columns (detail and checkpoint decoded)
        plus `started_at`, `scheduled_at` and `dispatched_at` of the job when known. A listener
        that raises is logged and otherwise ignored: observers never break a transition.
        """
        self._listeners.append(listener)

    def _emit(self, events: Iterable[dict[str, Any]]) -> None:
        for event in events:
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception:
                    logger.exception("event listener %r failed on %s", listener, event.get("event"))

    @property
    def _hot(self) -> HotPath:
        if self._hot_path is None:
            with self._ready_lock:
                if self._hot_path is None:
                    self._hot_path = HotPath(self.engine)
        return self._hot_path

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The store's URL with any password hidden."""
        return self.engine.url.render_as_string(hide_password=True)

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
        """Close every pooled connection."""
        if self._hot_path is not None:
            self._hot_path.dispose()
        self.engine.dispose()

    def now(self) -> float:
        """The database's current time, in epoch seconds."""
        with self._read() as conn:
            return float(conn.execute(select(self._now)).scalar_one())

    # -- producer --------------------------------------------------------------------------------

    def register(self, job: NewJob) -> bool:
        """Insert a PENDING job and its `enqueued` event; False if the job_id already exists."""
        return self.register_many([job]) == 1

    def register_many(self, new_jobs: Sequence[NewJob]) -> int:
        """Register several jobs in one transaction; return how many were new."""
        if not new_jobs:
            return 0
        created = 0
        emitted: list[dict[str, Any]] = []
        with self._write() as conn:
            now = float(conn.execute(select(self._now)).scalar_one())
            for start in range(0, len(new_jobs), _REGISTER_CHUNK):
                chunk = new_jobs[start:start + _REGISTER_CHUNK]
                rows = [self._new_job_row(job, now) for job in chunk]
                stmt = self._insert_ignore(jobs, ["job_id"]).values(rows).returning(jobs.c.job_id)
                fresh = set(conn.execute(stmt).scalars())
                events = [self._enqueued_event(job, row, now) for job, row in zip(chunk, rows, strict=True)
                          if row["job_id"] in fresh]
                if events:
                    conn.execute(insert(job_events), events)
                created += len(events)
                emitted.extend(events)
        if self._listeners:
            self._emit([{**e, "detail": json.loads(e["detail"]) if e["detail"] else {}, "checkpoint": None,
                         "scheduled_at": None, "started_at": None, "dispatched_at": now} for e in emitted])
        return created

    def _enqueued_event(self, job: NewJob, row: Mapping[str, Any], now: float) -> dict[str, Any]:
        event: dict[str, Any] = {name: None for name in _EVENT_FIELDS}
        event.update(
            job_id=row["job_id"], at=now, event="enqueued", to_status=JobStatus.PENDING.value, version=1,
            attempt=0, queue=row["queue"], actor=row["actor"], workflow_id=row["workflow_id"],
            trace_id=row["trace_id"], retry_count=0,
            detail=_dumps({"delay": job.delay} if job.delay else None),
        )
        return event

    def _new_job_row(self, job: NewJob, now: float) -> dict[str, Any]:
        due = now + (job.delay or 0.0)
        return {
            "job_id": job.job_id, "queue": job.queue, "actor": job.actor,
            "message": _dumps(dict(job.message)), "status": JobStatus.PENDING.value,
            "previous_status": None, "version": 1, "lease_id": 0, "attempt": 0, "retry_count": 0,
            "scheduled_at": due, "dispatched_at": now, "owner": job.owner,
            "workflow_id": job.workflow_id, "trace_id": job.trace_id,
            "parent_job_id": job.parent_job_id, "checkpoint_schema": job.checkpoint_schema,
            "checkpoint_version": 0, "pause_requested": False, "stop_requested": False,
            "cancel_requested": False, "created_at": now, "updated_at": now,
        }

    # -- worker ----------------------------------------------------------------------------------

    def claim(self, job_id: str, *, worker_id: str, lease_ttl: float,
              attempt_id: str | None = None) -> Claim:
        """Take the job for one attempt: RUNNING, a new lease_id (fencing token), attempt + 1.

        Wins only from PENDING, or from RETRY_WAIT once retry_at has passed. Otherwise raises
        ClaimRefused with the reason (held under a live lease, paused, finished, not due...).
        """
        attempt_id = attempt_id or uuid.uuid4().hex
        self.check_schema()
        row = self._hot.claim(job_id, worker_id, lease_ttl, attempt_id)
        if row is None:
            with self._read() as conn:
                raise self._claim_refusal(conn, job_id, self._get(conn, job_id))
        job = Job.from_row(row)
        if self._listeners:
            self._emit([self._hot_record(job, "claim")])
        return Claim(job)

    def _claim_refusal(self, conn: Connection, job_id: str, job: Job | None) -> ClaimRefused:
        if job is None:
            return ClaimRefused(job_id, "not_found")
        status = job.status
        if status in TERMINAL_STATES:
            reason = "finished"
        elif status in ACTIVE_STATES:
            reason = "held"
        elif status is JobStatus.PAUSED:
            reason = "paused"
        elif status is JobStatus.STOPPED:
            reason = "stopped"
        elif status is JobStatus.REVIEW:
            reason = "review"
        elif status is JobStatus.RETRY_WAIT:
            now = float(conn.execute(select(self._now)).scalar_one())
            retry_in = max(0.0, (job.retry_at or now) - now)
            return ClaimRefused(job_id, "not_due", status=status.value, retry_in=retry_in)
        else:  # PENDING again: someone else claimed and released in between
            reason = "held"
        return ClaimRefused(job_id, reason, status=status.value)

    def renew(self, worker_id: str, leases: Iterable[tuple[str, int]],
              lease_ttl: float) -> dict[str, LeaseStatus]:
        """Extend every lease in `leases` in one statement; return the ones still held.

        A lease missing from the answer was lost (expired and reassigned, or the job left the
        RUNNING/STOPPING states). The answer carries the control flags, so a pause or stop reaches
        a running job within one heartbeat.
        """
        pairs = list(leases)
        if not pairs:
            return {}
        self.check_schema()
        return {row["job_id"]: self._lease_status(row) for row in self._hot.renew(worker_id, pairs, lease_ttl)}

    @staticmethod
    def _lease_status(row: Mapping[str, Any]) -> LeaseStatus:
        return LeaseStatus(
            job_id=row["job_id"], lease_id=row["lease_id"], status=JobStatus(row["status"]),
            pause_requested=bool(row["pause_requested"]), stop_requested=bool(row["stop_requested"]),
            cancel_requested=bool(row["cancel_requested"]),
            lease_expires_at=float(row["lease_expires_at"]),
            stop_requested_at=row.get("stop_requested_at"),
        )

    def save_checkpoint(self, job_id: str, lease_id: int, value: Any, *, lease_ttl: float,
                        worker_id: str | None = None) -> LeaseStatus:
        """Durably record the job's progress (fenced); renew the lease; return the control flags."""
        self.check_schema()
        row = self._hot.checkpoint(job_id, lease_id, _dumps(value), lease_ttl, None)
        if row is None:
            with self._write() as conn:
                stale = self._stale(conn, job_id, lease_id, "checkpoint", worker_id)
            raise stale  # after the commit: the stale_commit_rejected event is kept
        if self._listeners:
            job = self.find(job_id)
            if job is not None:
                self._emit([self._hot_record(job, "checkpoint", from_status=job.status.value,
                                             at=job.checkpoint_at)])
        return self._lease_status(row)

    def record_effect(self, job_id: str, lease_id: int, op_key: str, *, attempt_id: str | None = None,
                      result: Any = None) -> Effect:
        """Record that the unit `op_key` of this job was applied; detect and count replays.

        Fenced: a worker that lost its lease gets LeaseLost and nothing is written. The first
        record of a key returns ``applied=True``; a later one (a replay after a crash) returns
        ``applied=False`` and increments the key's duplicate count.
        """
        with self._write() as conn:
            held = conn.execute(
                select(jobs.c.lease_id).where(jobs.c.job_id == job_id, jobs.c.lease_id == lease_id,
                                              jobs.c.status.in_(_ACTIVE))
            ).first()
            if held is None:
                stale = self._stale(conn, job_id, lease_id, "record_effect", None)
            else:
                effect = self._upsert_effect(conn, job_id, lease_id, op_key, attempt_id, result)
        if held is None:
            raise stale  # after the commit: the stale_commit_rejected event is kept
        return effect

    def _upsert_effect(self, conn: Connection, job_id: str, lease_id: int, op_key: str,
                       attempt_id: str | None, result: Any) -> Effect:
        now = float(conn.execute(select(self._now)).scalar_one())
        stmt = self._insert_ignore(effects, ["job_id", "op_key"]).values(
            job_id=job_id, op_key=op_key, attempt_id=attempt_id, lease_id=lease_id,
            applied_at=now, result=_dumps(result), duplicates=0,
        ).returning(effects.c.op_key)
        if conn.execute(stmt).first() is not None:
            return Effect(job_id, op_key, applied=True, duplicates=0, attempt_id=attempt_id)
        row = conn.execute(
            update(effects)
            .where(effects.c.job_id == job_id, effects.c.op_key == op_key)
            .values(duplicates=effects.c.duplicates + 1, last_duplicate_at=now)
            .returning(effects.c.duplicates, effects.c.attempt_id)
        ).one()
        current = self._get(conn, job_id)
        if current is not None:
            self._insert_event(conn, current, "duplicate_effect", from_status=current.status.value,
                               detail={"op_key": op_key, "duplicates": row.duplicates,
                                       "first_attempt_id": row.attempt_id})
        return Effect(job_id, op_key, applied=False, duplicates=row.duplicates, attempt_id=row.attempt_id)

    def effect_recorded(self, job_id: str, op_key: str) -> bool:
        """Whether the unit `op_key` of this job was already recorded as applied."""
        with self._read() as conn:
            return conn.execute(
                select(effects.c.op_key).where(effects.c.job_id == job_id, effects.c.op_key == op_key)
            ).first() is not None

    def finish(self, job_id: str, lease_id: int, event: Event, *, worker_id: str | None = None,
               error: ErrorInfo | None = None, retry_delay: float | None = None,
               detail: Mapping[str, Any] | None = None) -> Job:
        """End the attempt holding `lease_id` with `event` (succeed, fail, retry, review, ...).

        Fenced by the lease: a worker whose lease was reassigned gets LeaseLost, its result is
        discarded and a `stale_commit_rejected` event is recorded.
        """
        to = target(event)
        finished = to in TERMINAL_STATES or to in (JobStatus.REVIEW, JobStatus.STOPPED, JobStatus.PAUSED)
        extra = {"delay": retry_delay} if retry_delay is not None else {}
        info = None if error is None else {"error_class": error.error_class, "error_type": error.error_type,
                                           "message": _truncate(error.message)}
        self.check_schema()
        row = self._hot.finish(
            job_id, lease_id, event.value, to.value, [s.value for s in sources(event)], finished=finished,
            retry_delay=retry_delay if event is Event.RETRY else None, error=info,
            detail=_dumps({**(detail or {}), **extra}) if (detail or extra) else None,
        )
        if row is None:
            with self._write() as conn:
                stale = self._stale(conn, job_id, lease_id, event.value, worker_id)
            raise stale  # after the commit: the stale_commit_rejected event is kept
        job = Job.from_row(row)
        if self._listeners:
            self._emit([self._hot_record(job, event.value, error=info, detail={**(detail or {}), **extra})])
        return job

    # -- generic transitions (operators, recovery) ----------------------------------------------

    def transition(self, job_id: str, event: Event, *, expected_version: int | None = None,
                   lease_id: int | None = None, values: Mapping[str, Any] | None = None,
                   guard: ColumnElement[bool] | None = None, lease_expired: bool = False,
                   operator: str | None = None,
                   reason: str | None = None, detail: Mapping[str, Any] | None = None,
                   end_attempt: bool = False, dispatch: bool | None = None) -> Job:
        """Apply `event` to the job as a compare-and-set; raise TransitionRefused if it lost.

        `expected_version` (and `lease_id`) make it a strict compare-and-set on what the caller
        read. `lease_expired=True` adds "and the lease has expired by the database's clock" (recovery).
        For transitions to PENDING, `dispatch=True` stamps dispatched_at (the caller publishes
        the message right after) and `dispatch=False` leaves it unset so the sweeper publishes it.
        """
        values = dict(values or {})
        to = target(event)
        if to not in ACTIVE_STATES:
            values.setdefault("lease_expires_at", None)
        if dispatch is not None:
            # True: the caller publishes the message now. False: nobody does; the sweeper will.
            values["dispatched_at"] = self._now if dispatch else None
            values.setdefault("scheduled_at", self._now)
        with self._write() as conn:
            if lease_expired:
                expired = jobs.c.lease_expires_at < self._now
                guard = expired if guard is None else and_(guard, expired)
            row = self._update(conn, job_id, event, values=values, expected_version=expected_version,
                               lease_id=lease_id, extra=guard)
            if row is None:
                current = self._get(conn, job_id)
                if current is None:
                    raise JobNotFound(job_id)
                if lease_id is not None and current.lease_id != lease_id:
                    raise LeaseLost(job_id, lease_id, current_lease_id=current.lease_id,
                                    status=current.status.value)
                why = (f"version {current.version} != expected {expected_version}"
                       if expected_version is not None and current.version != expected_version
                       else f"not allowed from {current.status.value}")
                raise TransitionRefused(f"job {job_id}: {event.value} refused ({why})", job_id=job_id,
                                        status=current.status.value, event=event.value)
            job = Job.from_row(row)
            if end_attempt:
                self._end_attempt(conn, job.attempt_id, event.value, None)
            self._insert_event(conn, job, event, operator=operator, reason=reason, detail=detail,
                               is_transition=True)
        return job

    def mark_dispatched(self, job: Job) -> bool:
        """Claim the right to re-publish a PENDING job's message (compare-and-set on dispatched_at).

        Several sweepers may see the same stale job; only the one whose update wins publishes.
        """
        previous = (jobs.c.dispatched_at.is_(None) if job.dispatched_at is None
                    else jobs.c.dispatched_at == job.dispatched_at)
        with self._write() as conn:
            row = conn.execute(
                update(jobs).where(jobs.c.job_id == job.job_id, jobs.c.status == JobStatus.PENDING.value,
                                   jobs.c.version == job.version, previous)
                .values(dispatched_at=self._now).returning(*jobs.c)
            ).mappings().first()
            if row is not None:
                self._insert_event(conn, Job.from_row(row), "redispatched", from_status=JobStatus.PENDING.value,
                                   detail={"previous_dispatch": job.dispatched_at})
        return row is not None

    def record_event(self, job_id: str, event: str, **fields: Any) -> None:
        """Append an event that changes no state (claim refused, stale commit, escalation...)."""
        with self._write() as conn:
            job = self._get(conn, job_id)
            if job is None:
                raise JobNotFound(job_id)
            self._insert_event(conn, job, event, from_status=job.status.value, **fields)

    # -- reads -----------------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """The job's current projection; JobNotFound if there is none."""
        with self._read() as conn:
            job = self._get(conn, job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def find(self, job_id: str) -> Job | None:
        """The job's current projection, or None."""
        with self._read() as conn:
            return self._get(conn, job_id)

    def events(self, job_id: str, *, limit: int | None = None) -> list[JobEvent]:
        """The job's event history, oldest first."""
        stmt = select(job_events).where(job_events.c.job_id == job_id).order_by(job_events.c.id)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._read() as conn:
            return [JobEvent.from_row(row) for row in conn.execute(stmt).mappings()]

    def attempts(self, job_id: str) -> list[Attempt]:
        """The job's attempts, oldest first."""
        stmt = select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.attempt)
        with self._read() as conn:
            return [Attempt(**row) for row in conn.execute(stmt).mappings()]

    def effects(self, job_id: str) -> list[Effect]:
        """Every operation key recorded for the job."""
        stmt = select(effects).where(effects.c.job_id == job_id).order_by(effects.c.applied_at)
        with self._read() as conn:
            return [Effect(r["job_id"], r["op_key"], applied=True, duplicates=r["duplicates"],
                           attempt_id=r["attempt_id"]) for r in conn.execute(stmt).mappings()]

    def list_jobs(self, *, status: Sequence[JobStatus | str] | None = None, queue: str | None = None,
                  actor: str | None = None, error_class: str | None = None,
                  updated_before: float | None = None, limit: int = 100) -> list[Job]:
        """Jobs matching every given filter, most recently updated first."""
        stmt = select(jobs)
        if status:
            stmt = stmt.where(jobs.c.status.in_([JobStatus(s).value for s in status]))
        if queue:
            stmt = stmt.where(jobs.c.queue == queue)
        if actor:
            stmt = stmt.where(jobs.c.actor == actor)
        if error_class:
            stmt = stmt.where(jobs.c.last_error_class == error_class)
        if updated_before is not None:
            stmt = stmt.where(jobs.c.updated_at < updated_before)
        stmt = stmt.order_by(jobs.c.updated_at.desc()).limit(limit)
        with self._read() as conn:
            return [Job.from_row(row) for row in conn.execute(stmt).mappings()]

    def count_recent_events(self, event: str, *, actor: str | None = None, window: float) -> int:
        """How many `event` rows (of `actor`) were written in the last `window` seconds."""
        stmt = select(func.count()).select_from(job_events).where(
            job_events.c.event == event, job_events.c.at >= self._now - window)
        if actor is not None:
            stmt = stmt.where(job_events.c.actor == actor)
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def count_job_events(self, job_id: str, event: str, *, detail_contains: str | None = None) -> int:
        """How many `event` rows the job has (whose JSON detail contains `detail_contains`, if given)."""
        stmt = select(func.count()).select_from(job_events).where(job_events.c.job_id == job_id,
                                                                  job_events.c.event == event)
        if detail_contains is not None:
            stmt = stmt.where(job_events.c.detail.contains(detail_contains, autoescape=True))
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def count_by_status(self) -> dict[JobStatus, int]:
        """How many jobs are in each state."""
        stmt = select(jobs.c.status, func.count()).group_by(jobs.c.status)
        with self._read() as conn:
            return {JobStatus(status): count for status, count in conn.execute(stmt)}

    def expired_leases(self, *, limit: int = 100) -> list[Job]:
        """RUNNING/STOPPING jobs whose lease expired by the database's clock."""
        stmt = (select(jobs).where(jobs.c.status.in_(_ACTIVE), jobs.c.lease_expires_at < self._now)
                .order_by(jobs.c.lease_expires_at).limit(limit))
        with self._read() as conn:
            return [Job.from_row(row) for row in conn.execute(stmt).mappings()]

    def due_retries(self, *, grace: float, limit: int = 100) -> list[Job]:
        """RETRY_WAIT jobs whose retry_at passed more than `grace` seconds ago (message lost?)."""
        stmt = (select(jobs).where(jobs.c.status == JobStatus.RETRY_WAIT.value,
                                   jobs.c.retry_at < self._now - grace)
                .order_by(jobs.c.retry_at).limit(limit))
        with self._read() as conn:
            return [Job.from_row(row) for row in conn.execute(stmt).mappings()]

    def stale_pending(self, *, age: float, limit: int = 100) -> list[Job]:
        """PENDING jobs never dispatched, or dispatched more than `age` seconds ago and not claimed."""
        overdue = and_(jobs.c.dispatched_at < self._now - age, jobs.c.scheduled_at < self._now - age)
        never_sent = and_(jobs.c.dispatched_at.is_(None), jobs.c.scheduled_at <= self._now)
        stmt = (select(jobs).where(jobs.c.status == JobStatus.PENDING.value, or_(overdue, never_sent))
                .order_by(jobs.c.scheduled_at).limit(limit))
        with self._read() as conn:
            return [Job.from_row(row) for row in conn.execute(stmt).mappings()]

    def stopping_past(self, grace: float, *, limit: int = 100) -> list[Job]:
        """STOPPING jobs whose stop was requested more than `grace` seconds ago."""
        stmt = (select(jobs).where(jobs.c.status == JobStatus.STOPPING.value,
                                   jobs.c.stop_requested_at < self._now - grace)
                .order_by(jobs.c.stop_requested_at).limit(limit))
        with self._read() as conn:
            return [Job.from_row(row) for row in conn.execute(stmt).mappings()]

    # -- internals -------------------------------------------------------------------------------

    def _read(self) -> contextlib.AbstractContextManager[Connection]:
        self.check_schema()
        return read_connection(self.engine)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        self.check_schema()
        with write_transaction(self.engine) as conn:
            pending: list[dict[str, Any]] = []
            info = conn.info  # kept: after a disconnect, conn.info raises instead of the real error
            info["reliable_events"] = pending
            try:
                yield conn
            finally:
                info.pop("reliable_events", None)
        self._emit(pending)

    def _get(self, conn: Connection, job_id: str) -> Job | None:
        row = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).mappings().first()
        return None if row is None else Job.from_row(row)

    def _update(self, conn: Connection, job_id: str, event: Event, *, values: Mapping[str, Any],
                expected_version: int | None = None, lease_id: int | None = None,
                extra: ColumnElement[bool] | None = None) -> Mapping[Any, Any] | None:
        to = target(event)
        conditions: list[ColumnElement[bool]] = [jobs.c.job_id == job_id,
                                                 jobs.c.status.in_([s.value for s in sources(event)])]
        if extra is not None:
            conditions.append(extra)
        if expected_version is not None:
            conditions.append(jobs.c.version == expected_version)
        if lease_id is not None:
            conditions.append(jobs.c.lease_id == lease_id)
        assignments: dict[str, Any] = {
            "status": to.value, "previous_status": jobs.c.status, "version": jobs.c.version + 1,
            "updated_at": self._now,
        }
        if to not in ACTIVE_STATES:
            assignments.update(pause_requested=false(), stop_requested=false(),
                               cancel_requested=false())
        assignments.update(values)
        stmt = update(jobs).where(*conditions).values(assignments).returning(*jobs.c)
        return conn.execute(stmt).mappings().first()

    def _stale(self, conn: Connection, job_id: str, lease_id: int, what: str,
               worker_id: str | None) -> Exception:
        current = self._get(conn, job_id)
        if current is None:
            return JobNotFound(job_id)
        self._insert_event(conn, current, "stale_commit_rejected", from_status=current.status.value,
                           worker_id=worker_id, lease_id=lease_id,
                           detail={"write": what, "current_lease_id": current.lease_id})
        return LeaseLost(job_id, lease_id, current_lease_id=current.lease_id, status=current.status.value)

    def _end_attempt(self, conn: Connection, attempt_id: str | None, outcome: str,
                     error: ErrorInfo | None) -> None:
        if attempt_id is None:
            return
        conn.execute(
            update(attempts).where(attempts.c.attempt_id == attempt_id, attempts.c.ended_at.is_(None))
            .values(ended_at=self._now, outcome=outcome,
                    error_class=error.error_class if error else None,
                    error_type=error.error_type if error else None,
                    error_message=_truncate(error.message) if error else None)
        )

    def _insert_event(self, conn: Connection, job: Job, event: Event | str, *,
                      error: ErrorInfo | None = None, detail: Mapping[str, Any] | None = None,
                      is_transition: bool = False, **fields: Any) -> None:
        unknown = set(fields) - _EVENT_FIELDS
        if unknown:
            raise TypeError(f"unknown event fields: {sorted(unknown)}")
        # A transition stamped updated_at with the database's now; other events read it once, so
        # the row and what listeners get carry the same time.
        at = job.updated_at if is_transition else float(conn.execute(select(self._now)).scalar_one())
        row: dict[str, Any] = {
            "job_id": job.job_id, "at": at, "event": str(event),
            "from_status": job.previous_status.value if job.previous_status else None,
            "to_status": job.status.value, "version": job.version, "attempt": job.attempt,
            "attempt_id": job.attempt_id, "lease_id": job.lease_id, "worker_id": job.worker_id,
            "queue": job.queue, "actor": job.actor, "workflow_id": job.workflow_id,
            "trace_id": job.trace_id, "retry_count": job.retry_count,
            "checkpoint": _dumps(job.checkpoint), "host": None,
            "detail": _dumps(dict(detail)) if detail else None,
        }
        if error is not None:
            row.update(error_class=error.error_class, error_type=error.error_type,
                       error_message=_truncate(error.message))
        if fields.get("operator") is not None:
            row["host"] = self.host
        row.update({k: v for k, v in fields.items() if v is not None or k in ("from_status",)})
        conn.execute(insert(job_events).values(row))
        pending = conn.info.get("reliable_events")
        if pending is not None and self._listeners:
            pending.append(self._event_record(row, job, at))

    @staticmethod
    def _event_record(row: Mapping[str, Any], job: Job, at: float) -> dict[str, Any]:
        record = {name: row.get(name) for name in _EVENT_FIELDS | {"job_id", "event"}}
        record["at"] = at
        record["detail"] = json.loads(row["detail"]) if row.get("detail") else {}
        record["checkpoint"] = job.checkpoint
        record.update(started_at=job.started_at, scheduled_at=job.scheduled_at, dispatched_at=job.dispatched_at)
        return record

    @staticmethod
    def _hot_record(job: Job, event: str, *, error: Mapping[str, Any] | None = None,
                    detail: Mapping[str, Any] | None = None, from_status: str | None = None,
                    at: float | None = None) -> dict[str, Any]:
        return {
            "job_id": job.job_id, "at": at if at is not None else job.updated_at, "event": event,
            "from_status": from_status or (job.previous_status.value if job.previous_status else None),
            "to_status": job.status.value, "version": job.version, "attempt": job.attempt,
            "attempt_id": job.attempt_id, "lease_id": job.lease_id, "worker_id": job.worker_id,
            "queue": job.queue, "actor": job.actor, "workflow_id": job.workflow_id, "trace_id": job.trace_id,
            "error_class": (error or {}).get("error_class"), "error_type": (error or {}).get("error_type"),
            "error_message": (error or {}).get("message"), "retry_count": job.retry_count,
            "checkpoint": job.checkpoint, "operator": None, "reason": None, "host": None,
            "detail": dict(detail or {}), "started_at": job.started_at, "scheduled_at": job.scheduled_at,
            "dispatched_at": job.dispatched_at,
        }

    def _insert_ignore(self, table: Any, keys: list[str]) -> Any:
        if self.dialect == "postgresql":
            return pg_insert(table).on_conflict_do_nothing(index_elements=keys)
        return sqlite_insert(table).on_conflict_do_nothing(index_elements=keys)
