"""A Dramatiq app for the forged-delivery tests (issue 30, items 1 and 4): an actor on a queue
whose policy makes it non-idempotent, and a group's members and completion callback.

Every run leaves a marker file `<actor>-<job id>-<attempt>` in RELIABLE_TEST_OUT, so the test
counts the runs, including any the store would not show.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import StubBackend

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    policies=os.environ["RELIABLE_TEST_POLICY"],
    lease_ttl=2.0,
    heartbeat_interval=0.5,
    recovery_interval=0.5,
    sweep_after=300.0,
)
# Dramatiq's fallback only: tracked members count at the store's barrier.
broker.add_middleware(GroupCallbacks(StubBackend()))
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
OUT = Path(os.environ["RELIABLE_TEST_OUT"])


def mark(actor: str) -> None:
    """Leave this run's marker file."""
    job = reliable.current_job()
    (OUT / f"{actor}-{job.job_id}-{job.attempt}-{uuid.uuid4().hex[:6]}").touch()


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def charge(outcome: str) -> None:
    """Charge a card: `timeout` fails as an ambiguous gateway timeout, `refused-once` fails its first
    attempt before anything was sent (a retry), anything else succeeds."""
    mark("charge")
    if outcome == "timeout":
        raise TimeoutError("the payment gateway did not answer")
    if outcome == "refused-once" and reliable.current_job().attempt == 1:
        raise ConnectionRefusedError("the payment gateway refused the connection")


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def member(release: str) -> None:
    """A group member that runs until the file `release` exists (empty: it ends at once)."""
    mark("member")
    deadline = time.monotonic() + 60
    while release and not os.path.exists(release):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{release} was not created within 60 s")
        time.sleep(0.05)


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def finished(note: str) -> None:
    """The group's completion callback."""
    mark("finished")
