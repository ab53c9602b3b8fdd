"""Review 3 of issue 42: the overview and the Queues page list every queue with jobs counted (a queue
whose jobs all succeeded too, before any worker wrote its figures), and `queues_total` counts the
paused queues as docs/api.md says. SQLite and PostgreSQL (the `store` fixture)."""

from __future__ import annotations

from reliable import queue_pauses
from reliable.operators import Operator
from reliable.states import Event
from reliable.store import NewJob, StateStore

from web_support import Tokens, bearer, session


def _finish(store: StateStore, job_id: str, queue: str) -> None:
    store.register(NewJob(job_id, queue=queue, actor="x", message={}))
    claim = store.claim(job_id, worker_id="w", lease_ttl=60)
    store.finish(job_id, claim.lease_id, Event.SUCCEED, worker_id="w")


def test_a_queue_whose_jobs_all_succeeded_is_a_row_of_the_overview_and_its_api(store: StateStore,
                                                                                 tokens: Tokens) -> None:
    """Review 3 (HIGH): `queues_total` said 2 and `queues` listed 1; the page had no row for it."""
    _finish(store, "s0", "done")
    _finish(store, "s1", "done")
    store.register(NewJob("s2", queue="busy", actor="x", message={}))
    client, _ = session(store, tokens.viewer)
    with client:
        body = client.get("/api/v1/overview", headers=bearer(tokens.viewer)).json()
        page = client.get("/").text
    assert body["queues_total"] == 2 and body["queues"] == ["busy", "done"], body["queues"]
    assert {"state": "SUCCEEDED", "queue": "done", "jobs": 2} in body["counts"]
    assert body["by_state"] == {"PENDING": 1, "SUCCEEDED": 2}
    assert ">done</a>" in page


def test_a_drained_fleet_keeps_its_rows_and_the_succeeded_column(store: StateStore, tokens: Tokens) -> None:
    """Every job of the day succeeded, nothing unfinished: the table keeps its row and SUCCEEDED column."""
    for n in range(3):
        _finish(store, f"d{n}", "done")
    client, _ = session(store, tokens.viewer)
    with client:
        page = client.get("/overview/live").text
    assert "No jobs yet." not in page and ">done</a>" in page
    assert "state=SUCCEEDED" in page and ">3</a>" in page  # the column, its cell and All queues total


def test_a_just_drained_queue_stays_on_the_queues_page(store: StateStore, tokens: Tokens) -> None:
    """Review 3 (MEDIUM): listed at once, not once a worker flushed its figures."""
    _finish(store, "n0", "drained")
    client, _ = session(store, tokens.viewer)
    with client:
        rows = client.get("/api/v1/queues", headers=bearer(tokens.viewer)).json()["queues"]
        page = client.get("/queues").text
    assert [r["queue"] for r in rows] == ["drained"] and rows[0]["by_state"] == {"SUCCEEDED": 1}
    assert 'id="queue-drained"' in page



def test_queues_total_counts_a_paused_queue_without_jobs(store: StateStore, tokens: Tokens) -> None:
    """Review 3 (LOW): docs/api.md says a pause counts; the Queues page lists the paused queue."""
    store.register(NewJob("j0", queue="live", actor="x", message={}))
    queue_pauses.pause(store, "idle", reason="maintenance", identity=Operator("ada", "h", "test"))
    client, _ = session(store, tokens.viewer)
    with client:
        body = client.get("/api/v1/overview", headers=bearer(tokens.viewer)).json()
        queues = client.get("/api/v1/queues", headers=bearer(tokens.viewer)).json()
    assert body["queues_total"] == queues["total"] == 2 and body["queues"] == ["live"]
