"""A Dramatiq app with a two-step pipeline, for the crash-window test.

With RELIABLE_TEST_KILL_AFTER_COMMIT=<marker file>, the first worker process that commits an
outcome followed by other messages (a pipeline step, a callback) kills itself with SIGKILL right
after that commit and before it publishes them: the window in which Dramatiq's own Pipelines
middleware would lose the next step. The marker makes it happen once.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.middleware import ReliableMiddleware

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    lease_ttl=float(os.environ.get("RELIABLE_TEST_LEASE_TTL", "2")),
    heartbeat_interval=float(os.environ.get("RELIABLE_TEST_HEARTBEAT", "0.5")),
    recovery_interval=float(os.environ.get("RELIABLE_TEST_RECOVERY_INTERVAL", "0.5")),
    sweep_after=float(os.environ.get("RELIABLE_TEST_SWEEP_AFTER", "300")),
)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
_KILL_MARKER = os.environ.get("RELIABLE_TEST_KILL_AFTER_COMMIT")

if _KILL_MARKER:
    _conclude = ReliableMiddleware._conclude

    def _die_before_publishing(self: ReliableMiddleware, broker: Any, message: Any, context: Any, job: Any,
                               decision: Any, planned: Any) -> None:
        if job is not None and planned and not os.path.exists(_KILL_MARKER):
            with open(_KILL_MARKER, "w") as marker:
                marker.write(f"{job.job_id} {job.status.value}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        _conclude(self, broker, message, context, job, decision, planned)

    ReliableMiddleware._conclude = _die_before_publishing  # type: ignore[method-assign]


@dramatiq.actor(queue_name=QUEUE)
def increment(x: int) -> int:
    """The first step."""
    return x + 1


@dramatiq.actor(queue_name=QUEUE)
def double(x: int) -> int:
    """The second step."""
    return x * 2
