"""A Dramatiq app for the policy-pattern test: a policy rule whose regex backtracks catastrophically in `re`.

`steady` holds its lease (its heartbeat renews it) until the test writes the flag file; `fail`
raises ValueError with the message it is given, which the policy's `message: "(a+)+$"` rule is
searched in while `steady` runs on another thread of the same process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"], policies=os.environ["RELIABLE_TEST_POLICY"],
                 lease_ttl=2.0, heartbeat_interval=0.5, recovery_interval=0.5, sweep_after=300.0)
dramatiq.set_broker(broker)
QUEUE = os.environ["RELIABLE_TEST_QUEUE"]


@dramatiq.actor(queue_name=QUEUE, time_limit=120_000)
def steady(flag: str) -> None:
    """Run until `flag` exists (bounded: 90 s)."""
    deadline = time.monotonic() + 90
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@dramatiq.actor(queue_name=QUEUE, time_limit=120_000)
def fail(message: str) -> None:
    """Raise ValueError(message)."""
    raise ValueError(message)
