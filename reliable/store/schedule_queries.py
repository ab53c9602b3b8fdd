"""The schedules' named queries, typed: a schedule's row and its lock, fired slots, the audit trail.

reliable.schedules.storage decides what fires and when; these functions only run the store's SQL
(reliable/store/sql/<dialect>.sql) and return its rows by name. Definitions, templates and event
details are JSON text here, as stored: the feature parses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .named_rows import Executor, Query, Statement

__all__ = ["DueSchedule", "FiredSlot", "InsertedSchedule", "InsertedSlot", "LockedSchedule", "RegisteredJob",
           "ScheduleEventRow", "SlotCount", "StoredSchedule", "add_event", "count_slots", "decide", "delete", "due",
           "get", "insert", "insert_slot", "list_all", "list_events", "list_slots", "lock", "redeclare", "registered",
           "set_paused", "set_slot_key", "slot_conflict"]


@dataclass(frozen=True, slots=True)
class LockedSchedule:
    """A schedule's row as a write reads it (locked on PostgreSQL), with the transaction's time.
    `paused` is a bool on PostgreSQL, 0 or 1 on SQLite."""

    name: str
    definition: str
    template: str
    paused: int
    decided_until: float
    next_slot: float | None
    last_slot: float | None
    now: float
    slot_key: str | None  # the secret slot job ids derive from (None until the first decision)


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule's whole row, as the reads (list, show, the console) give it."""

    name: str
    actor: str
    queue: str
    definition: str
    template: str
    paused: int
    decided_until: float
    next_slot: float | None
    last_slot: float | None
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class InsertedSchedule:
    """A schedule declared for the first time."""

    decided_until: float


@dataclass(frozen=True, slots=True)
class InsertedSlot:
    """A slot fired for the first time."""

    job_id: str


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A schedule whose next slot is due."""

    name: str


@dataclass(frozen=True, slots=True)
class FiredSlot:
    """A fired slot with its job's state now (None: the job is gone)."""

    schedule: str
    slot_at: float
    job_id: str
    kind: str
    fired_at: float
    status: str | None


@dataclass(frozen=True, slots=True)
class ScheduleEventRow:
    """One entry of a schedule's audit trail (`detail`: JSON text or None)."""

    id: int
    schedule: str
    at: float
    event: str
    operator: str | None
    reason: str | None
    host: str | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class RegisteredJob:
    """What a job was registered with: its actor and delivery digest (None: registered before digests)."""

    job_id: str
    actor: str
    delivery_digest: str | None


@dataclass(frozen=True, slots=True)
class SlotCount:
    """How many slots a schedule fired."""

    schedule: str
    fired: int


_EVENT = Statement("schedule_event")
_LOCK = Query("lock_schedule", LockedSchedule)
_INSERT = Query("insert_schedule", InsertedSchedule)
_REDECLARE = Statement("redeclare_schedule")
_INSERT_SLOT = Query("insert_schedule_slot", InsertedSlot)
_DECIDE = Statement("decide_schedule")
_DUE = Query("due_schedules", DueSchedule)
_SET_PAUSED = Statement("set_schedule_paused")
_DELETE = Statement("delete_schedule")
_LIST = Query("list_schedules", StoredSchedule)
_GET = Query("get_schedule", StoredSchedule)
_LIST_SLOTS = Query("list_schedule_slots", FiredSlot)
_LIST_EVENTS = Query("list_schedule_events", ScheduleEventRow)
_COUNT_SLOTS = Query("count_schedule_slots", SlotCount)
_SET_SLOT_KEY = Statement("set_schedule_slot_key")
_SLOT_CONFLICT = Statement("schedule_slot_conflict")
_UNFIRE_SLOT = Statement("unfire_schedule_slot")
_REGISTERED = Query("registered_digests", RegisteredJob)


def add_event(executor: Executor, schedule: str, event: str, *, operator: str | None, reason: str | None,
              host: str | None, detail: str | None) -> None:
    """Append an entry to the schedule's audit trail (`detail`: JSON text)."""
    _EVENT.run(executor, {"schedule": schedule, "event": event, "operator": operator, "reason": reason,
                          "host": host, "detail": detail})


