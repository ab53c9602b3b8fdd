"""kill -9 during a fast-path run (`fast_path=True`: no claim before the run): the job stays
PENDING, RabbitMQ redelivers the unacked message, and the next worker runs it again and commits
it with the fast path's one compare-and-set. kill -9 after a run whose success has not committed
yet: its acknowledgement was held with it (reliable.worker.acks), so the message is redelivered too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reliable.states import Event, JobStatus

from support import row_locked, wait_for, waiting_on_a_lock
from workers import WorkerProcess, ready, send

pytestmark = pytest.mark.integration


def test_a_crash_during_a_fast_path_run_re_runs_it(producer: Any, start_worker: Any, queue_name: str,
                                                   tmp_path: Path) -> None:
    broker, store = producer
    started, release = tmp_path / "started", tmp_path / "release"
    started.mkdir()
    message = send(broker, queue_name, "fast_hold", str(release), str(started), 60.0)
    job_id = message.message_id

    def runs() -> set[str]:
        return {p.name for p in started.iterdir()}

    first = start_worker()
    wait_for(lambda: len(runs()) == 1, "the first run to start", timeout=30, context=first.output)
    (first_run,) = runs()
    # The fast path looked at the job and ran it without a claim: nothing was written yet.
    job = store.get(job_id)
    assert job.status is JobStatus.PENDING and job.attempt == 0 and job.lease_id == 0 and job.worker_id is None
    first.kill()

    # The default sweep_after (300 s) keeps the sweeper out: the re-run is RabbitMQ's redelivery.
    second = start_worker()
    wait_for(lambda: len(runs()) == 2, "the redelivered message to run again", timeout=30, context=second.output)
    assert store.get(job_id).status is JobStatus.PENDING
    release.touch()
    wait_for(lambda: store.get(job_id).status is JobStatus.SUCCEEDED, "the job to succeed", timeout=30,
             context=second.output)

    # The body ran twice (the crash re-ran it), once in each worker process.
    (second_run,) = runs() - {first_run}
    first_pid, second_pid = first_run.split("-")[0], second_run.split("-")[0]
    assert first_pid != second_pid
    # One commit, by worker B: a lease taken and released in one write, no claim, no attempt row.
    job = store.get(job_id)
    history = store.events(job_id)
    events = [e.event for e in history]
    assert events.count(Event.FAST_SUCCEED.value) == 1, events
    assert Event.CLAIM.value not in events, events
    assert "stale_commit_rejected" not in events and "redispatched" not in events, events
    assert job.attempt == 1 and job.lease_id == 1 and job.lease_expires_at is None
    assert job.worker_id is not None and job.worker_id.split(":")[1] == second_pid
    (commit,) = (e for e in history if e.event == Event.FAST_SUCCEED.value)
    assert commit.worker_id == job.worker_id and commit.lease_id == 1
    assert commit.detail == {"redelivered": True}, "the crashed run is noted: the broker redelivered the message"
    assert commit.from_status == JobStatus.PENDING.value and commit.to_status == JobStatus.SUCCEEDED.value
    assert store.attempts(job_id) == []
    print(f"\nfast-path crash test: ran in pid {first_pid} (killed) then {second_pid}; history {events}")


def test_a_crash_before_a_success_commits_leaves_its_message_unacknowledged(
        producer: Any, worker_env: dict[str, str], queue_name: str, tmp_path: Path) -> None:
    """Two threads. Job A's success leads its batch, held by a lock on A's row; job B's success
    queues behind it and B's thread goes on to job C (still running). kill -9: A, B and C were all
    unacknowledged, B although its thread had finished with it, so RabbitMQ has the three back."""
    broker, store = producer
    rabbitmq = worker_env["RELIABLE_TEST_BROKER"]
    started, done, held = tmp_path / "started", tmp_path / "done", tmp_path / "held"
    started.mkdir()
    done.touch()

    def runs() -> int:
        return len(list(started.iterdir()))

    a = send(broker, queue_name, "fast_hold", str(done), str(started), 60.0).message_id
    with row_locked(store.engine, a):
        first = WorkerProcess(worker_env, tmp_path / "first.log", threads=2)
        try:
            wait_for(lambda: runs() == 1 and waiting_on_a_lock(store.engine), "A run, its success blocked",
                     context=first.output)
            b = send(broker, queue_name, "fast_hold", str(done), str(started), 60.0).message_id
            wait_for(lambda: runs() == 2, "B run", context=first.output)
            c = send(broker, queue_name, "fast_hold", str(held), str(started), 60.0).message_id
            wait_for(lambda: runs() == 3, "C running: B's thread is done with B", context=first.output)
            assert {store.get(j).status for j in (a, b, c)} == {JobStatus.PENDING}
            first.kill()
        finally:
            first.stop()
        wait_for(lambda: ready(rabbitmq, queue_name) == 3, "RabbitMQ to have A, B and C back")
    held.touch()
    second = WorkerProcess(worker_env, tmp_path / "second.log", threads=2)
    try:
        wait_for(lambda: all(store.get(j).status is JobStatus.SUCCEEDED for j in (a, b, c)), "all three done",
                 context=second.output)
    finally:
        second.stop()
    # B and C ran again after the crash and committed once, noting the redelivery.
    for job_id in (b, c):
        history = store.events(job_id)
        assert [e.event for e in history] == ["enqueued", "fast_succeed"], (job_id, history)
        assert history[1].detail == {"redelivered": True}
    # A's statement was already with the server, waiting for the row: it commits when the lock goes
    # (the server does not notice its client gone), and the redelivered A finds it done; had the
    # server dropped it, A would have run again like B.
    history = store.events(a)
    names = [e.event for e in history]
    assert names in (["enqueued", "fast_succeed", "claim_refused"], ["enqueued", "fast_succeed"]), names
    assert runs() == (5 if "claim_refused" in names else 6)
