"""A Dramatiq app with pipeline steps and group members, for the crash-window tests.

With RELIABLE_TEST_KILL_AFTER_COMMIT=<marker file>, the first worker process that commits an
outcome followed by other messages (a pipeline step, a callback) kills itself with SIGKILL right
after that commit and before it publishes them: the window in which Dramatiq's own Pipelines
middleware would lose the next step. RELIABLE_TEST_KILL_AFTER_GROUP_COMMIT=<marker file> does the
same to the worker whose member's success cleared its group's barrier, before it publishes the
group's completion callback. The marker makes it happen once.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import StubBackend

import reliable
from reliable.worker import after_commit, groups

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    lease_ttl=float(os.environ.get("RELIABLE_TEST_LEASE_TTL", "2")),
    heartbeat_interval=float(os.environ.get("RELIABLE_TEST_HEARTBEAT", "0.5")),
    recovery_interval=float(os.environ.get("RELIABLE_TEST_RECOVERY_INTERVAL", "0.5")),
    sweep_after=float(os.environ.get("RELIABLE_TEST_SWEEP_AFTER", "300")),
)
# Added after install, as apps often do: the worker adopts it at boot. The rate-limiter backend is
# only Dramatiq's fallback here (tracked members count in the store), so the in-process one does.
broker.add_middleware(GroupCallbacks(StubBackend()))
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
_KILL_MARKER = os.environ.get("RELIABLE_TEST_KILL_AFTER_COMMIT")

if _KILL_MARKER:
    _conclude = after_commit.conclude

    def _die_before_publishing(runtime: Any, metrics: Any, broker: Any, message: Any, context: Any, job: Any,
                               decision: Any, planned: Any) -> None:
        if job is not None and planned and not os.path.exists(_KILL_MARKER):
            with open(_KILL_MARKER, "w") as marker:
                marker.write(f"{job.job_id} {job.status.value}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        _conclude(runtime, metrics, broker, message, context, job, decision, planned)

    after_commit.conclude = _die_before_publishing

_GROUP_KILL_MARKER = os.environ.get("RELIABLE_TEST_KILL_AFTER_GROUP_COMMIT")

if _GROUP_KILL_MARKER:
    _group_arrived = groups.Groups.arrived

    def _die_before_completing(step: groups.Groups, broker: Any, context: Any, fan_in: Any,
                               callbacks: Any) -> None:
        if fan_in.cleared and not os.path.exists(_GROUP_KILL_MARKER):
            with open(_GROUP_KILL_MARKER, "w") as marker:
                marker.write(f"{context.job_id} cleared {fan_in.barrier_id}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        _group_arrived(step, broker, context, fan_in, callbacks)

    groups.Groups.arrived = _die_before_completing  # type: ignore[method-assign]


@dramatiq.actor(queue_name=QUEUE)
def increment(x: int) -> int:
    """The first step."""
    return x + 1


@dramatiq.actor(queue_name=QUEUE)
def double(x: int) -> int:
    """The second step."""
    return x * 2


@dramatiq.actor(queue_name=QUEUE)
def finished(label: str) -> None:
    """A group's completion callback."""
