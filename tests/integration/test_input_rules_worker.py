"""Foreign messages against the job id rule and the size limit (issue 30 items 3 and 6), with a real
RabbitMQ and a real `dramatiq` worker process, on SQLite and PostgreSQL.

A plain Dramatiq producer (no reliable installed) publishes: a business id `"invoice-" + sha256`
(72 characters: registered and run), a 300-character id, an integer id and a message larger than
MAX_MESSAGE_BYTES. Each of the last three is dead-lettered to the queue's XQ with a logged
refusal, never acknowledged into nothing, never stored, and no line of the worker's log repeats
the long id whole; the worker keeps working.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import dramatiq
import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from reliable.inputs import MAX_MESSAGE_BYTES
from reliable.states import JobStatus
from reliable.store import StateStore

from support import wait_for
from workers import dead_letters

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_foreign_messages_that_break_a_rule_are_dead_lettered(
        request: pytest.FixtureRequest, start_worker: Any, queue_name: str, rabbitmq_url: str,
        worker_env: dict[str, str], database: str) -> None:
    url = request.getfixturevalue("sqlite_url") if database == "sqlite" else worker_env["RELIABLE_TEST_STORE"]
    store = StateStore(url)
    business = "invoice-" + hashlib.sha256(b"2026-42").hexdigest()
    too_long = "long-" + "x" * 295
    plain = RabbitmqBroker(url=rabbitmq_url)  # a producer without reliable
    try:
        plain.declare_queue(queue_name)
        for message_id, args in ((business, ()), (too_long, ()), ("too-large", ("x" * (MAX_MESSAGE_BYTES + 1),))):
            plain.enqueue(dramatiq.Message(queue_name=queue_name, actor_name="noop", args=args, kwargs={},
                                           options={}, message_id=message_id))
    finally:
        plain.close()
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        raw = {"queue_name": queue_name, "actor_name": "noop", "args": [], "kwargs": {}, "options": {},
               "message_id": 4242, "message_timestamp": 0}
        connection.channel().basic_publish("", queue_name, json.dumps(raw).encode())
    finally:
        connection.close()

    worker = start_worker(RELIABLE_TEST_STORE=url)
    try:
        wait_for(lambda: (job := store.find(business)) is not None and job.status is JobStatus.SUCCEEDED,
                 "the business id's job to succeed", timeout=60, context=worker.output)
        dead = wait_for(lambda: found if len(found := dead_letters(rabbitmq_url, queue_name)) == 3 else None,
                        "three dead letters in the XQ", timeout=60, context=worker.output)
        dead = [json.loads(body) for body in dead]
        assert sorted(str(m["message_id"]) for m in dead) == sorted(["4242", too_long, "too-large"])
        assert store.find(too_long) is None and store.find("too-large") is None
        log = worker.output()
        assert log.count("refused, not run and dead-lettered") == 3
        assert too_long not in log and "Exception in thread" not in log
    finally:
        store.close()
