"""Dramatiq's RabbitmqBroker with quorum queues, a delivery limit and re-held long delays.

Queues: `q` and `q.DQ` are quorum queues (`x-queue-type: quorum`) that dead-letter to `q.XQ`, as
Dramatiq's do; `q.XQ` is a quorum queue with Dramatiq's 7-day message TTL and no dead-letter
target, so no message can be caught in a dead-letter cycle (quorum queues drop those).
`x-delivery-limit` is a backstop above the policy's max attempts, not a retry count: reliable
retries by publishing new messages, so a message's delivery count grows only when it is
redelivered (a worker crash, a closed channel, a node failover). It is a fixed number, not one
computed from the policy, because RabbitMQ refuses to redeclare a queue with another limit: every
producer and worker must declare the same; the worker's boot checks it against the policy
(`reliable.rabbitmq.boot`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import pika
from dramatiq.brokers.rabbitmq import DEAD_MESSAGE_TTL, RabbitmqBroker
from dramatiq.common import xq_name

from ..errors import BrokerConfigError, ConfigError
from .holding import ReholdingConsumer
from .reach import url_mistake
from .timeouts import DEFAULT_CONSUMER_TIMEOUT, hold_limit

__all__ = ["DEFAULT_DELIVERY_LIMIT", "ReliableRabbitmqBroker"]

logger = logging.getLogger("reliable.rabbitmq")

#: The default x-delivery-limit: four times the default policy's 5 attempts, leaving room for the
#: redeliveries that node failovers and closed channels add.
DEFAULT_DELIVERY_LIMIT = 20
_PRECONDITION_FAILED = 406


class ReliableRabbitmqBroker(RabbitmqBroker):
    """A RabbitmqBroker for clusters: quorum queues and consumer_timeout awareness.

    Parameters (all keyword; the rest go to Dramatiq's RabbitmqBroker: `url` (a list, or `;`-
    separated, for a cluster), `parameters=[...]`, `confirm_delivery`, `middleware`):
      queue_type: "quorum" (default) or "classic" (Dramatiq's own queues, re-holding only).
      delivery_limit: x-delivery-limit of quorum queues (default 20); must exceed the max attempts
        of every tracked actor of the queue (checked at worker boot) and be the same in every process.
      consumer_timeout: the broker's consumer_timeout in seconds (RabbitMQ's default 30 min; it
        is not readable over AMQP, so say it here when the server's differs).
      strict_timeouts: refuse to boot a worker whose timings do not fit under consumer_timeout
        (default: a warning per problem).
    """

    def __init__(self, *, queue_type: Literal["quorum", "classic"] = "quorum",
                 delivery_limit: int = DEFAULT_DELIVERY_LIMIT, consumer_timeout: float = DEFAULT_CONSUMER_TIMEOUT,
                 strict_timeouts: bool = False, **kwargs: Any) -> None:
        if queue_type not in ("quorum", "classic"):
            raise ConfigError(f"queue_type must be 'quorum' or 'classic', not {queue_type!r}")
        if queue_type == "quorum" and kwargs.get("max_priority"):
            raise ConfigError("max_priority: quorum queues do not support x-max-priority (RabbitMQ 3.10); "
                              "use queue_type='classic' or actor priorities")
        if isinstance(delivery_limit, bool) or not isinstance(delivery_limit, int) or delivery_limit < 2:
            raise ConfigError(f"delivery_limit must be an integer of at least 2, not {delivery_limit!r}")
        self.hold_limit = hold_limit(consumer_timeout)  # a timeout too short fails here
        try:
            super().__init__(**kwargs)
        except ValueError as exc:  # pika's URL parser: one line with the fix, not pika's traceback
            if (mistake := url_mistake(exc)) is None:
                raise
            raise BrokerConfigError(mistake) from None
        self.queue_type = queue_type
        self.delivery_limit = delivery_limit
        self.consumer_timeout = float(consumer_timeout)
        self.strict_timeouts = strict_timeouts

    @property
    def quorum(self) -> bool:
        """Whether this broker declares quorum queues."""
        return self.queue_type == "quorum"

    def _build_queue_arguments(self, queue_name: str) -> dict[str, Any]:
        arguments: dict[str, Any] = super()._build_queue_arguments(queue_name)  # type: ignore[no-untyped-call]
        if self.quorum:
            arguments["x-queue-type"] = "quorum"
            arguments["x-delivery-limit"] = self.delivery_limit
        return arguments

    def _declare_queue(self, queue_name: str) -> Any:
        return self._declared(queue_name, lambda: super(ReliableRabbitmqBroker, self)._declare_queue(queue_name))  # type: ignore[no-untyped-call]

    def _declare_dq_queue(self, queue_name: str) -> Any:
        return self._declared(f"{queue_name}.DQ",
                              lambda: super(ReliableRabbitmqBroker, self)._declare_dq_queue(queue_name))  # type: ignore[no-untyped-call]

    def _declare_xq_queue(self, queue_name: str) -> Any:
        if not self.quorum:
            return self._declared(xq_name(queue_name),
                                  lambda: super(ReliableRabbitmqBroker, self)._declare_xq_queue(queue_name))  # type: ignore[no-untyped-call]
        arguments = {"x-queue-type": "quorum", "x-message-ttl": DEAD_MESSAGE_TTL}  # no dead-letter target
        return self._declared(xq_name(queue_name), lambda: self.channel.queue_declare(
            queue=xq_name(queue_name), durable=True, arguments=arguments))

    def _declared(self, name: str, declare: Callable[[], Any]) -> Any:
        try:
            return declare()
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != _PRECONDITION_FAILED:
                raise
            del self.connection  # the channel is closed; the next caller opens new ones
            raise BrokerConfigError(
                f"RabbitMQ refused to declare queue {name!r} as this broker does "
                f"({self.queue_type}, x-delivery-limit {self.delivery_limit}): {exc.reply_text}. "
                "A queue's type and arguments cannot change: drain it (stop producers, let workers finish), "
                "delete it (rabbitmqctl delete_queue), and start the workers again, or give the actors a new "
                "queue_name; every process must use the same queue_type and delivery_limit "
                "(`reliable docs rabbitmq`)") from None

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> Any:
        """A consumer that re-holds messages delayed beyond the hold limit (`reliable.rabbitmq.holding`)."""
        return ReholdingConsumer(super().consume(queue_name, prefetch, timeout), self, self.hold_limit)
