"""Re-hold delayed messages before RabbitMQ's consumer_timeout takes them back.

Dramatiq keeps a delayed message unacknowledged in the worker until its eta. When the eta is
further away than the hold limit (the consumer timeout less a margin: `timeouts.hold_limit`), this
consumer keeps the delivery out of Dramatiq's delay queue, and once it has held it for the hold
limit it publishes the same bytes (same eta) to the delay queue again and acknowledges the
delivery. A message is therefore never held longer than the limit, and runs at its eta. Publish,
then ack: a crash in between leaves two copies, and the store's claim runs the job once.
"""

from __future__ import annotations

import logging
from typing import Any

import pika
from dramatiq.broker import Consumer
from dramatiq.common import current_millis, dq_name, q_name

__all__ = ["ReholdingConsumer"]

logger = logging.getLogger("reliable.rabbitmq")


class ReholdingConsumer(Consumer):
    """A Dramatiq consumer that re-publishes messages whose eta is beyond `limit` seconds.

    Wraps the broker's consumer; everything but the iteration is delegated to it. Runs on the
    consumer thread, which owns the wrapped channel; re-publishing uses the broker's channel of
    that thread (confirmed when the broker has confirm_delivery)."""

    def __init__(self, inner: Any, broker: Any, limit: float) -> None:
        self.inner = inner
        self.broker = broker
        self.limit_ms = int(limit * 1000)
        #: (re-publish at, message) of the deliveries held here, in arrival order.
        self.held: list[tuple[int, Any]] = []
        self.reheld = 0

    def __iter__(self) -> ReholdingConsumer:
        return self

    def __next__(self) -> Any:
        self._republish_due()
        message = next(self.inner)
        if message is None:
            return None
        eta = message.options.get("eta")
        now = current_millis()
        if isinstance(eta, (int, float)) and eta - now > self.limit_ms:
            self.held.append((now + self.limit_ms, message))
            return None  # Dramatiq sees an idle tick
        return message

    def _republish_due(self) -> None:
        now = current_millis()
        while self.held and self.held[0][0] <= now:
            _due, message = self.held[0]
            queue = dq_name(q_name(message.queue_name))
            try:
                self.broker.channel.basic_publish(
                    exchange="", routing_key=queue, body=message.encode(),
                    properties=pika.BasicProperties(delivery_mode=2,
                                                    priority=message.options.get("broker_priority")))
            except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError):
                # Still unacked: tried again on the next tick, or redelivered if the channel goes.
                logger.warning("re-holding message %s on %s failed; retrying", message.message_id, queue,
                               exc_info=True)
                del self.broker.connection
                return
            self.held.pop(0)
            self.inner.ack(message)
            self.reheld += 1
            logger.debug("message %s re-held on %s (eta in %.0fs)", message.message_id, queue,
                         (message.options["eta"] - now) / 1000)

    def ack(self, message: Any) -> None:
        """Acknowledge through the wrapped consumer."""
        self.inner.ack(message)

    def nack(self, message: Any) -> None:
        """Reject through the wrapped consumer."""
        self.inner.nack(message)

    def requeue(self, messages: Any) -> None:
        """Requeue through the wrapped consumer (RabbitMQ requeues unacked deliveries on close)."""
        self.inner.requeue(messages)

    def close(self) -> None:
        """Close the wrapped consumer; the messages held here go back to RabbitMQ with its channel."""
        self.held.clear()
        self.inner.close()
