"""A Dramatiq app with reliable installed on its defaults, for tests/supervisor/test_host_scrape.py:
one actor that succeeds, one that dead-letters (a transient error on its only attempt)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"])
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]


@dramatiq.actor(queue_name=QUEUE)
def fine() -> None:
    """Succeed."""


@dramatiq.actor(queue_name=QUEUE, max_attempts=1)
def doomed() -> None:
    """Fail with a transient error on the only attempt it has: DEAD."""
    raise ConnectionError("the partner is down")
