"""What a write hands back: the job row, and its event row as stored, from fewer columns on PostgreSQL.

`write_job` returns the job's columns and only the event's own ones (the rest of the event row are
copies of the job's, rebuilt by sqlrunner); the event row the listeners get must still be the row
stored, single write or group-commit batch alike.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.sqlrunner import EVENT_OWN, JOB_COLUMNS, RECORD_TIMING, SLIM_KEPT, load_queries
from reliable.store.writes import transition_write


def _stored_events(store: StateStore, job_id: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.as_dict().items() if k != "id"} for e in store.events(job_id)]


def _heard(heard: list[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    timing = ("started_at", "scheduled_at", "dispatched_at")  # the job's, added for the listeners
    return [{k: v for k, v in e.items() if k not in timing} for e in heard if e["job_id"] == job_id]


def test_the_written_event_is_the_stored_row(store: StateStore) -> None:
    heard: list[dict[str, Any]] = []
    store.add_listener(heard.append)
    store.register_many([NewJob("w1", "q", "a", {"args": [1]}, workflow_id="wf", trace_id="t")])
    claim = store.claim("w1", worker_id="worker-1", lease_ttl=60, delivery_digest=None)
    store.finish("w1", claim.lease_id, Event.FAIL, error=ErrorInfo("permanent", "E", "boom"), worker_id="worker-1",
                 detail={"why": "a test"})
    assert _heard(heard, "w1") == _stored_events(store, "w1")


def test_a_batch_hands_back_the_stored_event_rows(pg_store: StateStore) -> None:
    store = StateStore(engine=pg_store.engine, group_commit=True)
    store.register_many([NewJob(job_id, "q", "a", {}, trace_id=job_id) for job_id in ("b1", "b2")])
    claims = {j: store.claim(j, worker_id="w", lease_ttl=60) for j in ("b1", "b2")}
    written = store._sql.write_many([transition_write(j, Event.SUCCEED, lease_id=claims[j].lease_id, worker_id="w")
                                     for j in ("b1", "b2")])
    for job_id, result in zip(("b1", "b2"), written, strict=True):
        assert result is not None
        job, event = result
        assert job["job_id"] == job_id and job["status"] == "SUCCEEDED"
        stored = store.events(job_id)[-1].as_dict()
        assert {**event, "detail": stored["detail"]} == stored  # the detail as stored: JSON text, decoded here


def test_write_job_returns_the_jobs_columns_then_the_events_own(pg_store: StateStore) -> None:
    pg_store.register_many([NewJob("c1", "q", "a", {})])
    sql = pg_store._sql
    with sql.single() as tx:
        sql.write(transition_write("c1", Event.CLAIM, worker_id="w", lease_ttl=60, attempt_id="a1"), tx)
        assert tuple(d[0] for d in tx.cursor.description) == JOB_COLUMNS + EVENT_OWN


def test_a_slim_write_returns_only_the_columns_its_event_record_takes(pg_store: StateStore) -> None:
    store = StateStore(engine=pg_store.engine, group_commit=True)
    store.register_many([NewJob(j, "q", "a", {"args": [j]}, trace_id=j) for j in ("s1", "s2", "s3")])
    claims = {j: store.claim(j, worker_id="w", lease_ttl=60) for j in ("s1", "s2", "s3")}
    sql = store._sql
    with sql.single() as tx:
        cursor = sql.execute(tx, "write_job", {**transition_write(
            "s1", Event.SUCCEED, lease_id=claims["s1"].lease_id, worker_id="w", slim=True).params(None),
            "sources": "{RUNNING}"})
        row = cursor.fetchone()
    nulls = {name for name, value in zip(JOB_COLUMNS, row, strict=False) if value is None}
    assert set(JOB_COLUMNS) - SLIM_KEPT <= nulls  # the message and every column the record does not take
    assert row[JOB_COLUMNS.index("message")] is None and row[JOB_COLUMNS.index("trace_id")] == "s1"
    # Single and batch alike: the event row as stored, the job's timing columns; a full write beside
    # a slim one in the same batch keeps its whole job row.
    written = sql.write_many([transition_write("s2", Event.SUCCEED, lease_id=claims["s2"].lease_id, worker_id="w",
                                               slim=True),
                              transition_write("s3", Event.SUCCEED, lease_id=claims["s3"].lease_id, worker_id="w")])
    slim, full = written
    assert slim is not None and full is not None
    assert slim[0] == {name: full_value for name, full_value in store.find("s2").as_dict().items()
                       if name in RECORD_TIMING}
    assert full[0]["message"] is not None and full[0]["status"] == "SUCCEEDED"
    for job_id, (_, event) in (("s2", slim), ("s3", full)):
        stored = store.events(job_id)[-1].as_dict()
        assert {**event, "detail": stored["detail"]} == stored


def test_a_submitted_success_gives_the_listeners_the_full_record(pg_store: StateStore) -> None:
    store = StateStore(engine=pg_store.engine, group_commit=True)
    heard: list[dict[str, Any]] = []
    store.add_listener(heard.append)
    store.register_many([NewJob("l1", "q", "a", {}, workflow_id="wf", trace_id="t")])
    claim = store.claim("l1", worker_id="w", lease_ttl=60)
    committed = threading.Event()
    assert store.succeed_later("l1", claim.lease_id, worker_id="w", done=lambda ok: ok and committed.set())
    assert committed.wait(10)
    job = store.find("l1")
    assert job is not None
    last = [e for e in heard if e["job_id"] == "l1"][-1]
    assert last["event"] == "succeed"
    assert {name: last[name] for name in RECORD_TIMING} == {name: getattr(job, name) for name in RECORD_TIMING}
    assert _heard(heard, "l1") == _stored_events(store, "l1")


def test_the_slim_columns_are_the_ones_the_record_leaves_out() -> None:
    sql = load_queries("postgresql")["write_job"]
    nulled = set(re.findall(r"CASE WHEN j\.slim THEN NULL ELSE j\.(\w+) END AS (\w+)", sql))
    assert {a for a, b in nulled if a == b} == set(JOB_COLUMNS) - SLIM_KEPT
    assert all(a == b for a, b in nulled)
