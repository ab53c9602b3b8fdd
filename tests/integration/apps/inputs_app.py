"""A Dramatiq app for the input-rule tests of issue 38 (options, text the store can hold, copies):
RabbitMQ's default middleware (AgeLimit before reliable's) and three actors."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    lease_ttl=2.0,
    heartbeat_interval=0.5,
    recovery_interval=0.5,
    sweep_after=float(os.environ.get("RELIABLE_TEST_SWEEP_AFTER", "300")),
)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]


@dramatiq.actor(queue_name=QUEUE)
def noop() -> None:
    """Does nothing."""


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def open_report() -> None:
    """Fails with a file name that is not UTF-8 in its message, as `os.fsdecode` gives it."""
    name = os.fsdecode(b"report-\xff.csv")
    raise FileNotFoundError(f"cannot open {name}")


@dramatiq.actor(queue_name=QUEUE, max_age=60_000)
def charge(amount: int) -> None:
    """Leaves a marker file per run."""
    job = reliable.current_job()
    with open(os.path.join(os.environ["RELIABLE_TEST_OUT"], f"charge-{job.job_id}-{amount}"), "w"):
        pass
