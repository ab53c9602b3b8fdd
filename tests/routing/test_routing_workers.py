"""Retry routing with real `dramatiq` worker processes, the shared RabbitMQ and PostgreSQL.

A worker consumes the jobs' own queue, another only the slow lane (`-Q <lane>`). A job failing
with the routed class is retried on the lane and succeeds there; a retry delayed past the broker's
limit is published by the recovery loop, on the lane; a kill -9 of the lane's worker mid-job is
recovered onto the lane (lease expiry, requeue) and finished by the next lane worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import text

import reliable
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import metadata

from support import wait_for
from workers import WorkerProcess, send

pytestmark = pytest.mark.integration

APPS = Path(__file__).parent / "apps"
POLICY = """\
version: 1
defaults:
  max_attempts: 5
  backoff: {{base: 100ms, cap: 200ms}}
classes:
  slow_timeout: {{action: retry, queue: {lane}}}
  long_wait: {{action: retry, queue: {lane}}}
rules:
  - {{name: timeouts, exception: TimeoutError, class: slow_timeout}}
  - {{name: long-waits, exception: dramatiq.errors.Retry, class: long_wait}}
"""


@pytest.fixture
def lane(queue_name: str, rabbitmq_url: str) -> Iterator[str]:
    """The slow lane of this test's queue; deleted (with its delay and dead-letter queues) after."""
    name = f"{queue_name}_slow"
    yield name
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        channel = connection.channel()
        for suffix in ("", ".DQ", ".XQ"):
            channel.queue_delete(name + suffix)
    finally:
        connection.close()


@pytest.fixture
def store(pg_database: str) -> Iterator[StateStore]:
    opened = StateStore(pg_database)
    with opened.engine.begin() as conn:  # no other test's jobs for these workers' recovery loops
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
    yield opened
    opened.close()


def test_retries_routed_to_a_slow_lane_worker(rabbitmq_url: str, pg_database: str, queue_name: str, lane: str,
                                              store: StateStore, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(lane=lane))
    out = tmp_path / "attempts"
    out.mkdir()
    env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": pg_database, "RELIABLE_TEST_HOME": queue_name,
           "RELIABLE_TEST_POLICY": str(policy), "RELIABLE_TEST_OUT": str(out)}
    started: list[WorkerProcess] = []

    def start(role: str, queue: str) -> WorkerProcess:
        worker = WorkerProcess({**env, "RELIABLE_TEST_ROLE": role, "RELIABLE_TEST_QUEUE": queue},
                               tmp_path / f"{role}.log", threads=4, app="routing_app", app_dir=APPS)
        started.append(worker)
        return worker

    def logs() -> str:
        return "\n".join(f"--- {w.log_path.name}\n{w.output()[-1500:]}" for w in started)

    def ran(job_id: str, attempt: int) -> str:
        marker = out / f"{job_id}-{attempt}"
        return marker.read_text() if marker.exists() else ""

    def status(job_id: str, wanted: JobStatus) -> bool:
        return store.get(job_id).status is wanted

    producer = RabbitmqBroker(url=rabbitmq_url)
    middleware = reliable.install(producer, store=pg_database, recovery=False)
    try:
        start("main", queue_name)
        slow = start("slow-1", lane)
        flaky, long, hang = (send(producer, queue_name, "routed", kind).message_id
                             for kind in ("flaky", "long", "hang"))

        # 1. TimeoutError on the own queue -> retried on the lane, by the lane's worker, succeeds there
        wait_for(lambda: status(flaky, JobStatus.SUCCEEDED), "the flaky job to succeed", timeout=30, context=logs)
        assert (ran(flaky, 1), ran(flaky, 2)) == ("main", "slow-1")
        job = store.get(flaky)
        assert (job.queue, job.home_queue, job.attempt) == (lane, queue_name, 2)
        assert [e.detail for e in store.events(flaky) if e.event == "routed"] == [{"from": queue_name, "to": lane}]

        # 2. a 20 min retry (past MAX_BROKER_DELAY): no worker publishes it; once due, recovery does, on the lane
        waiting = wait_for(lambda: (j := store.get(long)).status is JobStatus.RETRY_WAIT and j.queue == lane and j,
                           "the long retry to wait on the lane", timeout=20, context=logs)
        assert waiting.retry_at is not None and waiting.retry_at - waiting.updated_at > 15 * 60
        jump = text("UPDATE reliable_jobs SET retry_at = retry_at - 1260, scheduled_at = scheduled_at - 1260 "
                    "WHERE job_id = :id AND status = :waiting")
        with store.engine.begin() as conn:  # the clock jumps 21 minutes: the retry is due
            jumped = conn.execute(jump, {"id": long, "waiting": JobStatus.RETRY_WAIT.value})
        assert jumped.rowcount == 1
        wait_for(lambda: status(long, JobStatus.SUCCEEDED), "the long retry to succeed", timeout=20, context=logs)
        assert (ran(long, 1), ran(long, 2)) == ("main", "slow-1")
        assert "retry_due" in [e.event for e in store.events(long)]

        # 3. kill -9 of the lane's worker mid-job: recovery requeues it on the lane, the next lane worker ends it
        wait_for(lambda: ran(hang, 2), "the hang job's second attempt", timeout=20, context=logs)
        assert ran(hang, 2) == "slow-1"
        slow.kill()
        start("slow-2", lane)
        wait_for(lambda: status(hang, JobStatus.SUCCEEDED), "the hang job to succeed", timeout=30, context=logs)
        assert (ran(hang, 1), ran(hang, 2), ran(hang, 3)) == ("main", "slow-1", "slow-2")
        events = store.events(hang)
        assert "lease_expired" in [e.event for e in events]
        assert [e.queue for e in events if e.event == "claim"] == [queue_name, lane, lane]
        assert store.get(hang).queue == lane
    finally:
        for worker in started:
            if worker.proc.poll() is None:
                worker.stop()
        producer.close()
        middleware.store.close()
