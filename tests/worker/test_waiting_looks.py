"""The fast path's batched look (reliable.worker.waiting) on SQLite and PostgreSQL: one read for the
waiting jobs, answers no older than the bound (an injected clock), the digest judged per delivery,
one in-flight read shared by the threads due it, and the Dramatiq version gate."""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any

import dramatiq
import pytest
from dramatiq.worker import _WorkQueueItem

from reliable.compat.dramatiq_internals import VERIFIED_WORK_QUEUE, waiting_messages, work_queue_readable
from reliable.control import Control
from reliable.errors import ClaimRefused, StoreUnavailable
from reliable.states import JobStatus
from reliable.store import NewJob, StateStore
from reliable.worker.waiting import Looks

from support import wait_for

IDS = ["job-a", "job-b", "job-c"]


def register(store: StateStore, *job_ids: str) -> None:
    for job_id in job_ids:
        store.register(NewJob(job_id, queue="default", actor="work", message={
            "queue_name": "default", "actor_name": "work", "args": [job_id], "kwargs": {}, "options": {},
            "message_id": job_id, "message_timestamp": 1}))


class Reads:
    """The store's batched read, counting what each call read."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.calls: list[list[str]] = []

    def __call__(self, job_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        self.calls.append(list(job_ids))
        return self.store.job_statuses(job_ids)


def test_one_read_answers_the_waiting_jobs(store: StateStore) -> None:
    register(store, *IDS)
    reads, now = Reads(store), [10.0]
    looks = Looks(reads, lambda: ["job-b", "job-c", "job-a", "unknown"], clock=lambda: now[0])
    assert looks.look("job-a") == ("PENDING", store.get("job-a").delivery_digest)
    assert reads.calls == [["job-a", "job-b", "job-c", "unknown"]]  # the delivered job first, none twice
    assert looks.look("job-b")[0] == looks.look("job-c")[0] == "PENDING"  # type: ignore[index]
    assert looks.look("unknown") is None  # an unknown job is an answer too: the durable claim decides
    assert len(reads.calls) == 1
    looks.look("job-b")  # an answer is used once: a second delivery of the job reads again
    assert len(reads.calls) == 2


@pytest.mark.parametrize("command", ["pause", "cancel"])
def test_an_answer_older_than_the_bound_is_read_again(store: StateStore, command: str) -> None:
    register(store, *IDS)
    reads, now = Reads(store), [10.0]
    looks = Looks(reads, lambda: ["job-b", "job-c"], stale_after=1.0, clock=lambda: now[0])
    looks.look("job-a")
    getattr(Control(store), command)("job-b", reason="maintenance")
    getattr(Control(store), command)("job-c", reason="maintenance")
    now[0] += 1.0
    # Within the bound the answer read before the command is used; the fast path's compare-and-set
    # after the run discards that run's outcome.
    assert looks.look("job-c") == ("PENDING", store.get("job-c").delivery_digest)
    assert store.fast_succeed("job-c", worker_id="w", attempt_id="a1") is None
    now[0] += 0.01
    expected = JobStatus.PAUSED if command == "pause" else JobStatus.CANCELLED
    assert store.looked_status("job-b", looks.look("job-b")) is expected  # read again: honoured
    assert len(reads.calls) == 2 and reads.calls[-1][0] == "job-b"


def test_each_delivery_judges_the_answer_with_its_own_digest(store: StateStore) -> None:
    register(store, *IDS)
    looks = Looks(Reads(store), lambda: ["job-b"], clock=lambda: 0.0)
    genuine = store.get("job-b").delivery_digest
    looks.look("job-a")
    with pytest.raises(ClaimRefused) as refused:
        store.looked_status("job-b", looks.look("job-b"), delivery_digest="f" * 32)
    assert refused.value.reason == "delivery_mismatch"
    assert store.looked_status("job-a", ("PENDING", genuine), delivery_digest=genuine) is JobStatus.PENDING
    assert store.job_statuses(["job-a", "nope"]).keys() == {"job-a"}


def test_threads_due_a_job_in_flight_wait_for_the_one_read(store: StateStore) -> None:
    register(store, *IDS)
    release, reads = threading.Event(), Reads(store)

    def slow(job_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        assert release.wait(30)
        return reads(job_ids)

    looks = Looks(slow, lambda: ["job-b"], clock=lambda: 0.0)
    answers: dict[str, Any] = {}
    first = threading.Thread(target=lambda: answers.update(a=looks.look("job-a")))
    first.start()
    wait_for(lambda: looks._in_flight.keys() == {"job-a", "job-b"}, "the first read in flight")
    second = threading.Thread(target=lambda: answers.update(b=looks.look("job-b")))
    second.start()
    wait_for(lambda: looks.waits == 1, "the second thread waiting")
    release.set()
    first.join(30)
    second.join(30)
    assert answers["a"][0] == answers["b"][0] == "PENDING"
    assert reads.calls == [["job-a", "job-b"]]


def test_a_failed_read_caches_nothing(store: StateStore) -> None:
    register(store, *IDS)
    reads, fails = Reads(store), iter([True, False])

    def flaky(job_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        if next(fails):
            raise StoreUnavailable("down")
        return reads(job_ids)

    looks = Looks(flaky, lambda: ["job-b"], clock=lambda: 0.0)
    with pytest.raises(StoreUnavailable):
        looks.look("job-a")
    assert looks.look("job-b")[0] == "PENDING"  # type: ignore[index]
    assert reads.calls == [["job-b"]] and not looks._in_flight


def test_the_work_queue_is_read_on_the_verified_versions_only() -> None:
    assert work_queue_readable() is (dramatiq.__version__ in VERIFIED_WORK_QUEUE)
    assert not work_queue_readable("1.17.0") and not work_queue_readable("3.0.0")

    # Dramatiq's own items: ordered by priority, then by when they were queued (FIFO).
    work: queue.PriorityQueue[Any] = queue.PriorityQueue()
    for priority, message, queued in [(2, "late", 1), (0, "after", 5), (0, "next", 3), (1, "then", 0)]:
        work.put(_WorkQueueItem(priority, message, queued))  # type: ignore[arg-type]
    worker = type("W", (), {"work_queue": work})()
    version = next(iter(VERIFIED_WORK_QUEUE))
    assert waiting_messages(worker, version=version) == ["next", "after", "then", "late"]
    assert [item.message for item in sorted(work.queue)] == ["next", "after", "then", "late"]
    assert work.qsize() == 4  # nothing taken
    assert waiting_messages(worker, version="9.9.9") == []