def lock(executor: Executor, name: str) -> LockedSchedule | None:
    """The schedule's row, locked for the rest of the transaction on PostgreSQL (None: unknown)."""
    return _LOCK.one(executor, {"name": name})


def insert(executor: Executor, name: str, *, actor: str, queue: str, definition: str, template: str,
           paused: bool, decided_until: float | None, next_slot: float | None) -> bool:
    """Store a new schedule; False when it exists (nothing written)."""
    return _INSERT.one(executor, {"name": name, "actor": actor, "queue": queue, "definition": definition,
                                  "template": template, "paused": paused, "decided_until": decided_until,
                                  "next_slot": next_slot}) is not None


def redeclare(executor: Executor, name: str, *, actor: str, queue: str, definition: str, template: str,
              next_slot: float | None) -> None:
    """Write a known schedule's new declaration (its runtime state stays)."""
    _REDECLARE.run(executor, {"name": name, "actor": actor, "queue": queue, "definition": definition,
                              "template": template, "next_slot": next_slot})


def insert_slot(executor: Executor, schedule: str, slot_at: float, job_id: str, kind: str) -> bool:
    """Record the slot fired with `job_id`; False when it had fired already (nothing written)."""
    return _INSERT_SLOT.one(executor, {"schedule": schedule, "slot_at": slot_at, "job_id": job_id,
                                       "kind": kind}) is not None


def set_slot_key(executor: Executor, name: str, slot_key: str) -> None:
    """Store the schedule's slot key unless it has one (under the row `lock` holds)."""
    _SET_SLOT_KEY.run(executor, {"name": name, "slot_key": slot_key})


def registered(executor: Executor, job_id: str) -> RegisteredJob | None:
    """What the job `job_id` was registered with (None: no such job)."""
    return _REGISTERED.one(executor, {"job_ids": [job_id]})


def slot_conflict(executor: Executor, name: str, slot_at: float) -> None:
    """Take back the slot row `insert_slot` just wrote (its job id is another job's) and count the
    conflict on the schedule."""
    _UNFIRE_SLOT.run(executor, {"schedule": name, "slot_at": slot_at})
    _SLOT_CONFLICT.run(executor, {"name": name})


def decide(executor: Executor, name: str, *, decided_until: float, next_slot: float,
           last_slot: float | None) -> None:
    """The schedule's slots are decided up to `decided_until` (`last_slot` None: none fired now)."""
    _DECIDE.run(executor, {"name": name, "decided_until": decided_until, "next_slot": next_slot,
                           "last_slot": last_slot})


def due(executor: Executor, at: float) -> list[str]:
    """The names of the schedules not paused whose next slot is due at `at`."""
    return [row.name for row in _DUE.all(executor, {"at": at})]


def set_paused(executor: Executor, name: str, paused: bool, *, decided_until: float | None,
               next_slot: float | None) -> None:
    """Pause or resume the schedule (None keeps decided_until / next_slot as they are)."""
    _SET_PAUSED.run(executor, {"name": name, "paused": paused, "decided_until": decided_until,
                               "next_slot": next_slot})


def delete(executor: Executor, name: str) -> None:
    """Remove the schedule's row (its fired slots stay)."""
    _DELETE.run(executor, {"name": name})


def list_all(executor: Executor) -> list[StoredSchedule]:
    """Every schedule, by name."""
    return _LIST.all(executor)


def get(executor: Executor, name: str) -> StoredSchedule | None:
    """The schedule `name` (None: unknown)."""
    return _GET.one(executor, {"name": name})


def list_slots(executor: Executor, name: str, limit: int) -> list[FiredSlot]:
    """The schedule's latest fired slots, newest first."""
    return _LIST_SLOTS.all(executor, {"name": name, "limit": limit})


def list_events(executor: Executor, name: str, limit: int) -> list[ScheduleEventRow]:
    """The schedule's latest audit entries, newest first."""
    return _LIST_EVENTS.all(executor, {"name": name, "limit": limit})


def count_slots(executor: Executor, names: Sequence[str] | None) -> list[SlotCount]:
    """How many slots each schedule fired: every schedule (None) or those named."""
    return _COUNT_SLOTS.all(executor, {"names": list(names) if names is not None else None})
