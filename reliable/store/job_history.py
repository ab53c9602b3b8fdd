"""Reads of one job's history for the CLI and the console, beyond `StateStore.events`: the event
kinds it has, the tracebacks its failed attempts recorded. Read-only, on job_events(job_id)."""

from __future__ import annotations

from sqlalchemy import select

from .records import JobEvent
from .schema import job_events
from .store import StateStore

__all__ = ["attempt_tracebacks", "event_names", "last_failure"]


def event_names(store: StateStore, job_id: str) -> list[str]:
    """The distinct event kinds the job has, sorted (what the console's event filter offers)."""
    stmt = select(job_events.c.event).where(job_events.c.job_id == job_id).distinct()
    with store.read() as conn:
        return sorted(str(name) for name in conn.execute(stmt).scalars())


def attempt_tracebacks(store: StateStore, job_id: str) -> dict[tuple[str | None, str], str]:
    """(attempt id, event) -> traceback, for each of the job's events that recorded one."""
    stmt = (select(job_events.c.attempt_id, job_events.c.event, job_events.c.traceback)
            .where(job_events.c.job_id == job_id, job_events.c.traceback.is_not(None)))
    with store.read() as conn:
        return {(row.attempt_id, row.event): row.traceback for row in conn.execute(stmt)}


def last_failure(store: StateStore, job_id: str) -> JobEvent | None:
    """The event of the job's last failed attempt that recorded a traceback (None: no such event)."""
    stmt = (select(job_events).where(job_events.c.job_id == job_id, job_events.c.traceback.is_not(None))
            .order_by(job_events.c.id.desc()).limit(1))
    with store.read() as conn:
        row = conn.execute(stmt).mappings().first()
    return None if row is None else JobEvent.from_row(row)
