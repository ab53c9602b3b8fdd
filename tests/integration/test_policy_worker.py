"""A real Dramatiq Worker on RabbitMQ + PostgreSQL: a non-idempotent job that read-times-out goes to REVIEW
after exactly one attempt; an idempotent one with the same error is retried.

The policy file only sets an owner and a short backoff: the built-in rules still apply under it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
import httpx
import pytest
from dramatiq import Worker
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.states import JobStatus
from reliable.store import StateStore

from support import wait_for

pytestmark = pytest.mark.integration

POLICY = "defaults:\n  owner: team-payments\n  backoff: {base: 50ms, cap: 100ms}\n"


@dataclass
class Shop:
    broker: RabbitmqBroker
    store: StateStore
    queue: str
    calls: dict[str, int] = field(default_factory=dict)
    actors: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def shop(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Shop]:
    policy = tmp_path / "owners.yaml"
    policy.write_text(POLICY)
    broker = RabbitmqBroker(url=worker_env["RELIABLE_TEST_BROKER"])
    broker.emit_after("process_boot")
    middleware = reliable.install(broker, store=worker_env["RELIABLE_TEST_STORE"], policies=policy)
    queue = worker_env["RELIABLE_TEST_QUEUE"]
    shop = Shop(broker, middleware.store, queue)

    @dramatiq.actor(broker=broker, queue_name=queue, idempotent=False)
    def charge_card(order_id: str) -> None:
        shop.calls[order_id] = shop.calls.get(order_id, 0) + 1
        raise httpx.ReadTimeout("the bank took the request and never answered")

    @dramatiq.actor(broker=broker, queue_name=queue)
    def fetch_rates(key: str) -> None:
        shop.calls[key] = shop.calls.get(key, 0) + 1
        if shop.calls[key] == 1:
            raise httpx.ReadTimeout("slow rates API")

    shop.actors = {"charge_card": charge_card, "fetch_rates": fetch_rates}
    worker = Worker(broker, worker_timeout=100, worker_threads=2)
    worker.start()
    yield shop
    worker.stop()
    with contextlib.suppress(Exception):  # the queue_name fixture deletes the queues; the channel may be gone
        broker.close()
    shop.store.close()


def test_read_timeout_of_a_non_idempotent_actor_ends_in_review_after_one_attempt(shop: Shop) -> None:
    job_id = shop.actors["charge_card"].send("order-1").message_id
    wait_for(lambda: shop.store.get(job_id).status is JobStatus.REVIEW, "the charge in REVIEW")
    shop.broker.join(shop.queue, timeout=20_000)  # nothing left to deliver (queue and delay queue): no retry
    job = shop.store.get(job_id)
    assert (job.status, job.attempt, job.retry_count, job.owner) == (JobStatus.REVIEW, 1, 0, "team-payments")
    assert len(shop.store.attempts(job_id)) == 1 and shop.calls["order-1"] == 1
    decided = [e for e in shop.store.events(job_id) if e.error_class is not None]
    assert [(e.to_status, e.error_class, e.error_type) for e in decided] == \
        [("REVIEW", "side_effect_unknown", "httpx.ReadTimeout")]
    assert decided[0].detail["rule"] == "<built-in> (ambiguous-after-send)"


def test_the_same_error_of_an_idempotent_actor_is_retried(shop: Shop) -> None:
    job_id = shop.actors["fetch_rates"].send("eur").message_id
    wait_for(lambda: shop.store.get(job_id).status is JobStatus.SUCCEEDED, "the rates job to succeed on retry")
    job = shop.store.get(job_id)
    assert (job.attempt, job.retry_count) == (2, 1) and shop.calls["eur"] == 2
    retried = [e for e in shop.store.events(job_id) if e.error_class == "transient"]
    assert retried and retried[0].detail["rule"] == "<built-in> (http-transport)"
