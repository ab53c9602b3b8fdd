"""Acknowledge several deliveries of one Dramatiq RabbitMQ consumer in one hand-off to its thread.

Dramatiq acknowledges each delivery alone: the worker thread calls the consumer thread's
`post_process_message`, whose `_RabbitmqConsumer.ack` hands `channel.basic_ack(tag)` to the
connection's thread (`add_callback_threadsafe`, a wake-up of the consumer thread), and pika's
`BlockingChannel.basic_ack` then writes that one frame to the socket before it returns. The
acknowledgements held until their successes commit (reliable.worker.acks) come due a group-commit
batch at a time; `ack_together` sends those of one consumer as one: one hand-off, then every
`Basic.Ack` frame queued and written in one flush. Measured on two cores (docs/performance.md),
that was a quarter of the worker's CPU per job.

Each delivery still goes through what Dramatiq does around its acknowledgement, in its order: the
`before_ack` hooks, its tag taken out of the consumer's known tags (a tag the consumer no longer
knows, after a reconnect, is not sent: RabbitMQ redelivers it), the `after_ack` hooks. A delivery
that failed meanwhile (Dramatiq would reject it), or a consumer that is not Dramatiq's RabbitMQ
one on a pika whose blocking channel was read (`VERIFIED_PIKA`), is left to Dramatiq's own
`post_process_message`. The frames are queued with `BlockingChannel._impl.basic_ack` and written
with `BlockingChannel._flush_output`, the two halves of pika's own `basic_ack` (private API, the
same in 1.3 and 1.4): only on the connection's own thread.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pika
from dramatiq.brokers.rabbitmq import _RabbitmqConsumer
from pika.adapters.blocking_connection import BlockingChannel

__all__ = ["VERIFIED_PIKA", "ack_together", "rabbitmq_consumer"]

logger = logging.getLogger("reliable.rabbitmq")

#: The pika releases (major.minor) whose BlockingChannel.basic_ack is `_impl.basic_ack` then
#: `_flush_output` (read in 1.3.0, 1.3.2, 1.4.0; tested on the installed 1.4).
VERIFIED_PIKA = frozenset({"1.3", "1.4"})


def rabbitmq_consumer(consumer_thread: Any) -> Any | None:
    """The Dramatiq RabbitMQ consumer of `consumer_thread` (through reliable's wrapper of it), or
    None when its acknowledgements cannot be sent together (another broker, another pika)."""
    consumer = getattr(consumer_thread, "consumer", None)
    consumer = getattr(consumer, "inner", consumer)  # reliable.worker.consumed.QueueNamingConsumer
    if type(consumer) is not _RabbitmqConsumer or ".".join(pika.__version__.split(".")[:2]) not in VERIFIED_PIKA:
        return None
    if not isinstance(getattr(consumer, "channel", None), BlockingChannel):
        return None
    return consumer


def ack_together(consumer_thread: Any, messages: Sequence[Any]) -> list[Any]:
    """Acknowledge the successful `messages`, all delivered by `consumer_thread`'s consumer, in one
    hand-off to its connection (see the module doc); return those left for Dramatiq's own
    `post_process_message` (all of them when `rabbitmq_consumer` finds none)."""
    consumer = rabbitmq_consumer(consumer_thread)
    if consumer is None:
        return list(messages)
    broker = consumer_thread.broker
    left, acked, tags = [], [], []
    for message in messages:
        if message.failed:  # Dramatiq rejects it
            left.append(message)
            continue
        if not _hook(broker.emit_before, message):
            continue  # as Dramatiq's post_process_message: a failing hook leaves it unacknowledged
        try:
            consumer.known_tags.remove(message._tag)
        except KeyError:
            logger.warning("Failed to ack message %s: not in known tags.", message.message_id)
        else:
            tags.append(message._tag)
        acked.append(message)
    if tags:
        try:
            consumer.connection.add_callback_threadsafe(functools.partial(_send_acks, consumer.channel, tags))
        except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError) as error:
            # Dramatiq's ack would retry, then find its tag gone from the reconnected consumer:
            # the same end, RabbitMQ redelivers them (and the store's claim skips the finished jobs).
            logger.warning("%d acknowledgements not sent, the connection is closed: %s", len(tags), error)
    for message in acked:
        _hook(broker.emit_after, message)
    return left


def _hook(emit: Callable[[str, Any], Any], message: Any) -> bool:
    """Run the broker's ack hooks, before or after (`emit`), for `message`; False (logged) when one raised."""
    try:
        emit("ack", message)
    except Exception:
        logger.warning("Failed to post_process_message(%s).", message, exc_info=True)
        return False
    return True


def _send_acks(channel: BlockingChannel, tags: Sequence[int]) -> None:
    """On the connection's thread: queue a `Basic.Ack` per tag, then write them in one flush."""
    impl = channel._impl
    for tag in tags:
        impl.basic_ack(delivery_tag=tag, multiple=False)
    channel._flush_output()
