"""Issue 38's worker-side input rules with a real RabbitMQ and a real `dramatiq` worker process, on
SQLite and PostgreSQL: a malformed retry option (foreign, or on a job's own stored message), an
exception message holding a lone surrogate, and an old-timestamp copy that AgeLimit expires."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import current_millis

import reliable
from reliable.states import TERMINAL_STATES, JobStatus
from reliable.store import NewJob, StateStore

from support import wait_for
from workers import dead_letters

pytestmark = pytest.mark.integration

DATABASES = ["sqlite", "postgresql"]


def _url(request: pytest.FixtureRequest, worker_env: dict[str, str], database: str) -> str:
    return request.getfixturevalue("sqlite_url") if database == "sqlite" else worker_env["RELIABLE_TEST_STORE"]


def _message(queue: str, actor: str, *args: Any, **options: Any) -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name=queue, actor_name=actor, args=args, kwargs={}, options=options)


@pytest.mark.parametrize("database", DATABASES)
def test_malformed_retry_options_end_or_are_dead_lettered(
        request: pytest.FixtureRequest, start_worker: Any, queue_name: str, rabbitmq_url: str,
        worker_env: dict[str, str], database: str) -> None:
    url = _url(request, worker_env, database)
    store = StateStore(url)
    producer = RabbitmqBroker(url=rabbitmq_url)
    installed = reliable.install(producer, store=url, recovery=False, json_logs=False, metrics=False)
    plain = RabbitmqBroker(url=rabbitmq_url)  # a producer without reliable
    try:
        producer.declare_queue(queue_name)
        with pytest.raises(reliable.MessageRefused, match=r"options\.max_retries"):
            producer.enqueue(_message(queue_name, "noop", max_retries="3"))
        foreign = _message(queue_name, "noop", min_backoff="x")
        own = _message(queue_name, "noop", max_retries=-5)  # a job registered before the rule
        store.register(NewJob(own.message_id, queue_name, "noop", own.asdict()))
        plain.declare_queue(queue_name)
        plain.enqueue(foreign)
        plain.enqueue(own)
        fine = producer.enqueue(_message(queue_name, "noop", max_retries=3))
    finally:
        producer.close()
        installed.store.close()
        plain.close()

    worker = start_worker(app="inputs_app", RELIABLE_TEST_STORE=url)
    try:
        wait_for(lambda: (job := store.find(fine.message_id)) is not None and job.status is JobStatus.SUCCEEDED,
                 "the well-formed job to succeed", timeout=60, context=worker.output)
        wait_for(lambda: (job := store.find(own.message_id)) is not None and job.status is JobStatus.DEAD,
                 "the job whose own message breaks the rule to end DEAD", timeout=60, context=worker.output)
        assert store.events(own.message_id)[-1].event == "unrunnable"
        dead = wait_for(lambda: found if len(found := dead_letters(rabbitmq_url, queue_name)) == 2 else None,
                        "two dead letters in the XQ", timeout=60, context=worker.output)
        assert sorted(json.loads(body)["message_id"] for body in dead) == sorted([foreign.message_id, own.message_id])
        assert store.find(foreign.message_id) is None
        assert "its option min_backoff is refused" in worker.output()
    finally:
        store.close()


@pytest.mark.parametrize("database", DATABASES)
def test_a_failure_whose_message_holds_a_lone_surrogate_is_recorded(
        request: pytest.FixtureRequest, start_worker: Any, queue_name: str, worker_env: dict[str, str],
        rabbitmq_url: str, database: str) -> None:
    url = _url(request, worker_env, database)
    store = StateStore(url)
    producer = RabbitmqBroker(url=rabbitmq_url)
    installed = reliable.install(producer, store=url, recovery=False, json_logs=False, metrics=False)
    try:
        producer.declare_queue(queue_name)
        sent = producer.enqueue(_message(queue_name, "open_report"))
    finally:
        producer.close()
        installed.store.close()
    worker = start_worker(app="inputs_app", RELIABLE_TEST_STORE=url)
    try:
        job = wait_for(lambda: found if (found := store.find(sent.message_id)) is not None
                       and found.status is JobStatus.DEAD else None,
                       "the failed job to be recorded DEAD at once", timeout=30, context=worker.output)
        assert job.last_error_type is not None and job.last_error_type.endswith("FileNotFoundError")
        assert job.last_error_message == "cannot open report-\\udcff.csv"
        failed = store.events(job.job_id)[-1]
        assert failed.event == "dead_letter" and failed.traceback is not None and "\\udcff" in failed.traceback
    finally:
        store.close()


@pytest.mark.parametrize("database", DATABASES)
def test_an_old_timestamp_copy_does_not_end_the_waiting_job(
        request: pytest.FixtureRequest, start_worker: Any, queue_name: str, worker_env: dict[str, str],
        rabbitmq_url: str, database: str, tmp_path: Path) -> None:
    """AgeLimit (before reliable's claim, as RabbitMQ's default middleware puts it) expires a copy of a
    waiting job's message whose only difference is an old `message_timestamp`: the job still waits,
    and its real message runs when due."""
    url = _url(request, worker_env, database)
    store = StateStore(url)
    producer = RabbitmqBroker(url=rabbitmq_url)
    installed = reliable.install(producer, store=url, recovery=False, json_logs=False, metrics=False)
    plain = RabbitmqBroker(url=rabbitmq_url)
    worker = start_worker(app="inputs_app", RELIABLE_TEST_STORE=url, RELIABLE_TEST_OUT=str(tmp_path))
    try:
        producer.declare_queue(queue_name)
        plain.declare_queue(queue_name)
        ready = producer.enqueue(_message(queue_name, "noop"))
        wait_for(lambda: (job := store.find(ready.message_id)) is not None and job.status is JobStatus.SUCCEEDED,
                 "the worker to be up", timeout=60, context=worker.output)
        genuine = producer.enqueue(_message(queue_name, "charge", 1, max_age=60_000), delay=5_000)
        copy = dramatiq.Message(**{**genuine.asdict(), "queue_name": queue_name,  # (copy() would keep the eta)
                                   "message_timestamp": current_millis() - 120_000,
                                   "options": {k: v for k, v in genuine.options.items() if k != "eta"}})
        plain.enqueue(copy)  # at once: seconds ahead of the real (delayed) message
        wait_for(lambda: dead_letters(rabbitmq_url, queue_name) or None, "AgeLimit to dead-letter the copy",
                 timeout=30, context=worker.output)
        events = [e.event for e in store.events(genuine.message_id)]
        assert store.get(genuine.message_id).status is JobStatus.PENDING and "skipped_failed" not in events, events
        job = wait_for(lambda: found if (found := store.find(genuine.message_id)) is not None
                       and found.status in TERMINAL_STATES else None,
                       "the job's real message to run", timeout=60, context=worker.output)
        assert job.status is JobStatus.SUCCEEDED, [e.event for e in store.events(job.job_id)]
        assert [p.name for p in tmp_path.glob("charge-*")] == [f"charge-{job.job_id}-1"]
    finally:
        producer.close()
        installed.store.close()
        plain.close()
        store.close()
