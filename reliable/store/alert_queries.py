"""Read-only queries that answer the evaluator's fact requests from the state store (SQLAlchemy Core).

Each query filters on an indexed prefix: jobs(status, ...) via ix_reliable_jobs_status_*,
job_events(event, at) via ix_reliable_job_events_event_at (each request names its kinds:
alert_facts.check_counted),
a job's attempts from its events (job_history.attempts_of) via (job_id, id) (on PostgreSQL the primary key).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from ..inputs import shorten
from ..options import UNOWNED
from ..states import FAILED_FOR_GOOD
from .alert_facts import (
    EventCount,
    EventCounts,
    Facts,
    GroupAge,
    GroupAges,
    JobFact,
    JobSample,
    ScheduleFact,
    ScheduleSlots,
    StaleJobs,
)
from .core import StoreCore
from .job_history import attempts_of
from .schema import job_events, jobs, schedule_slots, schedules
from .selection import not_discarded

__all__ = ["AttemptFact", "JobContext", "collect_facts", "job_contexts", "job_owners", "sample_job_ids"]

_TEXT_LIMIT = 500


def _cut(text: str | None) -> str | None:
    return None if text is None else shorten(text, _TEXT_LIMIT)


def _state_clock(basis: str) -> ColumnElement[Any]:
    if basis == "checkpoint":
        return func.coalesce(jobs.c.checkpoint_at, jobs.c.started_at, jobs.c.updated_at)
    return case(
        (jobs.c.status == "RUNNING", func.coalesce(jobs.c.started_at, jobs.c.updated_at)),
        (jobs.c.status == "STOPPING", func.coalesce(jobs.c.stop_requested_at, jobs.c.updated_at)),
        else_=jobs.c.updated_at,
    )


_GROUP_CLOCK: dict[str, ColumnElement[Any]] = {
    "PENDING": func.coalesce(jobs.c.scheduled_at, jobs.c.created_at),
    "REVIEW": jobs.c.updated_at,
    "RETRY_WAIT": jobs.c.retry_at,
}


def _job_fact(row: Any, since: float) -> JobFact:
    return JobFact(
        job_id=row.job_id, queue=row.queue, actor=row.actor, status=row.status, since=float(since),
        owner=row.owner, attempt=row.attempt, attempt_id=row.attempt_id, checkpoint=_cut(row.checkpoint),
        checkpoint_at=row.checkpoint_at, last_error_class=row.last_error_class,
        last_error_message=_cut(row.last_error_message), trace_id=row.trace_id,
    )


_JOB_COLUMNS = (jobs.c.job_id, jobs.c.queue, jobs.c.actor, jobs.c.status, jobs.c.owner, jobs.c.attempt,
                jobs.c.attempt_id, jobs.c.checkpoint, jobs.c.checkpoint_at, jobs.c.last_error_class,
                jobs.c.last_error_message, jobs.c.trace_id)


def _stale(conn: Any, request: StaleJobs, now: float) -> list[JobFact]:
    clock = _state_clock(request.basis).label("clock")
    stmt = (select(*_JOB_COLUMNS, clock).where(jobs.c.status.in_(request.states), clock <= now - request.older_than)
            .order_by(clock, jobs.c.job_id).limit(request.limit))
    return [_job_fact(row, row.clock) for row in conn.execute(stmt)]


def _ages(conn: Any, request: GroupAges, now: float) -> list[GroupAge]:
    clock = _GROUP_CLOCK[request.state]
    stmt = (select(jobs.c.queue, func.count().label("n"), func.min(clock).label("oldest"),
                   func.max(jobs.c.owner).label("owner"))
            .where(jobs.c.status == request.state, clock <= now - request.older_than)
            .group_by(jobs.c.queue).order_by(jobs.c.queue))
    return [GroupAge(row.queue, int(row.n), float(row.oldest), row.owner) for row in conn.execute(stmt)]


def _counts(conn: Any, request: EventCounts, now: float) -> list[EventCount]:
    e = job_events
    where = [e.c.at >= now - request.window, e.c.at <= now]
    if request.events:
        where.append(e.c.event.in_(request.events))
    if request.detail_contains:
        where.append(e.c.detail.contains(request.detail_contains, autoescape=True))
    if request.detail_lacks:
        where.append(or_(e.c.detail.is_(None), ~e.c.detail.contains(request.detail_lacks, autoescape=True)))
    if request.still_in:
        # Jobs still in those states (a dead letter not discarded since), each counted once.
        where += [jobs.c.status.in_(request.still_in), not_discarded()]
    counted = func.count(func.distinct(e.c.job_id)) if request.still_in else func.count()
    stmt = (select(e.c.queue, e.c.actor, e.c.event, counted.label("n"), func.max(jobs.c.owner).label("owner"))
            .select_from(e.outerjoin(jobs, jobs.c.job_id == e.c.job_id))
            .where(and_(*where)).group_by(e.c.queue, e.c.actor, e.c.event))
    return [EventCount(row.queue or "", row.actor or "", row.event, int(row.n), row.owner)
            for row in conn.execute(stmt)]


#: A schedule slot's job that ended in one of these states failed (ScheduleSlots).
_FAILED_SLOT_STATES = sorted(s.value for s in FAILED_FOR_GOOD)


def _schedules(conn: Any, request: ScheduleSlots, now: float) -> list[ScheduleFact]:
    # The misfire grace is in each schedule's JSON definition: the evaluator adds it (rows are few).
    overdue = {row.name: row for row in conn.execute(
        select(schedules.c.name, schedules.c.actor, schedules.c.queue, schedules.c.next_slot, schedules.c.definition)
        .where(schedules.c.paused.is_(False), schedules.c.next_slot < now - request.late_by))}
    s = schedule_slots
    failed: dict[str, list[JobFact]] = {}
    stmt = (select(s.c.schedule, *_JOB_COLUMNS, jobs.c.updated_at)
            .select_from(s.join(jobs, jobs.c.job_id == s.c.job_id))
            .where(s.c.fired_at >= now - request.window, jobs.c.status.in_(_FAILED_SLOT_STATES))
            .order_by(s.c.schedule, s.c.slot_at))
    for row in conn.execute(stmt):
        failed.setdefault(row.schedule, []).append(_job_fact(row, row.updated_at))
    names = sorted(set(overdue) | set(failed))
    about = {row.name: row for row in conn.execute(
        select(schedules.c.name, schedules.c.actor, schedules.c.queue, schedules.c.definition)
        .where(schedules.c.name.in_(names)))} if names else {}
    out = []
    for name in names:
        row = about.get(name)
        if row is None:
            continue
        grace = float(json.loads(row.definition).get("misfire_grace", 0.0))
        jobs_failed = tuple(failed.get(name, ()))
        owners = sorted({j.owner for j in jobs_failed if j.owner})
        out.append(ScheduleFact(name, row.actor, row.queue, grace,
                                overdue[name].next_slot if name in overdue else None, jobs_failed,
                                owners[0] if owners else None))
    return out


def collect_facts(store: StoreCore, requests: Iterable[Any], now: float) -> Facts:
    """Answer every distinct request in one read connection (no writes)."""
    answers: dict[Any, Sequence[Any]] = {}
    with store.read() as conn:
        for request in dict.fromkeys(requests):
            if isinstance(request, StaleJobs):
                answers[request] = _stale(conn, request, now)
            elif isinstance(request, GroupAges):
                answers[request] = _ages(conn, request, now)
            elif isinstance(request, EventCounts):
                answers[request] = _counts(conn, request, now)
            elif isinstance(request, ScheduleSlots):
                answers[request] = _schedules(conn, request, now)
            else:
                raise TypeError(f"unknown fact request {request!r}")
    return Facts(now, answers)


def sample_job_ids(store: StoreCore, sample: JobSample, limit: int = 3) -> list[str]:
    """A few job ids behind a grouped alert: the oldest in the states, or the latest with the events."""
    with store.read() as conn:
        if sample.states:
            stmt = select(jobs.c.job_id).where(jobs.c.status.in_(sample.states))
            if sample.queue:
                stmt = stmt.where(jobs.c.queue == sample.queue)
            if sample.actor:
                stmt = stmt.where(jobs.c.actor == sample.actor)
            if sample.owner:
                stmt = stmt.where(jobs.c.owner.is_(None) if sample.owner == UNOWNED else jobs.c.owner == sample.owner)
            stmt = stmt.order_by(jobs.c.updated_at, jobs.c.job_id).limit(limit)
            return list(conn.execute(stmt).scalars())
        e = job_events
        where = [e.c.at >= (sample.since or 0.0)]
        if sample.events:
            where.append(e.c.event.in_(sample.events))
        if sample.detail_contains:
            where.append(e.c.detail.contains(sample.detail_contains, autoescape=True))
        if sample.queue:
            where.append(e.c.queue == sample.queue)
        if sample.actor:
            where.append(e.c.actor == sample.actor)
        stmt = select(e.c.job_id)
        if sample.still_in:
            stmt = stmt.join(jobs, jobs.c.job_id == e.c.job_id)
            where += [jobs.c.status.in_(sample.still_in), not_discarded()]
        rows = conn.execute(stmt.where(and_(*where)).order_by(e.c.at.desc()).limit(limit * 10))
        return list(dict.fromkeys(rows.scalars()))[:limit]


def job_owners(store: StoreCore, queue: str | None = None, actor: str | None = None) -> set[str | None]:
    """The distinct owners of the jobs of `queue` and `actor` (any when None); None for jobs without
    one. A scan (`reliable alerts check --store` runs it once per rule, not a hot path)."""
    stmt = select(jobs.c.owner).distinct()
    if queue is not None:
        stmt = stmt.where(jobs.c.queue == queue)
    if actor is not None:
        stmt = stmt.where(jobs.c.actor == actor)
    with store.read() as conn:
        return set(conn.execute(stmt).scalars())


@dataclass(frozen=True)
class AttemptFact:
    """One recent attempt of a job, for runbooks."""

    attempt_id: str
    attempt: int
    worker_id: str | None
    started_at: float
    ended_at: float | None
    outcome: str | None
    error_class: str | None


@dataclass(frozen=True)
class JobContext:
    """A job and its recent attempts: what a runbook shows about an affected job."""

    job: JobFact
    attempts: tuple[AttemptFact, ...]


def job_contexts(store: StoreCore, job_ids: Sequence[str], attempts_per_job: int = 3) -> list[JobContext]:
    """The jobs (in the given order) with their latest attempts, newest first; missing ids are skipped."""
    if not job_ids:
        return []
    with store.read() as conn:
        rows = {r.job_id: r for r in conn.execute(
            select(*_JOB_COLUMNS, jobs.c.updated_at).where(jobs.c.job_id.in_(list(job_ids))))}
        out = []
        for job_id in job_ids:
            row = rows.get(job_id)
            if row is None:
                continue
            recent = attempts_of(conn, job_id)[::-1][:attempts_per_job]
            tries = tuple(AttemptFact(a.attempt_id, a.attempt, a.worker_id, a.started_at, a.ended_at, a.outcome,
                                      a.error_class) for a in recent)
            out.append(JobContext(_job_fact(row, row.updated_at), tries))
    return out
