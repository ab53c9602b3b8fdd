"""store.overview.overview on both databases: counts by state and queue, the oldest due PENDING job per queue."""

from __future__ import annotations

from sqlalchemy import update

from reliable import queue_pauses
from reliable.operators import Operator
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.store.job_stats import StatsBuffer, write_stats
from reliable.store.overview import known_names, overview
from reliable.store.schema import jobs

from support import Clock


def test_overview_counts_and_oldest_pending_per_queue(store_url: str) -> None:
    clock = Clock()
    store = StateStore(store_url, clock=clock)
    buffer = StatsBuffer()  # what a worker process counts and flushes (the SUCCEEDED figures are these)
    store.add_listener(buffer)
    try:
        for n in range(9):
            store.register(NewJob(f"j{n}", queue=("a", "b", "c")[n % 3], actor="x", message={}))
        with store.write() as conn:  # a's oldest is due, b's only one is due later, c has none pending
            for n, scheduled in ((0, clock.now - 50), (3, clock.now - 20), (6, clock.now - 5),
                                 (1, clock.now + 60), (4, clock.now + 90)):
                conn.execute(update(jobs).where(jobs.c.job_id == f"j{n}").values(scheduled_at=scheduled))
        for job_id in ("j2", "j5", "j8", "j7"):
            store.claim(job_id, worker_id="w", lease_ttl=60)
        for job_id in ("j2", "j5"):
            store.finish(job_id, store.get(job_id).lease_id, Event.SUCCEED, worker_id="w")
        assert overview(store).by_state().get("SUCCEEDED") is None  # not flushed yet: not counted
        write_stats(store, buffer.take())
        seen = overview(store)
        assert seen.counts == {("PENDING", "a"): 3, ("PENDING", "b"): 2, ("RUNNING", "c"): 1,
                               ("RUNNING", "b"): 1, ("SUCCEEDED", "c"): 2}
        assert seen.oldest_pending == {"a": clock.now - 50, "b": None, "c": None}
        assert seen.by_state() == {"PENDING": 5, "RUNNING": 2, "SUCCEEDED": 2}
        assert sum(seen.successes) == 2 and sum(seen.failures) == 0
        clock.now += 2 * 86_400  # the final states' counts cover the window only
        later = overview(store)
        assert ("SUCCEEDED", "c") not in later.counts and later.counts[("PENDING", "a")] == 3
        assert later.queues == ["a", "b", "c"]  # c: its job still RUNNING
        assert seen.counted_queues == ("b", "c")  # a claim or an attempt's end counted in the window
    finally:
        store.close()


def test_a_queue_whose_jobs_all_succeeded_is_listed_and_its_page_reads_its_count(store_url: str) -> None:
    """SUCCEEDED comes from the workers' aggregates: all queues and the busiest in the overview, a
    page's queues when the page reads them (`with_queues`, their oldest due PENDING job too); such a
    queue is still listed."""
    store = StateStore(store_url)
    buffer = StatsBuffer()
    store.add_listener(buffer)
    try:
        for n, queue in enumerate(("done", "done", "busy")):
            store.register(NewJob(f"s{n}", queue=queue, actor="x", message={}))
        for job_id in ("s0", "s1"):
            claim = store.claim(job_id, worker_id="w", lease_ttl=60)
            store.finish(job_id, claim.lease_id, Event.SUCCEED, worker_id="w")
        write_stats(store, buffer.take())
        top = overview(store, latency_queues=1)  # the web app's: the busiest queue's SUCCEEDED only
        assert top.queues == ["busy", "done"] and top.by_state() == {"PENDING": 1, "SUCCEEDED": 2}
        assert ("SUCCEEDED", "done") not in top.counts
        page = top.with_queues(store, ["done"])
        assert page.counts[("SUCCEEDED", "done")] == 2 and page.by_state() == top.by_state()
        assert set(top.oldest_pending) == {"busy"} and top.oldest_pending["busy"] is not None  # due now
        assert page.oldest_pending == {**top.oldest_pending, "done": None}  # nothing PENDING in done
        assert overview(store).counts[("SUCCEEDED", "done")] == 2  # every queue's (the CLI's)
    finally:
        store.close()


def test_known_names_offer_live_and_paused_queues_and_every_actor(store_url: str) -> None:
    store = StateStore(store_url)
    try:
        for job_id, queue, actor in (("p1", "billing", "charge"), ("p2", "billing", "refund"),
                                     ("d1", "archive", "compact"), ("p3", "mail", "send")):
            store.register(NewJob(job_id, queue=queue, actor=actor, message={}))
        claim = store.claim("d1", worker_id="w1", lease_ttl=60)
        store.finish("d1", claim.lease_id, Event.SUCCEED, worker_id="w1")
        queue_pauses.pause(store, "quiet", reason="maintenance", identity=Operator("ada", "h", "test"))
        known = known_names(store)
        assert known.queues == ("billing", "mail", "quiet")  # archive has no unfinished job, quiet is paused
        assert known.actors == ("charge", "compact", "refund", "send")  # every actor, finished or not
    finally:
        store.close()
