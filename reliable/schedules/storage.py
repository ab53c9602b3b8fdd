"""Schedules in the state store: declarations, fired slots, pause / resume / trigger, the audit trail.

Every write to a schedule is one transaction that first reads (on PostgreSQL: locks) the
schedule's row, so schedulers of one schedule take turns and each decides from what the last one
committed; the slot's row, keyed (schedule, slot instant), is inserted with ON CONFLICT DO NOTHING
and only an inserted slot registers its job (PENDING), in the same transaction. The job id is an
HMAC of the schedule's name and the slot under the schedule's `slot_key`, a random secret the first
decision stores under the row lock and no listing returns: the same slot always gets the same job
(even a forced second fire could not make a second one), yet nobody outside the store can compute
the id of a future slot and send a message ahead under it. Should a slot's id still be held by a
job with other content, the slot is a conflict: not fired (its row taken back), a `slot_conflict`
event in the audit trail, counted in the schedule's `slot_conflicts`
(reliable_schedule_slot_conflicts_total). Publishing comes after the commit (the caller's); a
crash in between leaves a PENDING job that the recovery loop's sweeper publishes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..commands import require_reason
from ..delivery_digest import message_digest
from ..errors import ScheduleNotFound
from ..states import JobStatus
from ..store import NewJob, StateStore, UnitOfWork, schedule_queries
from ..store.schedule_queries import StoredSchedule
from ..tracecontext import TraceParent, span_id_for, trace_id_from
from .model import MisfirePlan, Schedule, plan_misfire

__all__ = ["Decision", "Fired", "ScheduleEvent", "ScheduleRow", "SlotRow", "build_job", "count_slots", "decide",
           "declare", "due_names", "get_schedule", "list_events", "list_schedules", "list_slots", "set_paused",
           "slot_job_id", "trigger"]

#: Message options a fired job carries: its schedule and slot.
SCHEDULE_OPTION, SLOT_OPTION = "schedule", "schedule_slot"


def slot_job_id(key: str, name: str, slot: float) -> str:
    """The job id of `name`'s slot at `slot` (whole epoch seconds) under the schedule's secret `key`:
    the same for the same slot, unpredictable without the key (an HMAC-SHA256, as a UUID)."""
    digest = hmac.new(key.encode(), f"{name}\x00{int(slot)}".encode(), hashlib.sha256).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class ScheduleRow:
    """A stored schedule: its declaration, job template and runtime state."""

    schedule: Schedule
    actor: str
    queue: str
    template: Mapping[str, Any]
    paused: bool
    decided_until: float
    next_slot: float | None
    last_slot: float | None
    created_at: float
    updated_at: float

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.schedule.name


@dataclass(frozen=True)
class SlotRow:
    """A fired slot with its job's current state (None: the job is gone)."""

    schedule: str
    slot_at: float
    job_id: str
    kind: str
    fired_at: float
    status: JobStatus | None


@dataclass(frozen=True)
class ScheduleEvent:
    """One entry of a schedule's audit trail."""

    id: int
    schedule: str
    at: float
    event: str
    operator: str | None
    reason: str | None
    host: str | None
    detail: Mapping[str, Any]


@dataclass(frozen=True)
class Fired:
    """A slot fired: its job was registered PENDING (to publish after the commit)."""

    schedule: str
    slot: int
    job_id: str
    kind: str  # on_time | missed
    message: Mapping[str, Any]  # the Dramatiq message to publish (as registered)


@dataclass(frozen=True)
class Decision:
    """What one decision about a schedule's due slots did."""

    schedule: str
    policy: str  # the schedule's misfire policy
    plan: MisfirePlan
    fired: tuple[Fired, ...]


def _row(row: StoredSchedule) -> ScheduleRow:
    return ScheduleRow(
        schedule=Schedule.from_definition(json.loads(row.definition)), actor=row.actor, queue=row.queue,
        template=json.loads(row.template), paused=bool(row.paused), decided_until=float(row.decided_until),
        next_slot=row.next_slot, last_slot=row.last_slot, created_at=row.created_at, updated_at=row.updated_at)


def build_job(template: Mapping[str, Any], name: str, slot: float, job_id: str) -> NewJob:
    """The job `template` registers for one slot: its own id, trace and slot options."""
    message = json.loads(json.dumps(template["message"]))
    trace = TraceParent(trace_id_from(job_id.replace("-", "")), span_id_for(job_id))
    message["message_id"] = job_id
    message["message_timestamp"] = int(slot * 1000)
    message["options"] = {**message.get("options", {}), **trace.as_options(), SCHEDULE_OPTION: name,
                          SLOT_OPTION: slot}
    return NewJob(job_id=job_id, queue=template["queue"], actor=template["actor"], message=message,
                  owner=template.get("owner"), trace_id=trace.trace_id,
                  checkpoint_schema=template.get("checkpoint_schema"))


