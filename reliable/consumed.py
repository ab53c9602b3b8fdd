"""Which queue a delivery was consumed from: Dramatiq's hooks only see the queue its body names.

Dramatiq's consumers decode a message's body and drop the queue it came from; its worker then
acknowledges the message on the consumer its body names (`Worker.consumers[message.queue_name]`).
A body naming another queue than the one it came from would choose its job's contract (refused:
reliable.worker.delivery.queue_problem) and have Dramatiq acknowledge it on another consumer's
channel, or stop the worker thread with a KeyError when no consumer has that name.

At worker boot `watch_consumers` wraps the broker's `consume`, so each delivery carries the queue
it was consumed from (`consumed_from`); `restore` points a refused delivery back at that queue, so
Dramatiq dead-letters it on the channel it came from. The wrapper also asks `prefetch` for each
consumer's prefetch (reliable.worker.acks: a fast-path queue's held acknowledgements).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .compat.dramatiq_internals import message_fields, point_at_queue

__all__ = ["QueueNamingConsumer", "consumed_from", "delivered_by", "restore", "watch_consumers"]

#: The attribute a delivery (Dramatiq's MessageProxy) carries its consumed queue in.
_CONSUMED = "reliable_consumed_from"
#: The attribute a delivery carries the consumer that received it in (`delivered_by`).
_DELIVERED_BY = "reliable_delivered_by"
#: The broker attribute marking its `consume` wrapped.
_WATCHED = "reliable_consumers_watched"


class QueueNamingConsumer:
    """A Dramatiq consumer whose deliveries carry the queue they were consumed from; everything but
    the iteration is delegated to the wrapped consumer."""

    def __init__(self, inner: Any, queue_name: str) -> None:
        self.inner = inner
        self.queue_name = queue_name

    def __iter__(self) -> QueueNamingConsumer:
        return self

    def __next__(self) -> Any:
        message = next(self.inner)
        if message is not None:
            setattr(message, _CONSUMED, self.queue_name)
            setattr(message, _DELIVERED_BY, self)
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def watch_consumers(broker: Any, prefetch: Callable[[str, int], int] | None = None) -> None:
    """Wrap `broker.consume` (once) so that its consumers name the queue of each delivery, and
    consume with `prefetch(queue_name, dramatiq_prefetch)` when given."""
    if getattr(broker, _WATCHED, False):
        return
    consume = broker.consume

    def watched(queue_name: str, *args: Any, **kwargs: Any) -> QueueNamingConsumer:
        if prefetch is not None and isinstance(kwargs.get("prefetch"), int):  # as Dramatiq's consumer thread calls it
            kwargs["prefetch"] = prefetch(queue_name, kwargs["prefetch"])
        return QueueNamingConsumer(consume(queue_name, *args, **kwargs), queue_name)

    setattr(broker, "consume", watched)  # noqa: B010 (an instance attribute over the method, on purpose)
    setattr(broker, _WATCHED, True)


def consumed_from(message: Any) -> str | None:
    """The queue `message` was consumed from (None: not consumed through a watched broker)."""
    queue = getattr(message, _CONSUMED, None)
    return queue if isinstance(queue, str) else None


def delivered_by(message: Any) -> Any | None:
    """The consumer (a `QueueNamingConsumer`) that received `message`, None when not known. A
    delivery tag means something only on its own consumer's channel: after a reconnect, the new
    channel numbers its deliveries from 1 again (reliable.rabbitmq.acks)."""
    return getattr(message, _DELIVERED_BY, None)


def restore(message: Any) -> None:
    """Point a delivery whose body names another queue back at the queue it was consumed from, so
    Dramatiq acknowledges or dead-letters it on that queue's consumer."""
    queue = consumed_from(message)
    if queue is not None and message_fields(message).queue_name != queue:
        point_at_queue(message, queue)
