"""Schedules in the store, on SQLite and PostgreSQL: declarations, one job per slot, pause / resume /
trigger audited, misfire decisions recorded."""

from __future__ import annotations

import pytest
from schedules_support import T0, slot_id, template
from sqlalchemy import func, select, update

from reliable import ReasonRequired, Schedule, ScheduleNotFound
from reliable.schedules import Scheduler, storage
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import jobs, schedule_slots, schedules

from support import Clock

MINUTE = 60


def count(store: StateStore, table: object) -> int:
    with store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def test_declare_stores_the_schedule_from_now_on(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    assert storage.declare(store, Schedule("m", "work", every="1m"), template()) is True
    row = storage.get_schedule(store, "m")
    assert (row.decided_until, row.next_slot, row.last_slot, row.paused) == (T0, T0 + MINUTE, None, False)
    assert (row.actor, row.queue, row.template["owner"]) == ("work", "default", "team-a")
    assert [e.event for e in storage.list_events(store, "m")] == ["declared"]
    with pytest.raises(ScheduleNotFound, match="no schedule named 'x'"):
        storage.get_schedule(store, "x")


def test_a_new_declaration_keeps_the_runtime_state(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    Scheduler(store, None).tick(T0 + 5 * MINUTE)
    storage.set_paused(store, "m", True, operator="carol", reason="maintenance")
    clock.now = T0 + 6 * MINUTE
    assert storage.declare(store, Schedule("m", "work", every="1m"), template()) is False  # unchanged: no write
    assert storage.declare(store, Schedule("m", "work", every="5m", kwargs={"v": 2}), template(v=2)) is False
    row = storage.get_schedule(store, "m")
    assert (row.schedule.every, row.paused, row.decided_until, row.last_slot) == (300, True, T0 + 300, T0 + 300)
    assert row.next_slot == T0 + 600
    assert [e.event for e in storage.list_events(store, "m")] == ["declared", "misfire", "pause", "redeclared"]


def test_each_slot_fires_once_with_a_deterministic_job(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("m", "work", every="1m", kwargs={"k": 1}), template(k=1))
    scheduler = Scheduler(store, None)
    first = scheduler.tick(T0 + MINUTE)
    assert [(f.slot, f.kind) for f in first.fired] == [(T0 + MINUTE, "on_time")]
    assert first.unpublished == (first.fired[0].job_id,)  # no broker: left to the sweeper
    assert scheduler.tick(T0 + MINUTE).fired == ()  # decided already
    job = store.get(first.fired[0].job_id)
    assert job.job_id == slot_id(store, "m", T0 + MINUTE)
    assert job.status is JobStatus.PENDING and job.owner == "team-a" and job.message["kwargs"] == {"k": 1}
    assert job.message["options"]["schedule"] == "m" and job.message["options"]["schedule_slot"] == T0 + MINUTE
    assert job.trace_id and job.message["options"]["trace_id"] == job.trace_id

    # Forced: the decision is undone as if another scheduler had not seen it; the slot's row refuses.
    with store.write() as conn:
        conn.execute(update(schedules).values(decided_until=T0, next_slot=T0 + MINUTE))
    again = scheduler.tick(T0 + MINUTE)
    assert again.fired == ()
    assert count(store, schedule_slots) == 1 and count(store, jobs) == 1
    assert storage.get_schedule(store, "m").decided_until == T0 + MINUTE


def test_misfire_is_decided_once_and_recorded(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("c", "work", every="1m", misfire="catch_up", catch_up_max=2, misfire_grace=30),
                    template())
    report = Scheduler(store, None).tick(T0 + 10 * MINUTE)
    assert [(f.slot, f.kind) for f in report.fired] == [(T0 + 8 * MINUTE, "missed"), (T0 + 9 * MINUTE, "missed"),
                                                        (T0 + 10 * MINUTE, "on_time")]
    assert [(s.policy, s.count, s.first, s.last) for s in report.skipped] == [("catch_up", 7, T0 + MINUTE,
                                                                               T0 + 7 * MINUTE)]
    (misfire,) = [e for e in storage.list_events(store, "c") if e.event == "misfire"]
    assert misfire.detail["skipped"] == 7 and misfire.detail["fired"] == [T0 + 8 * MINUTE, T0 + 9 * MINUTE]
    slots = storage.list_slots(store, "c")
    assert [(s.slot_at, s.kind, s.status) for s in slots][:2] == [(T0 + 10 * MINUTE, "on_time", JobStatus.PENDING),
                                                                  (T0 + 9 * MINUTE, "missed", JobStatus.PENDING)]


def test_pause_resume_trigger_are_audited(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    with pytest.raises(ReasonRequired):
        storage.set_paused(store, "m", True, operator="carol", reason=" ")
    assert storage.set_paused(store, "m", True, operator="carol", reason="db maintenance") is True
    assert storage.set_paused(store, "m", True, operator="carol", reason="again") is False
    assert storage.due_names(store, T0 + 3600) == []
    assert Scheduler(store, None).tick(T0 + 3600).fired == ()

    job = storage.trigger(store, "m", operator="dave", reason="backfill now")  # a paused schedule too
    assert store.get(job.job_id).status is JobStatus.PENDING
    assert job.message["options"]["schedule"] == "m"

    clock.now = T0 + 3600 + 30
    assert storage.set_paused(store, "m", False, operator="erin", reason="done") is True
    row = storage.get_schedule(store, "m")
    assert (row.paused, row.decided_until, row.next_slot) == (False, T0 + 3630, T0 + 3660)  # the pause's slots drop
    assert Scheduler(store, None).tick(T0 + 3660).fired[0].slot == T0 + 3660

    events = [(e.event, e.operator, e.reason) for e in storage.list_events(store, "m")]
    assert events == [("declared", None, None), ("pause", "carol", "db maintenance"),
                      ("trigger", "dave", "backfill now"), ("resume", "erin", "done")]
    trigger_event = storage.list_events(store, "m")[2]
    assert trigger_event.detail == {"job_id": job.job_id} and trigger_event.host == store.host
    with pytest.raises(ScheduleNotFound):
        storage.trigger(store, "nope", operator="dave", reason="x")


def test_a_paused_declaration_starts_paused(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("p", "work", cron="*/5 * * * *", paused=True), template())
    assert storage.get_schedule(store, "p").paused
    assert storage.due_names(store, T0 + 3600) == []


def test_cron_schedule_in_a_zone(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("q", "work", cron="*/15 * * * *", timezone="Asia/Kolkata"), template())
    fired = Scheduler(store, None).tick(T0 + 15 * MINUTE).fired
    assert [f.slot for f in fired] == [T0 + 15 * MINUTE] and storage.count_slots(store) == {"q": 1}


def test_a_schedule_that_cannot_be_decided_does_not_stop_the_others(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("broken", "work", every="1m"), template())
    storage.declare(store, Schedule("fine", "work", every="1m"), template())
    with store.write() as conn:  # e.g. written by a later version with a field this one does not know
        conn.execute(update(schedules).where(schedules.c.name == "broken").values(definition='{"name": "broken"}'))
    report = Scheduler(store, None).tick(T0 + MINUTE)
    assert [f.schedule for f in report.fired] == ["fine"]


def test_a_fired_job_never_published_is_left_to_the_sweeper(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    (fired,) = Scheduler(store, None).tick(T0 + MINUTE).fired  # committed; the publish never happened
    clock.now = T0 + 301
    assert [job.job_id for job in store.stale_pending(age=300)] == [fired.job_id]