def _event(store: StateStore, unit: UnitOfWork, name: str, event: str, *, operator: str | None = None,
           reason: str | None = None, detail: Mapping[str, Any] | None = None) -> None:
    schedule_queries.add_event(unit, name, event, operator=operator, reason=reason,
                               host=store.host if operator is not None else None,
                               detail=_text(dict(detail)) if detail else None)


def declare(store: StateStore, schedule: Schedule, template: Mapping[str, Any]) -> bool:
    """Store `schedule` with the job `template` its slots register; True if it is new.

    A new schedule decides its slots from now on (none before its declaration fires) and starts
    paused if declared so. A known one gets the new declaration and template; its runtime state
    (paused, decided slots, last slot) stays.
    """
    params = {"name": schedule.name, "actor": template["actor"], "queue": template["queue"],
              "definition": _text(schedule.definition()), "template": _text(template)}
    with store.transaction() as unit:
        current = schedule_queries.lock(unit, schedule.name)
        if current is None:
            now = unit.now()
            inserted = schedule_queries.insert(unit, **params, paused=schedule.paused, decided_until=now,
                                               next_slot=schedule.timing.next_after(now))
            if not inserted:  # another worker booting at the same moment declared it first
                return False
            _event(store, unit, schedule.name, "declared", detail={"definition": schedule.definition()})
            return True
        unit.use_now(float(current.now))
        if current.definition == params["definition"] and current.template == params["template"]:
            return False
        schedule_queries.redeclare(unit, **params, next_slot=schedule.timing.next_after(float(current.decided_until)))
        _event(store, unit, schedule.name, "redeclared", detail={"definition": schedule.definition(),
                                                                 "before": json.loads(current.definition)})
        return False


def decide(store: StateStore, name: str, now: float) -> Decision | None:
    """Fire `name`'s due slots at `now` by its misfire policy, in one transaction; None when paused,
    unknown, or nothing was due (another scheduler decided first)."""
    with store.transaction() as unit:
        row = schedule_queries.lock(unit, name)
        if row is None or row.paused:
            return None
        unit.use_now(float(row.now))
        schedule = Schedule.from_definition(json.loads(row.definition))
        template = json.loads(row.template)
        plan = plan_misfire(schedule, float(row.decided_until), now)
        if plan.watermark is None:
            return None
        key = row.slot_key or _new_slot_key(unit, name)
        fired: list[Fired] = []
        conflicts: set[int] = set()
        for slot in plan.fire:
            job = build_job(template, name, slot, slot_job_id(key, name, slot))
            kind = "missed" if now - slot > schedule.grace else "on_time"
            if not schedule_queries.insert_slot(unit, name, float(slot), job.job_id, kind):
                continue
            if not unit.register([job]) and _taken(unit, job):
                schedule_queries.slot_conflict(unit, name, float(slot))
                _event(store, unit, name, "slot_conflict", detail={"slot": slot, "job_id": job.job_id})
                conflicts.add(slot)
                continue
            fired.append(Fired(name, slot, job.job_id, kind, job.message))
        schedule_queries.decide(unit, name, decided_until=float(plan.watermark),
                                next_slot=float(schedule.timing.next_after(plan.watermark)),
                                last_slot=max((float(s) for s in plan.fire if s not in conflicts), default=None))
        if plan.missed:
            _event(store, unit, name, "misfire", detail={
                "policy": schedule.misfire, "missed": plan.missed, "skipped": plan.skipped,
                "first_skipped": plan.first_skipped, "last_skipped": plan.last_skipped, "counted": plan.counted,
                "fired": [f.slot for f in fired if f.kind == "missed"], "at": now})
    return Decision(name, schedule.misfire, plan, tuple(fired))


def _new_slot_key(unit: UnitOfWork, name: str) -> str:
    """A fresh secret for `name`'s slot ids, stored under the row lock the caller holds."""
    key = secrets.token_hex(32)
    schedule_queries.set_slot_key(unit, name, key)
    return key


def _taken(unit: UnitOfWork, job: NewJob) -> bool:
    """Whether the job already registered under `job`'s id carries other content (another delivery
    digest: reliable.delivery_digest) than `job`."""
    found = schedule_queries.registered(unit, job.job_id)
    if found is None:
        return False
    digest = message_digest({**job.message, "actor_name": job.actor})
    return found.actor != job.actor or (found.delivery_digest is not None and found.delivery_digest != digest)


