"""Selecting jobs for operators: filters shared by the control API, `reliable jobs`, `dlq` and `review`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Select, and_, exists, func, select
from sqlalchemy.sql.elements import ColumnElement

from .errors import ConfigError
from .states import JobStatus
from .store import Job, StateStore
from .store.schema import job_events, jobs

__all__ = ["DISCARDED", "JobFilter", "count_jobs", "not_discarded", "select_jobs", "statuses"]

#: The event that takes a DEAD job out of the dead-letter listing (until it next changes state).
DISCARDED = "discarded"


@dataclass(frozen=True)
class JobFilter:
    """Which jobs an operator means. Every given field must match; empty means 'any'.

    `older_than` is in seconds since the job last changed state (by the database's clock).
    `exclude_discarded` hides DEAD jobs discarded since their last transition (the dead-letter view).
    """

    job_ids: tuple[str, ...] = ()
    statuses: tuple[JobStatus, ...] = ()
    queue: str | None = None
    actor: str | None = None
    error_class: str | None = None
    older_than: float | None = None
    exclude_discarded: bool = False

    @property
    def is_empty(self) -> bool:
        """True when nothing narrows the selection (every job would match)."""
        return not (self.job_ids or self.statuses or self.queue or self.actor or self.error_class
                    or self.older_than is not None)

    def conditions(self, now: float | None) -> list[ColumnElement[bool]]:
        """The WHERE clauses of this filter (`now` is the database time, needed for older_than)."""
        where: list[ColumnElement[bool]] = []
        if self.job_ids:
            where.append(jobs.c.job_id.in_(list(self.job_ids)))
        if self.statuses:
            where.append(jobs.c.status.in_([JobStatus(s).value for s in self.statuses]))
        if self.queue:
            where.append(jobs.c.queue == self.queue)
        if self.actor:
            where.append(jobs.c.actor == self.actor)
        if self.error_class:
            where.append(jobs.c.last_error_class == self.error_class)
        if self.older_than is not None and now is not None:
            where.append(jobs.c.updated_at < now - self.older_than)
        if self.exclude_discarded:
            where.append(not_discarded())
        return where


def not_discarded() -> ColumnElement[bool]:
    """The job (reliable_jobs) was not discarded since its last transition: still a dead letter."""
    # An alias: the caller may itself read job_events (the alert queries do).
    discards = job_events.alias("discards")
    return ~exists().where(and_(discards.c.job_id == jobs.c.job_id, discards.c.event == DISCARDED,
                                discards.c.version == jobs.c.version)).correlate(jobs)


def _now(store: StateStore, flt: JobFilter) -> float | None:
    return store.now() if flt.older_than is not None else None


def select_jobs(store: StateStore, flt: JobFilter, *, limit: int | None = 100, newest_first: bool = False,
                offset: int = 0) -> list[Job]:
    """Jobs matching `flt`: oldest change first (the order bulk commands work in), at most `limit`."""
    order = jobs.c.updated_at.desc() if newest_first else jobs.c.updated_at.asc()
    stmt: Select[tuple[object, ...]] = (select(jobs).where(*flt.conditions(_now(store, flt)))
                                        .order_by(order, jobs.c.job_id).offset(offset))
    if limit is not None:
        stmt = stmt.limit(limit)
    with store.read() as conn:
        return [Job.from_row(row) for row in conn.execute(stmt).mappings()]


def count_jobs(store: StateStore, flt: JobFilter) -> int:
    """How many jobs match `flt`."""
    stmt = select(func.count()).select_from(jobs).where(*flt.conditions(_now(store, flt)))
    with store.read() as conn:
        return int(conn.execute(stmt).scalar_one())


def statuses(values: Sequence[str]) -> tuple[JobStatus, ...]:
    """Parse state names (any case) into JobStatus values; ConfigError names the bad one."""
    out = []
    for value in values:
        try:
            out.append(JobStatus(value.upper()))
        except ValueError:
            raise ConfigError(f"unknown status {value!r} (known: {', '.join(s.value for s in JobStatus)})") from None
    return tuple(out)
