"""Issue 38: a schedule's future slot cannot be squatted, on SQLite and PostgreSQL.

A slot's job id was a uuid5 of the schedule's name and the slot: anyone who could publish sent a
message ahead under the next one; it ran with its own arguments as the slot, and the schedule's own
message was refused as a mismatch while the slot was recorded as fired. Now the id is an HMAC under
a secret the store keeps per schedule, and a slot whose id is taken by other content is a conflict.
"""

from __future__ import annotations

import uuid

from click.testing import CliRunner
from schedules_support import T0, slot_id, template
from sqlalchemy import select

from reliable import Schedule
from reliable.cli.main import cli
from reliable.collector import StoreCollector
from reliable.schedules import Scheduler, storage
from reliable.store import NewJob, StateStore, schedule_queries
from reliable.store.schema import schedules

from support import Clock

MINUTE = 60
#: The namespace slot ids were a uuid5 of before issue 38 (what an attacker computes).
_OLD_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "reliable:schedule-slot")


def predictable(name: str, slot: float) -> str:
    return str(uuid.uuid5(_OLD_NAMESPACE, f"{name}\x00{int(slot)}"))


def stored_key(store: StateStore, name: str) -> str | None:
    with store.read() as conn:
        return conn.execute(select(schedules.c.slot_key).where(schedules.c.name == name)).scalar_one()


def conflicts_metric(store: StateStore) -> dict[str, float]:
    found = {}
    for family in StoreCollector(store).collect():
        for sample in family.samples:
            if sample.name == "reliable_schedule_slot_conflicts_total":
                found[sample.labels["schedule"]] = sample.value
    return found


def test_slot_ids_come_from_a_secret_no_listing_shows(clocked: tuple[StateStore, Clock], store_url: str) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    assert stored_key(store, "m") is None  # created by the first decision that needs it
    first = Scheduler(store, None).tick(T0 + MINUTE).fired[0]
    key = stored_key(store, "m")
    assert key is not None and len(key) == 64
    assert first.job_id != predictable("m", T0 + MINUTE)  # the name and the slot alone no longer give it
    assert first.job_id == slot_id(store, "m", T0 + MINUTE)
    # The key stays: later slots derive from the same one (a key set twice would make two jobs of a slot).
    second = Scheduler(store, None).tick(T0 + 2 * MINUTE).fired[0]
    assert stored_key(store, "m") == key and second.job_id == slot_id(store, "m", T0 + 2 * MINUTE)
    with store.transaction() as unit:
        schedule_queries.set_slot_key(unit, "m", "0" * 64)  # only ever set once
    assert stored_key(store, "m") == key
    # A second schedule's ids come from its own key.
    storage.declare(store, Schedule("n", "work", every="1m"), template())
    Scheduler(store, None).tick(T0 + 3 * MINUTE)
    assert stored_key(store, "n") not in (None, key)
    # Never printed: not in the stored rows the API, console and CLI show.
    row = storage.get_schedule(store, "m")
    assert key not in repr(row) and key not in repr(storage.list_schedules(store))
    for args in (["list", "--json"], ["show", "m", "--json"]):
        done = CliRunner().invoke(cli, ["schedules", *args, "--store", store_url])
        assert done.exit_code == 0, done.output
        assert key not in done.output


def test_a_slot_whose_id_is_taken_is_a_conflict_not_a_fire(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("m", "work", every="1m", kwargs={"amount": 1}), template(amount=1))
    scheduler = Scheduler(store, None)
    scheduler.tick(T0 + MINUTE)
    # Someone who learnt the key (or the old predictable id) registers the next slot's id first.
    taken = slot_id(store, "m", T0 + 2 * MINUTE)
    squatter = {"queue_name": "default", "actor_name": "work", "args": [], "kwargs": {"amount": 1_000_000},
                "options": {}, "message_id": taken, "message_timestamp": 0}
    assert store.register(NewJob(job_id=taken, queue="default", actor="work", message=squatter))
    report = scheduler.tick(T0 + 2 * MINUTE)
    assert report.fired == ()  # nothing to publish: the schedule's message would only be refused
    assert [s.slot_at for s in storage.list_slots(store, "m")] == [T0 + MINUTE]  # the slot is not marked fired
    conflict = storage.list_events(store, "m")[-1]
    assert (conflict.event, conflict.detail) == ("slot_conflict", {"slot": T0 + 2 * MINUTE, "job_id": taken})
    assert store.get(taken).message["kwargs"] == {"amount": 1_000_000}  # left as it is, not overwritten
    row = storage.get_schedule(store, "m")
    assert (row.last_slot, row.decided_until) == (T0 + MINUTE, T0 + 2 * MINUTE)
    assert conflicts_metric(store) == {"m": 1.0}
    # The next slot fires as usual.
    assert [f.slot for f in scheduler.tick(T0 + 3 * MINUTE).fired] == [T0 + 3 * MINUTE]
    assert conflicts_metric(store) == {"m": 1.0}


def test_the_same_job_already_registered_is_no_conflict(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    scheduler = Scheduler(store, None)
    scheduler.tick(T0 + MINUTE)
    slot = T0 + 2 * MINUTE
    job = storage.build_job(template(), "m", slot, slot_id(store, "m", slot))
    assert store.register(job)  # e.g. a copy of the very message, registered by a worker first
    assert [f.job_id for f in scheduler.tick(slot).fired] == [job.job_id]
    assert [s.slot_at for s in storage.list_slots(store, "m")] == [slot, T0 + MINUTE]
    assert "slot_conflict" not in [e.event for e in storage.list_events(store, "m")]
    assert conflicts_metric(store) == {"m": 0.0}
