"""Dramatiq's RabbitMQ consumer and pika's blocking channel, as the held acknowledgements use them.

Dramatiq's `_RabbitmqConsumer` is private, and so is a delivery's tag (`_RabbitmqMessage._tag`):
read in Dramatiq 2.0.0, 2.0.1, 2.1.0 and 2.2.0 (tags), tested on the installed 2.2. pika's
`BlockingChannel.basic_ack` is `_impl.basic_ack` then `_flush_output`: read in pika 1.3.0, 1.3.2 and
1.4.0, tested on the installed 1.4. The fallback (either release not verified): no consumer is
Dramatiq's RabbitMQ one (`ACKS_TOGETHER` false), so every acknowledgement is left to Dramatiq's own
`post_process_message`, one at a time (reliable.rabbitmq.acks).

`publishing_socket` reads the socket under the sending thread's connection (Dramatiq's thread-local
`broker.state.connection`, pika's `BlockingConnection._impl._transport._sock`: read in pika 1.3 and
1.4) so that a send's deadline can cut it (reliable.worker.publishing). The fallback: None, the
publish is bounded only by pika's own timeouts.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import pika
from dramatiq.brokers.rabbitmq import _RabbitmqConsumer
from pika.adapters.blocking_connection import BlockingChannel

from . import release
from .dramatiq_internals import DRAMATIQ_VERIFIED

__all__ = ["ACKS_TOGETHER", "VERIFIED_PIKA", "delivery_tag", "publishing_socket", "rabbitmq_consumer", "send_acks"]

#: The pika releases whose BlockingChannel.basic_ack is `_impl.basic_ack` then `_flush_output`.
VERIFIED_PIKA = frozenset({"1.3", "1.4"})
#: Both the installed Dramatiq and pika were verified: acknowledgements may be sent together.
ACKS_TOGETHER = DRAMATIQ_VERIFIED and release(pika.__version__) in VERIFIED_PIKA


def rabbitmq_consumer(consumer: Any) -> Any | None:
    """`consumer` when it is Dramatiq's own RabbitMQ consumer on a blocking channel and the gate is
    open, else None (the fallback: Dramatiq acknowledges)."""
    if not ACKS_TOGETHER or type(consumer) is not _RabbitmqConsumer:
        return None
    return consumer if isinstance(getattr(consumer, "channel", None), BlockingChannel) else None


def delivery_tag(message: Any) -> int | None:
    """The delivery tag of a message Dramatiq's RabbitMQ consumer delivered (None: unknown)."""
    tag = getattr(message, "_tag", None) if ACKS_TOGETHER else None
    return tag if isinstance(tag, int) else None


def send_acks(channel: BlockingChannel, tags: Sequence[int]) -> None:
    """On the connection's thread: queue a `Basic.Ack` per tag, then flush them (pika's own
    `basic_ack`, in two halves). Only for a consumer `rabbitmq_consumer` returned."""
    impl = channel._impl
    for tag in tags:
        impl.basic_ack(delivery_tag=tag, multiple=False)
    channel._flush_output()


def publishing_socket(broker: Any) -> socket.socket | None:
    """The socket of the connection `broker` publishes on from this thread, if it has one open and the
    installed pika is a verified one; None otherwise (nothing is opened here)."""
    if release(pika.__version__) not in VERIFIED_PIKA:
        return None
    connection = getattr(getattr(broker, "state", None), "connection", None)
    sock = getattr(getattr(getattr(connection, "_impl", None), "_transport", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None
