"""Every typed named query of the store, run on every database, returns the columns its row type names.

The store's typed query modules (reliable/store/*_queries.py) declare each named query a feature
uses as a `Query` (with the dataclass its rows fill, by position) or a `Statement`. This suite runs
each of them through its typed function on SQLite and PostgreSQL, records the columns the cursor
reports, and fails when they differ from the row type's fields, in name or in order: a reordered or
renamed column in a .sql file fails here instead of being read into the wrong field.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import reliable.store
from reliable.store import NewJob, StateStore, limit_queries, pause_queries, schedule_queries
from reliable.store.named_rows import Query, Statement
from reliable.store.sqlrunner import SqlRunner, Tx, load_queries


def declared() -> dict[str, Query[Any] | Statement]:
    """Every Query and Statement declared in a module of reliable/store/, by query name."""
    found: dict[str, Query[Any] | Statement] = {}
    for info in pkgutil.iter_modules(reliable.store.__path__):
        module = importlib.import_module(f"reliable.store.{info.name}")
        for value in vars(module).values():
            if isinstance(value, (Query, Statement)):
                assert found.get(value.name, value) == value, f"{value.name} is declared twice, differently"
                found[value.name] = value
    return found


@pytest.fixture
def columns(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, ...] | None]:
    """The columns the cursor reported for each named query run while the test runs (None: no rows)."""
    seen: dict[str, tuple[str, ...] | None] = {}
    execute = SqlRunner.execute

    def recording(self: SqlRunner, tx: Tx, name: str, params: Mapping[str, Any]) -> Any:
        cursor = execute(self, tx, name, params)
        seen[name] = None if cursor.description is None else tuple(d[0] for d in cursor.description)
        return cursor

    monkeypatch.setattr(SqlRunner, "execute", recording)
    return seen


def _fields(query: Query[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(query.row))  # type: ignore[arg-type]


def _run_every_query(store: StateStore) -> None:
    """Each typed function once, in an order where each query that returns rows returns one."""
    job_id = str(uuid.uuid4())
    store.register(NewJob(job_id=job_id, queue="q", actor="act", message={"message_id": job_id, "args": []}))
    _limits(store, job_id)
    _schedules(store, job_id)
    _pauses(store)


def _limits(store: StateStore, job_id: str) -> None:
    actor, key = f"act-{uuid.uuid4().hex[:8]}", "k"
    with store.transaction() as unit:
        limit_queries.ensure(unit, actor, 2)
        limit_queries.ensure_slots(unit, actor, key, 2)
        limit_queries.ensure_buckets(unit, actor, key, 2, 5.0)
    if store.dialect == "postgresql":
        acquired = limit_queries.acquire_slot(store, actor, key, job_id, 30.0)
        assert acquired.slot == 0 and acquired.declared == acquired.effective == 2
        slot, lease = acquired.slot, acquired.holder_lease
        token = limit_queries.take_token(store, actor, key, shards=2, capacity=5.0, refill=1.0, start=0)
        assert token.bucket is not None and token.best is not None and token.best >= 1
    else:
        with store.transaction() as unit:
            row = limit_queries.state(unit, actor)
            assert row is not None and row.declared == row.effective == 2 and row.streak == 0
            picked = limit_queries.pick_slot(unit, actor, key, row.effective)
            assert picked is not None and picked.slot == 0
            held = limit_queries.hold_slot(unit, actor, key, picked.slot, job_id, 30.0)
            assert held is not None and held.slot == 0
            slot, lease = held.slot, held.holder_lease
            bucket = limit_queries.pick_bucket(unit, actor, key, shards=2, capacity=5.0, refill=1.0, start=0)
            assert bucket is not None and bucket.have == 5.0
            limit_queries.spend_token(unit, actor, key, bucket.bucket, bucket.have)
    assert lease is not None
    assert limit_queries.bind_slot(store, actor, key, slot, job_id, lease) is True
    assert [(h.key, h.slot, h.holder_job) for h in limit_queries.holders(store, actor)] == [(key, 0, job_id)]
    limit_queries.release_slot(store, actor, key, slot, job_id)
    assert limit_queries.holders(store, actor) == []
    with store.transaction() as unit:
        locked = limit_queries.lock(unit, actor)
        assert locked is not None and locked.declared == 2 and locked.now > 0
        limit_queries.update(unit, actor, effective=1, streak=1, last_rate_limited_at=locked.now,
                             changed_at=locked.now)
    with store.transaction() as unit:
        again = limit_queries.lock(unit, actor)
        assert again is not None and (again.effective, again.streak, again.changed_at) == (1, 1, locked.now)
    limit_queries.mark_deferred(store, job_id, 5.0)


def _schedules(store: StateStore, job_id: str) -> None:
    name = f"sched-{uuid.uuid4().hex[:8]}"
    text = {"actor": "act", "queue": "q", "definition": '{"every": 60}', "template": '{"actor": "act"}'}
    with store.transaction() as unit:
        assert schedule_queries.lock(unit, name) is None
        assert schedule_queries.insert(unit, name, **text, paused=False, decided_until=None, next_slot=0.0)
        assert not schedule_queries.insert(unit, name, **text, paused=False, decided_until=None, next_slot=0.0)
        schedule_queries.add_event(unit, name, "declared", operator="op", reason="why", host="h", detail='{"a": 1}')
    with store.transaction() as unit:
        locked = schedule_queries.lock(unit, name)
        assert locked is not None and (locked.name, locked.definition, locked.template) == (
            name, text["definition"], text["template"])
        assert not locked.paused and locked.now >= locked.decided_until
        schedule_queries.redeclare(unit, name, **{**text, "definition": '{"every": 30}'}, next_slot=1.0)
        assert schedule_queries.insert_slot(unit, name, 100.0, job_id, "on_time")
        assert not schedule_queries.insert_slot(unit, name, 100.0, job_id, "on_time")
        schedule_queries.decide(unit, name, decided_until=100.0, next_slot=160.0, last_slot=100.0)
        schedule_queries.set_slot_key(unit, name, "k" * 64)
        schedule_queries.set_slot_key(unit, name, "j" * 64)  # set once: the first stays
        registered = schedule_queries.registered(unit, job_id)
        assert registered is not None and (registered.job_id, registered.actor) == (job_id, "act")
        assert schedule_queries.registered(unit, "no-such-job") is None
        assert schedule_queries.insert_slot(unit, name, 200.0, job_id, "on_time")
        schedule_queries.slot_conflict(unit, name, 200.0)  # taken back: list_slots below shows slot 100 only
    with store.transaction() as unit:
        keyed = schedule_queries.lock(unit, name)
        assert keyed is not None and keyed.slot_key == "k" * 64
    assert name in schedule_queries.due(store, 1000.0)
    assert name not in schedule_queries.due(store, 150.0)
    stored = schedule_queries.get(store, name)
    assert stored is not None and (stored.actor, stored.queue, stored.definition, stored.last_slot,
                                   stored.next_slot) == ("act", "q", '{"every": 30}', 100.0, 160.0)
    assert stored in schedule_queries.list_all(store)
    [slot] = schedule_queries.list_slots(store, name, 5)
    assert (slot.schedule, slot.slot_at, slot.job_id, slot.kind, slot.status) == (
        name, 100.0, job_id, "on_time", "PENDING")
    [event] = schedule_queries.list_events(store, name, 5)
    assert (event.schedule, event.event, event.operator, event.reason, event.host, event.detail) == (
        name, "declared", "op", "why", "h", '{"a": 1}')
    assert [(c.schedule, c.fired) for c in schedule_queries.count_slots(store, [name])] == [(name, 1)]
    assert (name, 1) in [(c.schedule, c.fired) for c in schedule_queries.count_slots(store, None)]
    with store.transaction() as unit:
        schedule_queries.set_paused(unit, name, True, decided_until=None, next_slot=None)
    assert name not in schedule_queries.due(store, 1000.0)
    with store.transaction() as unit:
        schedule_queries.delete(unit, name)
    assert schedule_queries.get(store, name) is None


def _pauses(store: StateStore) -> None:
    queue = f"queue-{uuid.uuid4().hex[:8]}"
    assert pause_queries.pause(store, queue, operator="op", host="h", source="option", reason="why")
    assert not pause_queries.pause(store, queue, operator="op", host="h", source="option", reason="again")
    pause_queries.add_event(store, queue, "pause", operator="op", host="h", source="option", reason="why",
                            detail='{"b": 2}')
    [paused] = [p for p in pause_queries.list_paused(store) if p.queue == queue]
    assert (paused.operator, paused.host, paused.source, paused.reason) == ("op", "h", "option", "why")
    assert paused.now >= paused.paused_at
    [event] = pause_queries.list_events(store, queue, 5)
    assert (event.queue, event.event, event.operator, event.host, event.source, event.reason, event.detail) == (
        queue, "pause", "op", "h", "option", "why", '{"b": 2}')
    assert pause_queries.resume(store, queue)
    assert not pause_queries.resume(store, queue)


def _mismatches(dialect: str, columns: Mapping[str, tuple[str, ...] | None]) -> dict[str, Any]:
    """query -> (the columns it returned, its row type's fields), for every declared query of
    `dialect` whose columns differ; AssertionError naming the queries that were not run."""
    mine = {name: q for name, q in declared().items() if name in load_queries(dialect)}
    assert mine.keys() <= columns.keys(), f"not run on {dialect}: {sorted(mine.keys() - columns.keys())}"
    return {name: wrong for name, q in mine.items() if (wrong := _wrong(q, columns)) is not None}


def _wrong(query: Query[Any] | Statement, columns: Mapping[str, tuple[str, ...] | None]
           ) -> tuple[tuple[str, ...] | None, tuple[str, ...]] | None:
    """(the columns `query` returned, its row type's fields) when they differ; None when they match."""
    if isinstance(query, Statement) or columns[query.name] == _fields(query):
        return None
    return columns[query.name], _fields(query)


def test_every_typed_query_returns_the_columns_of_its_row_type(
        store: StateStore, columns: dict[str, tuple[str, ...] | None]) -> None:
    _run_every_query(store)
    assert _mismatches(store.dialect, columns) == {}, "query -> (its columns, its row type's fields)"


def test_every_declared_query_exists_and_each_dialect_has_its_counterpart() -> None:
    queries = declared()
    postgresql, sqlite = load_queries("postgresql"), load_queries("sqlite")
    assert {name for name in queries if name not in postgresql and name not in sqlite} == set()
    # The one-statement PostgreSQL forms and the SQLite steps that do the same work.
    only_postgresql = {"limit_acquire_slot", "limit_take_token"}
    only_sqlite = {"limit_state", "limit_pick_slot", "limit_hold_slot", "limit_pick_bucket", "limit_spend_token"}
    assert {name for name in queries if name not in sqlite} == only_postgresql
    assert {name for name in queries if name not in postgresql} == only_sqlite


def test_row_types_are_dataclasses_that_cannot_be_read_by_position() -> None:
    rows = {q.row for q in declared().values() if isinstance(q, Query)}
    assert rows and all(dataclasses.is_dataclass(row) for row in rows)
    assert [row for row in rows if hasattr(row, "__getitem__") or hasattr(row, "__iter__")] == []


def test_a_reordered_column_fails_the_check(tmp_path: Path, columns: dict[str, tuple[str, ...] | None],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Swap two columns of lock_schedule in sqlite.sql's text, as a careless edit of the file would.
    queries: Any = load_queries("sqlite")
    swapped = queries["lock_schedule"].replace("definition, template", "template, definition", 1)
    assert swapped != queries["lock_schedule"]
    monkeypatch.setitem(queries, "lock_schedule", swapped)
    store = StateStore(f"sqlite:///{tmp_path / 'swapped.db'}")
    store.upgrade()
    try:
        with store.transaction() as unit:
            schedule_queries.lock(unit, "any")
    finally:
        store.close()
    wrong = _wrong(declared()["lock_schedule"], columns)
    assert wrong is not None and wrong[0] is not None and wrong[0][1:3] == ("template", "definition")
    assert wrong[1][1:3] == ("definition", "template")
