"""The fast path's batched look with a real Dramatiq Worker (StubBroker), on SQLite and
PostgreSQL: the jobs waiting in the process are looked at in one read; on a Dramatiq version whose
work queue was not verified, each delivery reads its job alone, as before."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import dramatiq
import pytest

from reliable.compat import dramatiq_internals
from reliable.compat.dramatiq_internals import waiting_messages
from reliable.states import JobStatus
from reliable.worker.waiting import Looks

from middleware_harness import Harness, make_harness
from support import wait_for

JOBS = 12


@pytest.fixture
def one_thread(store_url: str, policy_file: Path) -> Iterator[Harness]:
    """A harness of one worker thread prefetching every job of the test."""
    made = make_harness(store_url, policy_file, threads=1, metrics=False, json_logs=False)
    made.worker.queue_prefetch = 2 * JOBS
    yield made
    made.close()


def test_the_waiting_jobs_are_looked_at_in_one_read(one_thread: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    setup, store = one_thread, one_thread.store
    reads: list[list[str]] = []
    batched = store.job_statuses

    def counted(job_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        reads.append(list(job_ids))
        return batched(job_ids)

    monkeypatch.setattr(store, "job_statuses", counted)
    # A bound no loaded machine reaches: the count of reads below does not depend on speed.
    setup.middleware.looks = Looks(lambda ids: store.job_statuses(ids), stale_after=600.0)

    @dramatiq.actor(fast_path=True)
    def step(n: int) -> None:
        if n == 0:  # the others wait in the work queue behind the one thread
            wait_for(lambda: len(waiting_messages(setup.worker)) == JOBS - 1, "every job prefetched")

    messages = [step.send(n) for n in range(JOBS)]
    setup.run()
    ids = {m.message_id for m in messages}
    assert all(store.get(job_id).status is JobStatus.SUCCEEDED for job_id in ids)
    assert len(reads) <= 2, reads  # the first delivery's look, then at most one for all the waiting
    assert sorted(job_id for read in reads for job_id in read) == sorted(ids)  # each job read once


def test_an_unverified_dramatiq_looks_at_each_job_alone(one_thread: Harness,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    setup, store = one_thread, one_thread.store
    monkeypatch.setattr(dramatiq_internals, "VERIFIED_WORK_QUEUE", frozenset())
    alone: list[str] = []
    single = store.job_status
    monkeypatch.setattr(store, "job_status", lambda job_id, **kw: alone.append(job_id) or single(job_id, **kw))
    monkeypatch.setattr(store, "job_statuses", lambda ids: pytest.fail("a batched look on an unverified Dramatiq"))

    @dramatiq.actor(fast_path=True)
    def step(n: int) -> None:
        pass

    messages = [step.send(n) for n in range(4)]
    setup.run()
    assert not setup.middleware.looks.batched
    assert sorted(alone) == sorted(m.message_id for m in messages)
    assert all(store.get(m.message_id).status is JobStatus.SUCCEEDED for m in messages)
