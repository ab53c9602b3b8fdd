"""The queue pauses' named queries, typed: the paused queues, pause / resume, the audit trail.

reliable.queue_pauses checks the operator and the reason; these functions only run the store's SQL
(reliable/store/sql/<dialect>.sql) and return its rows by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from .named_rows import Executor, Query, Statement

__all__ = ["PausedAt", "PausedQueue", "QueueEventRow", "add_event", "list_events", "list_paused", "pause",
           "resume"]


@dataclass(frozen=True, slots=True)
class PausedQueue:
    """A paused queue's row, with the statement's time (for its age)."""

    queue: str
    paused_at: float
    operator: str
    host: str | None
    source: str | None
    reason: str
    now: float


@dataclass(frozen=True, slots=True)
class PausedAt:
    """When a queue was paused (the row a pause wrote or a resume removed)."""

    paused_at: float


@dataclass(frozen=True, slots=True)
class QueueEventRow:
    """One entry of a queue's audit trail (`detail`: JSON text or None)."""

    id: int
    queue: str
    at: float
    event: str
    operator: str | None
    host: str | None
    source: str | None
    reason: str | None
    detail: str | None


_LIST_PAUSED = Query("list_queue_pauses", PausedQueue)
_LIST_EVENTS = Query("list_queue_events", QueueEventRow)
_PAUSE = Query("pause_queue", PausedAt)
_RESUME = Query("resume_queue", PausedAt)
_EVENT = Statement("queue_event")


def list_paused(executor: Executor) -> list[PausedQueue]:
    """Every paused queue, by name."""
    return _LIST_PAUSED.all(executor)


def list_events(executor: Executor, queue: str, limit: int) -> list[QueueEventRow]:
    """The queue's latest audit entries, newest first."""
    return _LIST_EVENTS.all(executor, {"queue": queue, "limit": limit})


def pause(executor: Executor, queue: str, *, operator: str, host: str | None, source: str | None,
          reason: str) -> bool:
    """Pause `queue`; False when it was paused already (the first pause stays)."""
    return _PAUSE.one(executor, {"queue": queue, "operator": operator, "host": host, "source": source,
                                 "reason": reason}) is not None


def resume(executor: Executor, queue: str) -> bool:
    """Resume `queue`; False when it was not paused."""
    return _RESUME.one(executor, {"queue": queue}) is not None


def add_event(executor: Executor, queue: str, event: str, *, operator: str | None, host: str | None,
              source: str | None, reason: str | None, detail: str | None) -> None:
    """Append an entry to the queue's audit trail (`detail`: JSON text)."""
    _EVENT.run(executor, {"queue": queue, "event": event, "operator": operator, "host": host, "source": source,
                          "reason": reason, "detail": detail})
