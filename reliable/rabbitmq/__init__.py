"""RabbitMQ in production: quorum queues on a cluster, and reliable's timings held against the
broker's consumer_timeout (docs/rabbitmq.md).

- `ReliableRabbitmqBroker`: Dramatiq's RabbitmqBroker declaring quorum queues with a delivery
  limit, a clear error for a queue declared otherwise, and long delays re-held before the
  consumer timeout (imported lazily: it needs pika).
- `check_broker`: the worker-boot check the middleware runs (`reliable.rabbitmq.boot`).
- `reach`: whether RabbitMQ answers and why not (a mistake stops a worker's boot with its fix, an
  outage is waited for); the one line every failed broker query is logged with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .timeouts import (
    DEFAULT_CONSUMER_TIMEOUT,
    TimeoutReport,
    held_unacked,
    hold_limit,
    timeout_issues,
    timeout_report,
)

if TYPE_CHECKING:
    from .broker import DEFAULT_DELIVERY_LIMIT, ReliableRabbitmqBroker

__all__ = ["DEFAULT_CONSUMER_TIMEOUT", "DEFAULT_DELIVERY_LIMIT", "ReliableRabbitmqBroker", "TimeoutReport",
           "held_unacked", "hold_limit", "timeout_issues", "timeout_report"]


def __getattr__(name: str) -> Any:
    if name in ("ReliableRabbitmqBroker", "DEFAULT_DELIVERY_LIMIT"):
        from . import broker

        return getattr(broker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
