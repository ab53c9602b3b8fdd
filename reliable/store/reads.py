"""Reads: what the console, the CLI, the exporter and the alerts read of jobs and their history."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from ..errors import ConfigError, JobNotFound
from ..states import JobStatus
from .alert_facts import check_counted
from .core import StoreCore
from .job_history import attempts_of
from .records import Attempt, Effect, Job, JobEvent
from .schema import effects, job_events, jobs
from .writes import FRESH_BUDGET

__all__ = ["Reads"]


class Reads(StoreCore):
    """A job, its events, attempts and effects, lists and counts: reads only, no write."""

    def get(self, job_id: str) -> Job:
        """The job's current projection; JobNotFound if there is none."""
        with self._read() as conn:
            job = self._get(conn, job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def job_ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """The ids starting with `prefix` (printable ASCII), smallest first, at most `limit` of them.

        One range read in character order on an index (the primary key's, or migration 0008's on a
        linguistically collated PostgreSQL), however many jobs the store holds.
        """
        if not (prefix and prefix.isascii() and prefix.isprintable()):
            raise ConfigError(f"a job id prefix is made of printable ASCII characters, not {prefix!r}")
        self.check_schema()
        # In character order every id starting with "ab1" is below "ab2": the range's end.
        return self._sql.job_ids_by_prefix(prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1), limit)

    def events(self, job_id: str, *, events: Sequence[str] | None = None, since: float | None = None,
               limit: int | None = None, before: int | None = None) -> list[JobEvent]:
        """The job's event history, oldest first, filtered in the database.

        `events`: only these event names; `since`: only events at or after this time (epoch
        seconds); `before`: only events older than the event of this id (`JobEvent.id`: the next
        page of a history read newest first); `limit`: only the most recent `limit` of the events
        that match.
        """
        stmt = select(job_events).where(job_events.c.job_id == job_id)
        if before is not None:
            stmt = stmt.where(job_events.c.id < before)
        if events:
            stmt = stmt.where(job_events.c.event.in_(list(events)))
        if since is not None:
            stmt = stmt.where(job_events.c.at >= since)
        if limit is not None:
            stmt = stmt.order_by(job_events.c.id.desc()).limit(limit)
        else:
            stmt = stmt.order_by(job_events.c.id)
        with self._read() as conn:
            found = [JobEvent.from_row(row) for row in conn.execute(stmt).mappings()]
        return found[::-1] if limit is not None else found

    def attempts(self, job_id: str) -> list[Attempt]:
        """The job's attempts, oldest first (derived from its events: reliable.store.job_history)."""
        with self._read() as conn:
            return attempts_of(conn, job_id)

    def effects(self, job_id: str) -> list[Effect]:
        """Every operation key recorded for the job."""
        stmt = select(effects).where(effects.c.job_id == job_id).order_by(effects.c.applied_at)
        with self._read() as conn:
            return [Effect(r["job_id"], r["op_key"], applied=True, duplicates=r["duplicates"],
                           attempt_id=r["attempt_id"]) for r in conn.execute(stmt).mappings()]

    def list_jobs(self, *, status: Sequence[JobStatus | str] | None = None, queue: str | None = None,
                  actor: str | None = None, error_class: str | None = None,
                  updated_before: float | None = None, workflow_id: str | None = None,
                  limit: int = 100) -> list[Job]:
        """Jobs matching every given filter, most recently updated first."""
        stmt = select(jobs)
        if workflow_id:
            stmt = stmt.where(jobs.c.workflow_id == workflow_id)
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
        """How many `event` rows (of `actor`) were written in the last `window` seconds (`event`:
        one that (event, at) indexes, see alert_facts.check_counted)."""
        check_counted((event,))
        stmt = select(func.count()).select_from(job_events).where(
            job_events.c.event == event, job_events.c.at >= self._now - window)
        if actor is not None:
            stmt = stmt.where(job_events.c.actor == actor)
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def count_job_events(self, job_id: str, event: str, *, detail_contains: str | None = None,
                         since_fresh_budget: bool = False) -> int:
        """How many `event` rows the job has (whose JSON detail contains `detail_contains`, if given).

        `since_fresh_budget`: only those after the job's last restart or requeue (FRESH_BUDGET), which
        give it a fresh retry budget.
        """
        stmt = select(func.count()).select_from(job_events).where(job_events.c.job_id == job_id,
                                                                  job_events.c.event == event)
        if since_fresh_budget:
            last_reset = (select(func.coalesce(func.max(job_events.c.id), 0))
                          .where(job_events.c.job_id == job_id,
                                 job_events.c.event.in_(sorted(e.value for e in FRESH_BUDGET)))
                          .scalar_subquery())
            stmt = stmt.where(job_events.c.id > last_reset)
        if detail_contains is not None:
            stmt = stmt.where(job_events.c.detail.contains(detail_contains, autoescape=True))
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def count_by_status(self) -> dict[JobStatus, int]:
        """How many jobs are in each state."""
        stmt = select(jobs.c.status, func.count()).group_by(jobs.c.status)
        with self._read() as conn:
            return {JobStatus(status): count for status, count in conn.execute(stmt)}