def due_names(store: StateStore, now: float) -> list[str]:
    """The schedules not paused whose next slot is due at `now` (one statement: every tick runs it)."""
    return schedule_queries.due(store, now)


def trigger(store: StateStore, name: str, *, operator: str, reason: str) -> NewJob:
    """Register one job of `name` now, outside its slots (audited); the job to publish.

    It is no slot: the schedule's next slot fires as planned. Works on a paused schedule too.
    """
    require_reason("schedules trigger", reason)
    job_id = str(uuid.uuid4())
    with store.transaction() as unit:
        row = schedule_queries.lock(unit, name)
        if row is None:
            raise ScheduleNotFound(name)
        unit.use_now(float(row.now))
        job = build_job(json.loads(row.template), name, unit.now(), job_id)
        unit.register([job])
        _event(store, unit, name, "trigger", operator=operator, reason=reason, detail={"job_id": job_id})
    return job


def set_paused(store: StateStore, name: str, paused: bool, *, operator: str, reason: str) -> bool:
    """Pause or resume `name` (audited); False when it already was in that state (nothing written).

    A resumed schedule drops the slots that passed while it was paused: its next slot is the first
    after the resume.
    """
    require_reason("schedules pause" if paused else "schedules resume", reason)
    with store.transaction() as unit:
        row = schedule_queries.lock(unit, name)
        if row is None:
            raise ScheduleNotFound(name)
        unit.use_now(float(row.now))
        if bool(row.paused) == paused:
            return False
        decided_until = next_slot = None
        if not paused:
            schedule = Schedule.from_definition(json.loads(row.definition))
            decided_until = max(float(row.decided_until), unit.now())
            next_slot = float(schedule.timing.next_after(decided_until))
        schedule_queries.set_paused(unit, name, paused, decided_until=decided_until, next_slot=next_slot)
        _event(store, unit, name, "pause" if paused else "resume", operator=operator, reason=reason,
               detail={"next_slot": next_slot} if next_slot is not None else None)
    return True


def delete(store: StateStore, name: str, *, operator: str, reason: str) -> None:
    """Remove `name` (audited; its fired slots and their jobs stay). A worker whose code still
    declares it stores it again at its next boot: remove the declaration first."""
    require_reason("schedules delete", reason)
    with store.transaction() as unit:
        row = schedule_queries.lock(unit, name)
        if row is None:
            raise ScheduleNotFound(name)
        _event(store, unit, name, "delete", operator=operator, reason=reason,
               detail={"definition": json.loads(row.definition)})
        schedule_queries.delete(unit, name)


def refused(store: StateStore, name: str, command: str, *, operator: str, reason: str | None, why: str) -> None:
    """Record in `name`'s audit trail that `operator` was refused `command`."""
    with store.transaction() as unit:
        _event(store, unit, name, "command_refused", operator=operator, reason=reason,
               detail={"command": command, "why": why})


def list_schedules(store: StateStore) -> list[ScheduleRow]:
    """Every stored schedule, by name."""
    return [_row(row) for row in schedule_queries.list_all(store)]


def get_schedule(store: StateStore, name: str) -> ScheduleRow:
    """The stored schedule `name`; ScheduleNotFound if there is none."""
    row = schedule_queries.get(store, name)
    if row is None:
        raise ScheduleNotFound(name)
    return _row(row)


def list_slots(store: StateStore, name: str, *, limit: int = 20) -> list[SlotRow]:
    """`name`'s most recent fired slots, newest first, with their jobs' states."""
    return [SlotRow(s.schedule, s.slot_at, s.job_id, s.kind, s.fired_at, JobStatus(s.status) if s.status else None)
            for s in schedule_queries.list_slots(store, name, limit)]


def list_events(store: StateStore, name: str, *, limit: int = 20) -> list[ScheduleEvent]:
    """`name`'s most recent audit entries, oldest first."""
    found = [ScheduleEvent(e.id, e.schedule, e.at, e.event, e.operator, e.reason, e.host,
                           json.loads(e.detail) if e.detail else {})
             for e in schedule_queries.list_events(store, name, limit)]
    return found[::-1]


def count_slots(store: StateStore, names: Sequence[str] = ()) -> dict[str, int]:
    """How many slots each schedule fired (all schedules, or `names`)."""
    return {c.schedule: int(c.fired) for c in schedule_queries.count_slots(store, list(names) if names else None)}
