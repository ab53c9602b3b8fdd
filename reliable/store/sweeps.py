"""Sweeps: the jobs recovery looks for (expired leases, lost retries, stale dispatches, late stops)."""

from __future__ import annotations

from sqlalchemy import and_, or_, select

from ..states import ACTIVE_STATES, JobStatus
from .core import StoreCore
from .records import Job
from .schema import jobs

__all__ = ["Sweeps"]

_ACTIVE = [s.value for s in ACTIVE_STATES]


class Sweeps(StoreCore):
    """The reads recovery's sweeps run, each by the store's clock, oldest first, at most `limit`."""

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
