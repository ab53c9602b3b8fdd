"""A delivery must match its job, with a real RabbitMQ, PostgreSQL and `dramatiq` worker process.

The hole of issue 24: a plain Dramatiq producer (no reliable installed) publishes a message with an
existing PENDING job's id but another actor. It must not run: it is refused (`delivery_mismatch`)
and dead-lettered to the queue's XQ, and the job's own message (re-published by the sweeper) runs
and succeeds. Garbage on the same queue (kwargs that are not a mapping, a body that is not a
message) is dead-lettered too, and the worker keeps working.
"""

from __future__ import annotations

import json
from typing import Any

import dramatiq
import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from reliable.states import JobStatus

from support import wait_for
from workers import dead_letters, purge, send

pytestmark = pytest.mark.integration


def test_a_forged_message_is_dead_lettered_and_the_job_runs_its_own(producer: Any, start_worker: Any,
                                                                    queue_name: str, rabbitmq_url: str) -> None:
    broker, store = producer
    job_id = send(broker, queue_name, "noop").message_id
    assert purge(rabbitmq_url, queue_name) == 1, "the genuine message is held back: the sweeper re-publishes it"

    plain = RabbitmqBroker(url=rabbitmq_url)  # a producer without reliable
    try:
        plain.enqueue(dramatiq.Message(queue_name=queue_name, actor_name="units", args=(1, 0), kwargs={},
                                       options={}, message_id=job_id))
    finally:
        plain.close()
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        channel = connection.channel()
        garbage = {"queue_name": queue_name, "actor_name": "noop", "args": [], "kwargs": ["x"], "options": {},
                   "message_id": job_id, "message_timestamp": 0}
        channel.basic_publish("", queue_name, json.dumps(garbage).encode())
        channel.basic_publish("", queue_name, b"\x00 not a message")
    finally:
        connection.close()

    worker = start_worker(RELIABLE_TEST_SWEEP_AFTER=2, RELIABLE_TEST_RECOVERY_INTERVAL=0.5)
    wait_for(lambda: store.get(job_id).status is JobStatus.SUCCEEDED, "the genuine job to succeed", timeout=60,
             context=worker.output)
    refused = wait_for(lambda: [e for e in store.events(job_id) if e.event == "delivery_mismatch"] or None,
                       "the forged delivery's event", timeout=30, context=worker.output)
    wait_for(lambda: len([e for e in store.events(job_id) if e.event == "delivery_mismatch"]) == 2,
             "both refusals", timeout=30, context=worker.output)
    job = store.get(job_id)
    assert (job.actor, job.attempt) == ("noop", 1)
    assert store.effects(job_id) == [], "the forged `units` message never ran for this job"
    forged = next(e for e in store.events(job_id) if e.event == "delivery_mismatch" and e.detail["actor"] == "units")
    assert forged.detail["differs"] == ["actor", "args"] and forged.detail["args"] == 2
    assert refused[0].worker_id is not None

    def three_dead_letters() -> list[bytes] | None:
        found = dead_letters(rabbitmq_url, queue_name)
        return found if len(found) == 3 else None

    bodies = wait_for(three_dead_letters, "three dead letters in the XQ", timeout=30, context=worker.output)
    decoded = [json.loads(body) for body in bodies if body.startswith(b"{")]
    assert sorted((m["actor_name"], m["args"]) for m in decoded) == [("noop", []), ("units", [1, 0])]
    assert all(m["message_id"] == job_id for m in decoded)
    assert b"\x00 not a message" in bodies
    log = worker.output()
    assert "Exception in thread" not in log and "refused, not run and dead-lettered" in log

    again = send(broker, queue_name, "noop").message_id  # the worker still works
    wait_for(lambda: store.get(again).status is JobStatus.SUCCEEDED, "the next job", timeout=30,
             context=worker.output)
