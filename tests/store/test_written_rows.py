"""What a write hands back: the job row, and its event row as stored, from fewer columns on PostgreSQL.

`write_job` returns the job's columns and only the event's own ones (the rest of the event row are
copies of the job's, rebuilt by sqlrunner); the event row the listeners get must still be the row
stored, single write or group-commit batch alike.
"""

from __future__ import annotations

from typing import Any

from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.sqlrunner import EVENT_OWN, JOB_COLUMNS
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
