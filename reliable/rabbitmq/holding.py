"""Re-hold delayed messages before RabbitMQ's consumer_timeout takes them back.

Dramatiq keeps a delayed message unacknowledged in the worker until its eta. When the eta is
further away than the hold limit (the consumer timeout less a margin: `timeouts.hold_limit`), this
consumer keeps the delivery out of Dramatiq's delay queue, and once it has held it for the hold
limit it publishes the same bytes (same eta) to the delay queue again and acknowledges the
delivery. A message is therefore never held longer than the limit, and runs at its eta.

The copy is published on a channel of its own in confirm mode with `mandatory=True`, whatever the
broker's `confirm_delivery`, and the delivery is acknowledged only once RabbitMQ has confirmed the
copy: a failed, unroutable or refused publish (or a connection that cannot be opened) leaves the
delivery held, tried again on the next tick, or redelivered if the consumer's channel goes. A crash
between the confirm and the ack leaves two copies, and the store's claim runs the job once.
"""

from __future__ import annotations

import logging
from typing import Any

import pika
from dramatiq.broker import Consumer
from dramatiq.common import current_millis, dq_name, q_name
from pika.adapters.utils.connection_workflow import AMQPConnectorException

__all__ = ["ReholdingConsumer"]

logger = logging.getLogger("reliable.rabbitmq")

#: What a failed re-publish raises: pika's AMQP errors (connection, channel, unroutable, nack), the
#: connector's errors while opening a connection (AMQPConnectorStackTimeout, ...), and socket errors.
_PUBLISH_ERRORS = (pika.exceptions.AMQPError, AMQPConnectorException, OSError)


class ReholdingConsumer(Consumer):
    """A Dramatiq consumer that re-publishes messages whose eta is beyond `limit` seconds.

    Wraps the broker's consumer; everything but the iteration is delegated to it. Runs on the
    consumer thread, which owns the wrapped channel and the confirmed publishing connection
    (opened from the broker's parameters on the first re-hold, kept open, closed with the consumer)."""

    def __init__(self, inner: Any, broker: Any, limit: float) -> None:
        self.inner = inner
        self.broker = broker
        self.limit_ms = int(limit * 1000)
        #: (re-publish at, message) of the deliveries held here, in arrival order.
        self.held: list[tuple[int, Any]] = []
        self.reheld = 0
        self._connection: Any = None
        self._channel: Any = None

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
        if not (self.held and self.held[0][0] <= now):
            self._keep_alive()
            return
        while self.held and self.held[0][0] <= now:
            _due, message = self.held[0]
            queue = dq_name(q_name(message.queue_name))
            try:
                self._confirmed_channel().basic_publish(
                    exchange="", routing_key=queue, body=message.encode(), mandatory=True,
                    properties=pika.BasicProperties(delivery_mode=2,
                                                    priority=message.options.get("broker_priority")))
            except _PUBLISH_ERRORS:
                # Not confirmed: still held and unacked; tried again on the next tick, or redelivered
                # if the consumer's channel goes.
                logger.warning("re-holding message %s on %s failed (kept held; retrying on the next tick)",
                               message.message_id, queue, exc_info=True)
                self._close_publisher()
                return
            self.held.pop(0)
            self.inner.ack(message)  # RabbitMQ confirmed the copy
            self.reheld += 1
            logger.debug("message %s re-held on %s (eta in %.0fs)", message.message_id, queue,
                         (message.options["eta"] - now) / 1000)

    def _confirmed_channel(self) -> Any:
        if self._channel is None or not self._channel.is_open:
            self._close_publisher()
            self._connection = pika.BlockingConnection(parameters=self.broker.parameters)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()
        return self._channel

    def _keep_alive(self) -> None:
        """Serve the publishing connection's heartbeats between re-holds (drop it if it died)."""
        if self._connection is None:
            return
        try:
            self._connection.process_data_events(0)
        except _PUBLISH_ERRORS:
            self._close_publisher()

    def _close_publisher(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except _PUBLISH_ERRORS:
                logger.debug("closing the re-holding connection failed", exc_info=True)

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
        self._close_publisher()
        self.inner.close()
