"""Reads of one job's history for the CLI and the console, beyond `StateStore.events`: its attempts,
the event kinds it has, the tracebacks its failed attempts recorded. Read-only, on job_events(job_id).

A job's attempts are derived here, and only here, from its event rows (no write keeps a separate
attempt row since migration 0018): an attempt starts with the event that moves the job into an
active state (a claim) and ends with the first event of the same attempt id that moves it out of
one (an outcome, a recovery's lease_expired, an operator's force_stop...), which gives its outcome
and error. An attempt with no end yet is running, or its worker died and recovery has not seen the
expired lease yet. A claim handed back unused (states.RETURNED_CLAIMS: a claim taken ahead for a
waiting message) is no attempt either: its claim and its return are left out. A fast-path commit
(a lease taken and released in one write) never enters an active state: it is no attempt here, as
it never had an attempt row. The checkpoint an attempt
resumed from is the number of checkpoints saved before its claim (each `checkpoint` event is one
save; the job's checkpoint_version counts them and nothing else).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import func, or_, select

from ..states import ACTIVE_STATES, OPERATOR_EVENTS, RETURNED_CLAIMS
from .records import Attempt, JobEvent
from .schema import job_events

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from .core import StoreCore

__all__ = ["COMMAND_EVENT_NAMES", "attempt_tracebacks", "attempts_of", "event_names", "last_command", "last_failure",
           "starts_attempt"]

_ACTIVE = sorted(s.value for s in ACTIVE_STATES)
_CHECKPOINT = "checkpoint"
_RETURNED = frozenset(e.value for e in RETURNED_CLAIMS)
#: The events an operator's command writes on a job: the state machine's operator events and the
#: dead letters' `discarded` (selection.DISCARDED: not imported, selection reads through here). A
#: refused command (`command_refused`) is no command done.
COMMAND_EVENT_NAMES: tuple[str, ...] = (*sorted(e.value for e in OPERATOR_EVENTS), "discarded")


def starts_attempt(from_status: str | None, to_status: str | None) -> bool:
    """Whether an event row with these states starts an attempt: it enters an active state."""
    return to_status in ACTIVE_STATES and from_status not in ACTIVE_STATES


def attempts_of(conn: Connection, job_id: str) -> list[Attempt]:
    """The job's attempts, oldest first, from its event rows (one read on job_events(job_id, id)).

    Only the events that start or end an attempt come back, however often the job checkpointed;
    the checkpoint an attempt resumed from (the saves before its claim) is counted by the database
    for the claims alone, each a count over a range of job_events(job_id, id): a job with 10,000
    checkpoints and a few attempts reads a few rows, not a running count over all of them."""
    e = job_events
    before = job_events.alias("before_claim")
    entering = e.c.to_status.in_(_ACTIVE) & (e.c.from_status.is_(None) | e.c.from_status.not_in(_ACTIVE))
    leaving = e.c.from_status.in_(_ACTIVE) & e.c.to_status.not_in(_ACTIVE)
    stmt = (select(e.c.id, e.c.event, e.c.at, e.c.from_status, e.c.to_status, e.c.attempt, e.c.attempt_id,
                   e.c.lease_id, e.c.worker_id, e.c.error_class, e.c.error_type, e.c.error_message)
            .where(e.c.job_id == job_id, or_(entering, leaving)).order_by(e.c.id))
    rows = conn.execute(stmt).all()
    # The saves before each claim in a second statement over the claims' ids: as one column of the
    # first, PostgreSQL estimated a count per event row (millions of cost units for a job of 10,000
    # checkpoints) and spent 200 ms compiling it (JIT) for a read of a few milliseconds.
    claims = [row.id for row in rows if starts_attempt(row.from_status, row.to_status)]
    saves_before: dict[int, int] = {}
    if claims:
        saves = (select(func.count()).where(before.c.job_id == job_id, before.c.id < e.c.id,
                                            before.c.event == _CHECKPOINT, before.c.from_status == before.c.to_status)
                 .scalar_subquery())
        saves_before = {int(i): int(n) for i, n in conn.execute(
            select(e.c.id, saves).where(e.c.job_id == job_id, e.c.id.in_(claims)))}
    started: dict[str, dict[str, Any]] = {}
    for row in rows:
        if starts_attempt(row.from_status, row.to_status):
            if row.attempt_id is not None and row.attempt_id not in started:
                started[row.attempt_id] = {
                    "attempt_id": row.attempt_id, "job_id": job_id, "attempt": row.attempt, "lease_id": row.lease_id,
                    "worker_id": row.worker_id, "started_at": row.at, "ended_at": None, "outcome": None,
                    "error_class": None, "error_type": None, "error_message": None,
                    "checkpoint_version_start": saves_before.get(int(row.id), 0)}
        elif row.event in _RETURNED:  # a claim ahead handed back unused: it never was an attempt
            started.pop(row.attempt_id, None)
        else:
            attempt = started.get(row.attempt_id)
            if attempt is not None and attempt["ended_at"] is None:
                attempt.update(ended_at=row.at, outcome=row.event, error_class=row.error_class,
                               error_type=row.error_type, error_message=row.error_message)
    return sorted((Attempt(**a) for a in started.values()), key=lambda a: a.attempt)


def event_names(store: StoreCore, job_id: str) -> list[str]:
    """The distinct event kinds the job has, sorted (what the console's event filter offers)."""
    stmt = select(job_events.c.event).where(job_events.c.job_id == job_id).distinct()
    with store.read() as conn:
        return sorted(str(name) for name in conn.execute(stmt).scalars())


def attempt_tracebacks(store: StoreCore, job_id: str) -> dict[tuple[str | None, str], str]:
    """(attempt id, event) -> traceback, for each of the job's events that recorded one."""
    stmt = (select(job_events.c.attempt_id, job_events.c.event, job_events.c.traceback)
            .where(job_events.c.job_id == job_id, job_events.c.traceback.is_not(None)))
    with store.read() as conn:
        return {(row.attempt_id, row.event): row.traceback for row in conn.execute(stmt)}


def last_failure(store: StoreCore, job_id: str) -> JobEvent | None:
    """The event of the job's last failed attempt that recorded a traceback (None: no such event)."""
    stmt = (select(job_events).where(job_events.c.job_id == job_id, job_events.c.traceback.is_not(None))
            .order_by(job_events.c.id.desc()).limit(1))
    with store.read() as conn:
        row = conn.execute(stmt).mappings().first()
    return None if row is None else JobEvent.from_row(row)


def last_command(store: StoreCore, job_id: str) -> JobEvent | None:
    """The event of the last command an operator ran on the job (who, why, when), however many
    events came after it (None: no command yet). One read on job_events(job_id, id)."""
    stmt = (select(job_events).where(job_events.c.job_id == job_id,
                                     job_events.c.event.in_(COMMAND_EVENT_NAMES))
            .order_by(job_events.c.id.desc()).limit(1))
    with store.read() as conn:
        row = conn.execute(stmt).mappings().first()
    return None if row is None else JobEvent.from_row(row)
