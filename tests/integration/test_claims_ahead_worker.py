"""Claims ahead in a real worker process (reliable.worker.ahead): a thread's claim also claims the
durable message waiting in the process's work queue; killed with SIGKILL, the claims held ahead are
recovered like any other lease and run to completion by another worker; stopped gracefully, the
untaken claims are handed back (PENDING, no attempt spent, `claim_returned` recorded)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reliable.states import JobStatus
from reliable.store import StateStore

from support import wait_for
from workers import WorkerProcess, ready, send

pytestmark = pytest.mark.integration

THREADS = 2  # Dramatiq prefetches 2 x threads: two running, two waiting in the work queue


def running(store: StateStore, worker_id: str | None = None) -> list[str]:
    return sorted(j.job_id for j in store.list_jobs(status=[JobStatus.RUNNING], limit=100)
                  if worker_id is None or j.worker_id == worker_id)


@pytest.fixture
def workers(worker_env: dict[str, str], tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def claimed_ahead(producer: tuple[Any, StateStore], worker_env: dict[str, str], tmp_path: Path,
                  workers: list[WorkerProcess]) -> tuple[WorkerProcess, list[str], str]:
    """A worker of THREADS threads running two held jobs, then a third (its first job released) whose
    claim also claimed ahead the job waiting behind it: (the worker, the job ids, the one claimed ahead)."""
    broker, store = producer
    queue = worker_env["RELIABLE_TEST_QUEUE"]
    env = {**worker_env, "RELIABLE_TEST_LEASE_TTL": "2", "RELIABLE_TEST_HEARTBEAT": "0.5",
           "RELIABLE_TEST_RECOVERY_INTERVAL": "0.5", "RELIABLE_TEST_CLAIMS_AHEAD": "1"}
    worker = WorkerProcess(env, tmp_path / f"worker-{len(workers)}.log", threads=THREADS)
    workers.append(worker)
    release = [str(tmp_path / f"release-{n}") for n in range(6)]
    ids = [send(broker, queue, "hold", release[n], 120).message_id for n in range(2)]
    wait_for(lambda: running(store) == sorted(ids), "both threads busy", timeout=60, context=worker.output)
    ids += [send(broker, queue, "hold", release[n], 120).message_id for n in range(2, 6)]
    # Two of the four wait in the worker's work queue (prefetched), two stay in RabbitMQ.
    wait_for(lambda: ready(worker_env["RELIABLE_TEST_BROKER"], queue) == 2, "the work queue full",
             context=worker.output)
    assert running(store) == sorted(ids[:2])  # nothing is claimed while every thread is busy
    Path(release[0]).touch()  # the first thread takes the next message: its claim also claims the last one
    wait_for(lambda: store.get(ids[0]).status is JobStatus.SUCCEEDED, "the first job done", context=worker.output)
    held_by = store.get(ids[1]).worker_id
    wait_for(lambda: len(running(store, held_by)) == THREADS + 1, "a claim held ahead", context=worker.output)
    ahead = [j for j in running(store, held_by) if j not in ids[:3]]
    assert ahead == [ids[3]], "the waiting message's job is claimed, though no thread runs it"
    return worker, ids, ahead[0]


def test_claims_held_ahead_by_a_killed_worker_are_recovered(
        producer: tuple[Any, StateStore], worker_env: dict[str, str], tmp_path: Path,
        workers: list[WorkerProcess]) -> None:
    _broker, store = producer
    first, ids, ahead = claimed_ahead(producer, worker_env, tmp_path, workers)
    claim = store.get(ahead)
    first.kill()
    second = WorkerProcess({**worker_env, "RELIABLE_TEST_LEASE_TTL": "2", "RELIABLE_TEST_HEARTBEAT": "0.5",
                            "RELIABLE_TEST_RECOVERY_INTERVAL": "0.5"}, tmp_path / "second.log", threads=8)
    workers.append(second)
    for n in range(1, 6):
        (tmp_path / f"release-{n}").touch()
    wait_for(lambda: all(store.get(j).status is JobStatus.SUCCEEDED for j in ids), "every job SUCCEEDED",
             timeout=90, context=second.output)
    # The claim held ahead was recovered as any dead worker's lease, then run by the second worker.
    events = [e.event for e in store.events(ahead)]
    assert "claim_returned" not in events
    recovered = [e for e in store.events(ahead) if e.lease_id == claim.lease_id and e.event != "claim"]
    assert recovered and recovered[0].from_status == "RUNNING" and recovered[0].to_status == "PENDING"
    assert store.get(ahead).worker_id != claim.worker_id


def test_untaken_claims_are_handed_back_at_shutdown(
        producer: tuple[Any, StateStore], worker_env: dict[str, str], tmp_path: Path,
        workers: list[WorkerProcess]) -> None:
    _broker, store = producer
    worker, _ids, ahead = claimed_ahead(producer, worker_env, tmp_path, workers)
    attempt_before = store.get(ahead).attempt - 1
    # Graceful: SIGTERM to the CLI's main process only (it forwards it once; a second one kills).
    os.kill(worker.proc.pid, signal.SIGTERM)
    # Dramatiq stops its worker threads right after this line: released then, they take nothing more.
    wait_for(lambda: "Shutting down..." in worker.output(), "the worker to shut down", context=worker.output)
    for n in range(1, 3):
        (tmp_path / f"release-{n}").touch()
    wait_for(lambda: worker.proc.poll() is not None, "the worker to stop", timeout=60, context=worker.output)
    job = store.get(ahead)
    assert job.status is JobStatus.PENDING and job.attempt == attempt_before  # no attempt spent
    events = store.events(ahead)
    assert [e.event for e in events][-2:] == ["claim", "claim_returned"]
    assert store.attempts(ahead) == []
    assert "claims ahead: " in worker.output()
