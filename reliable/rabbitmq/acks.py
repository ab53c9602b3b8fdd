"""Acknowledge several deliveries of one Dramatiq RabbitMQ consumer in one hand-off to its thread.

Dramatiq acknowledges each delivery alone: the worker thread calls the consumer thread's
`post_process_message`, whose `_RabbitmqConsumer.ack` hands `channel.basic_ack(tag)` to the
connection's thread (`add_callback_threadsafe`, a wake-up of the consumer thread), where pika's
`BlockingChannel.basic_ack` queues the frame and flushes it before it returns. The
acknowledgements held until their successes commit (reliable.worker.acks) come due a group-commit
batch at a time; `ack_together` sends those of one consumer that are due at the same moment as
one: one hand-off, every `Basic.Ack` frame queued, then one flush. Measured on two cores
(docs/performance.md), that was about a quarter of the worker's CPU per job.

Each delivery still goes through what Dramatiq does for its acknowledgement, one delivery after
the other: its `before_ack` hooks, its tag taken out of the consumer's known tags, its `after_ack`
hooks (the frames are handed off after the last one's hooks; in Dramatiq too a frame is sent
after its `after_ack` may have run). Not sent:
- a delivery received by another consumer than the consumer thread's current one
  (`consumed.delivered_by`): after a reconnect the new channel numbers its deliveries from 1, so
  its tag may name another, unfinished delivery. RabbitMQ redelivers it (its channel is gone), and
  the store's claim skips the finished job. Dramatiq's own ack would send it on the new channel;
- a delivery whose tag the consumer no longer knows (logged, as Dramatiq does);
- a delivery whose `before_ack` hook failed (logged as Dramatiq does: it stays unacknowledged).
A delivery that failed meanwhile (Dramatiq would reject it) is left to Dramatiq's own
`post_process_message`, and so is every delivery of a consumer that is not Dramatiq's RabbitMQ
one (through reliable's wrappers, whose acknowledgements are the wrapped consumer's) or on a
Dramatiq or pika release whose private parts were not read (reliable.compat.pika_internals: its
version gate, `ACKS_TOGETHER`). The frames are queued and flushed with the two halves of pika's own
`basic_ack` (`compat.pika_internals.send_acks`, private API): only on the connection's own thread.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import pika

from ..compat import pika_internals
from ..consumed import QueueNamingConsumer, delivered_by
from .holding import ReholdingConsumer

__all__ = ["Acked", "ack_together", "rabbitmq_consumer"]

logger = logging.getLogger("reliable.rabbitmq")

#: reliable's consumer wrappers, whose ack and nack are the wrapped consumer's.
_WRAPPERS = (QueueNamingConsumer, ReholdingConsumer)


class Acked(NamedTuple):
    """What `ack_together` did: the deliveries it left for Dramatiq's own `post_process_message`,
    and how many acknowledgements it handed to the connection (0: no hand-off)."""

    left: list[Any]
    sent: int


def rabbitmq_consumer(consumer_thread: Any) -> Any | None:
    """The Dramatiq RabbitMQ consumer under `consumer_thread`'s consumer (through reliable's
    wrappers), or None when its acknowledgements cannot be sent together (another broker, a
    consumer of the app's own, another pika)."""
    consumer = getattr(consumer_thread, "consumer", None)
    while isinstance(consumer, _WRAPPERS):
        consumer = consumer.inner
    return pika_internals.rabbitmq_consumer(consumer)


def ack_together(consumer_thread: Any, messages: Sequence[Any]) -> Acked:
    """Acknowledge the successful `messages`, whose acknowledgements Dramatiq asked of
    `consumer_thread`, in one hand-off to its consumer's connection (see the module doc)."""
    consumer = rabbitmq_consumer(consumer_thread)
    if consumer is None:
        return Acked(list(messages), 0)
    current = consumer_thread.consumer  # read once: the consumer thread replaces it on a reconnect
    broker = consumer_thread.broker
    left: list[Any] = []
    tags: list[int] = []
    for message in messages:
        try:
            delivered = delivered_by(message)
            if delivered is None:  # received without reliable's wrapper: Dramatiq's own ack
                left.append(message)
                continue
            if delivered is not current:
                logger.warning("acknowledgement of %s not sent: its consumer reconnected since it was delivered "
                               "(RabbitMQ redelivers it)", message.message_id)
                continue
            if message.failed:  # Dramatiq rejects it
                left.append(message)
                continue
            tag = _acknowledged(consumer, broker, message)
            if tag is not None:
                tags.append(tag)
        except Exception:  # as Dramatiq's post_process_message: logged, the message unacknowledged
            logger.exception("Unhandled error during post_process_message(%s).", message)
    if not tags:
        return Acked(left, 0)
    try:
        consumer.connection.add_callback_threadsafe(functools.partial(pika_internals.send_acks, consumer.channel, tags))
    except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError) as error:
        # Dramatiq's ack would retry, then find its tag gone from the reconnected consumer:
        # the same end, RabbitMQ redelivers them (and the store's claim skips the finished jobs).
        logger.warning("%d acknowledgements not sent, the connection is closed: %s", len(tags), error)
        return Acked(left, 0)
    return Acked(left, len(tags))


def _acknowledged(consumer: Any, broker: Any, message: Any) -> int | None:
    """Dramatiq's acknowledgement of one delivery, but for the frame: its hooks around taking its
    tag out of the known tags; the tag to send, or None (not to be sent)."""
    broker.emit_before("ack", message)  # raises only a MiddlewareError, as in Dramatiq
    tag = pika_internals.delivery_tag(message)
    try:
        consumer.known_tags.remove(tag)
    except KeyError:
        logger.warning("Failed to ack message %s: not in known tags.", message.message_id)
        tag = None
    broker.emit_after("ack", message)
    return tag

