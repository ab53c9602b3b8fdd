"""store.overview.overview on both databases: counts by state and queue, the oldest due PENDING job per queue."""

from __future__ import annotations

from sqlalchemy import update

from reliable import queue_pauses
from reliable.operators import Operator
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.store.overview import OVERVIEW_QUEUES, known_names, overview
from reliable.store.schema import jobs

from support import Clock


def test_overview_counts_and_oldest_pending_per_queue(store_url: str) -> None:
    clock = Clock()
    store = StateStore(store_url, clock=clock)
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
        seen = overview(store)
        assert seen.counts == {("PENDING", "a"): 3, ("PENDING", "b"): 2, ("RUNNING", "c"): 1,
                               ("RUNNING", "b"): 1, ("SUCCEEDED", "c"): 2}
        assert seen.oldest_pending == {"a": clock.now - 50, "b": None, "c": None}
        assert seen.by_state() == {"PENDING": 5, "RUNNING": 2, "SUCCEEDED": 2}
        assert sum(seen.successes) == 2 and sum(seen.failures) == 0
        clock.now += 2 * 86_400  # the final states' counts cover the window only
        later = overview(store)
        assert ("SUCCEEDED", "c") not in later.counts and later.counts[("PENDING", "a")] == 3
    finally:
        store.close()


def test_a_queue_whose_jobs_all_succeeded_is_a_row_and_its_page_reads_its_oldest(store_url: str) -> None:
    """SUCCEEDED is counted from the jobs (no worker's flush needed): a queue whose jobs all
    succeeded is one of the web app's rows (review 3: it dropped off when only the busiest queues'
    SUCCEEDED were read); a page reads the oldest due PENDING job of its own queues (`with_queues`)."""
    store = StateStore(store_url)
    try:
        for n, queue in enumerate(("done", "done", "busy")):
            store.register(NewJob(f"s{n}", queue=queue, actor="x", message={}))
        for job_id in ("s0", "s1"):
            claim = store.claim(job_id, worker_id="w", lease_ttl=60)
            store.finish(job_id, claim.lease_id, Event.SUCCEED, worker_id="w")
        web = overview(store, latency_queues=OVERVIEW_QUEUES)  # what WebState.overview computes
        assert web.queues == ["busy", "done"] and web.busiest(OVERVIEW_QUEUES) == ["busy", "done"]
        assert web.counts[("SUCCEEDED", "done")] == 2 and web.by_state() == {"PENDING": 1, "SUCCEEDED": 2}
        top = overview(store, latency_queues=1)  # room for one row: the busiest
        assert top.busiest(1) == ["busy"] and top.counts[("SUCCEEDED", "done")] == 2
        assert set(top.oldest_pending) == {"busy"} and top.oldest_pending["busy"] is not None  # due now
        page = top.with_queues(store, ["done"])
        assert page.oldest_pending == {**top.oldest_pending, "done": None}  # nothing PENDING in done
        assert page.counts == top.counts and overview(store).counts == top.counts  # every queue's (the CLI's)
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
