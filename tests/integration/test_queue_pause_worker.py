"""A paused queue with a real `dramatiq` worker (RabbitMQ and PostgreSQL): its jobs wait PENDING
without spending an attempt while it is paused, a job already RUNNING goes on, and once resumed
they run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable import queue_pauses
from reliable.operators import Operator
from reliable.states import JobStatus
from reliable.store import StateStore

from support import wait_for
from workers import WorkerProcess

pytestmark = [pytest.mark.integration]

WHO = Operator("oncall", "test-host", "test")


@pytest.fixture
def worker(pg_store: StateStore, rabbitmq_url: str, queue_name: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_QUEUE": queue_name,
           "RELIABLE_TEST_STORE": pg_store.engine.url.render_as_string(hide_password=False)}
    process = WorkerProcess(env, tmp_path / "worker.log", threads=2)
    try:
        yield process
    finally:
        process.stop()


def test_a_paused_queue_defers_its_jobs_without_attempts_and_runs_them_once_resumed(
        worker: WorkerProcess, pg_store: StateStore, rabbitmq_url: str, queue_name: str, tmp_path: Path) -> None:
    # A producer with reliable installed: its jobs are registered PENDING when sent, as in an app.
    broker = RabbitmqBroker(url=rabbitmq_url)
    reliable.install(broker, store=pg_store.engine.url.render_as_string(hide_password=False), recovery=False,
                     metrics=False, json_logs=False)

    actors = {name: dramatiq.Actor(lambda *a: None, broker=broker, actor_name=name, queue_name=queue_name,
                                   priority=0, options={}) for name in ("hold", "units")}

    def send(actor: str, *args: Any) -> dramatiq.Message[Any]:
        return actors[actor].send(*args)

    try:
        release = tmp_path / "release"
        running = send("hold", str(release), 60.0)
        wait_for(lambda: pg_store.get(running.message_id).status is JobStatus.RUNNING, "a job running",
                 context=worker.output)
        assert queue_pauses.pause(pg_store, queue_name, reason="downstream outage", identity=WHO)
        # The worker sees the pause within its cache's staleness (REFRESH_SECONDS): send probes until
        # one is put off (one sent before may still run), then the jobs whose state is checked.
        probes: list[dramatiq.Message[Any]] = []

        def probe_deferred() -> bool:
            if not probes or pg_store.get(probes[-1].message_id).status is JobStatus.SUCCEEDED:
                probes.append(send("units", 1, 0.0))
            return pg_store.count_job_events(probes[-1].message_id, "queue_paused_deferred") >= 1

        wait_for(probe_deferred, "a probe deferred", timeout=20, context=worker.output)
        probe = probes[-1]
        waiting = [send("units", 1, 0.0) for _ in range(4)]
        # Deferred twice each (1 s, then about 2 s): they came back and were put off again.
        wait_for(lambda: all(pg_store.count_job_events(m.message_id, "queue_paused_deferred") >= 2
                             for m in waiting), "every job deferred twice", timeout=30, context=worker.output)
        for message in [probe, *waiting]:
            job = pg_store.get(message.message_id)
            assert (job.status, job.attempt) == (JobStatus.PENDING, 0), job
            assert pg_store.attempts(message.message_id) == []
        # The job RUNNING before the pause was not touched, and finishes.
        release.touch()
        wait_for(lambda: pg_store.get(running.message_id).status is JobStatus.SUCCEEDED, "the running job done",
                 context=worker.output)
        assert queue_pauses.resume(pg_store, queue_name, reason="outage over", identity=WHO)
        wait_for(lambda: all(pg_store.get(m.message_id).status is JobStatus.SUCCEEDED for m in [probe, *waiting]),
                 "every job run after the resume", timeout=45, context=worker.output)
        for message in [probe, *waiting]:
            assert pg_store.get(message.message_id).attempt == 1
        assert [e.event for e in queue_pauses.events(pg_store, queue_name)] == ["pause", "resume"]
    finally:
        broker.close()
