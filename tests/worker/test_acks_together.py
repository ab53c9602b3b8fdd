"""Held acknowledgements sent together (reliable.rabbitmq.acks), on the real RabbitMQ.

A Dramatiq RabbitMQ consumer (as reliable's watched broker wraps it) receives real deliveries; the
test's thread plays the consumer thread (it iterates the consumer, which runs the connection's
callbacks). What RabbitMQ acknowledged is read back the only way it can be: when the consumer's
connection closes, every delivery still unacknowledged returns to the queue as ready.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from queue import PriorityQueue
from typing import Any

import dramatiq
import pytest
from dramatiq.broker import MessageProxy
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Middleware, MiddlewareError
from dramatiq.worker import ConsumerThread

from reliable.consumed import QueueNamingConsumer
from reliable.rabbitmq.acks import Acked, ack_together, rabbitmq_consumer

from support import wait_for
from workers import ready


class AckHooks(Middleware):
    """Records Dramatiq's ack hooks; `refuse` makes before_ack fail for that message id."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.refuse: set[str] = set()

    def before_ack(self, broker: dramatiq.Broker, message: Any) -> None:
        if message.message_id in self.refuse:
            raise MiddlewareError("a before_ack hook failed")  # the only kind emit_before lets through
        self.calls.append(("before", message.message_id))

    def after_ack(self, broker: dramatiq.Broker, message: Any) -> None:
        self.calls.append(("after", message.message_id))


class Delivered:
    """`count` real deliveries of `queue`, received by a consumer thread that is not started: the
    test iterates its consumer (`pump`) as the thread would."""

    def __init__(self, rabbitmq_url: str, queue: str, count: int) -> None:
        self.hooks = AckHooks()
        self.broker = RabbitmqBroker(url=rabbitmq_url, middleware=[self.hooks])
        self.broker.declare_queue(queue)
        for n in range(count):
            self.broker.enqueue(dramatiq.Message(queue_name=queue, actor_name="a", args=(n,), kwargs={}, options={}))
        self.queue, self.rabbitmq_url = queue, rabbitmq_url
        self.thread = ConsumerThread(broker=self.broker, queue_name=queue, prefetch=count,
                                     work_queue=PriorityQueue(), worker_timeout=100)
        self.thread.consumer = QueueNamingConsumer(self.broker.consume(queue, prefetch=count, timeout=100), queue)
        self.messages: list[MessageProxy] = []

        def one_more() -> bool:
            message = next(self.thread.consumer)
            if message is not None:
                self.messages.append(MessageProxy(message))
            return len(self.messages) == count

        wait_for(one_more, f"{count} deliveries", timeout=15, interval=0)
        self.handoffs: list[object] = []
        self.flushes = 0
        inner = self.thread.consumer.inner
        connection, channel = inner.connection, inner.channel
        hand_off, flush = connection.add_callback_threadsafe, channel._flush_output

        def counted_hand_off(callback: Callable[[], None]) -> None:
            self.handoffs.append(callback)
            hand_off(callback)

        def counted_flush(*waiters: Any) -> None:
            self.flushes += 1
            flush(*waiters)

        connection.add_callback_threadsafe = counted_hand_off
        channel._flush_output = counted_flush

    def pump(self) -> None:
        """Run what was handed to the connection's thread (as the consumer thread's next turn does)."""
        next(self.thread.consumer)

    def returned_after_close(self, expected: int) -> None:
        """Close the consumer: the deliveries RabbitMQ did not see acknowledged come back; wait for
        `expected` of them (RabbitMQ requeues them as the channel closes), and check no more do."""
        self.thread.consumer.close()
        wait_for(lambda: ready(self.rabbitmq_url, self.queue) >= expected, f"{expected} deliveries back", timeout=15)
        assert ready(self.rabbitmq_url, self.queue) == expected

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.thread.consumer.close()
        self.broker.close()


@pytest.fixture
def delivered(rabbitmq_url: str, queue_name: str) -> Iterator[Callable[[int], Delivered]]:
    made: list[Delivered] = []

    def deliver(count: int) -> Delivered:
        made.append(Delivered(rabbitmq_url, queue_name, count))
        return made[-1]

    yield deliver
    for one in made:
        one.close()


def test_a_consumers_acks_go_in_one_hand_off_and_one_write_with_each_ones_hooks(
        delivered: Callable[[int], Delivered]) -> None:
    got = delivered(6)
    acked, kept = got.messages[:5], got.messages[5]  # the last one stays unacknowledged: the control
    assert ack_together(got.thread, acked) == Acked([], 5)
    assert len(got.handoffs) == 1, "one wake-up of the connection's thread for the five"
    flushes = got.flushes
    got.pump()
    assert got.flushes - flushes == 1, "the five frames flushed at once"
    ids = [message.message_id for message in acked]
    assert got.hooks.calls == [(hook, i) for i in ids for hook in ("before", "after")], "each one's hooks in turn"
    assert not got.thread.consumer.inner.known_tags & {message._tag for message in acked}
    got.returned_after_close(1)  # only the control comes back: the five were acknowledged
    assert kept.message_id not in {i for _, i in got.hooks.calls}


def test_what_dramatiq_would_not_acknowledge_is_not_sent(
        delivered: Callable[[int], Delivered], caplog: pytest.LogCaptureFixture) -> None:
    """A failed delivery is left to Dramatiq's own post_process_message (it rejects it); a failing
    before_ack hook leaves its delivery unacknowledged, as in Dramatiq; a tag the consumer no longer
    knows is not sent, yet its after_ack runs, as Dramatiq's ack does."""
    got = delivered(4)
    failed, refused, unknown, fine = got.messages
    failed.fail()
    got.hooks.refuse.add(refused.message_id)
    got.thread.consumer.inner.known_tags.discard(unknown._tag)
    with caplog.at_level(logging.WARNING, logger="reliable.rabbitmq"):
        assert ack_together(got.thread, got.messages) == Acked([failed], 1)
    got.pump()
    assert "Unhandled error during post_process_message" in caplog.text and "a before_ack hook failed" in caplog.text
    assert "not in known tags" in caplog.text
    assert got.hooks.calls == [("before", unknown.message_id), ("after", unknown.message_id),
                               ("before", fine.message_id), ("after", fine.message_id)]
    got.returned_after_close(3)  # the failed, the refused and the unknown one: only `fine` was acknowledged


def test_a_closed_connection_sends_nothing_and_raises_nothing(
        delivered: Callable[[int], Delivered], caplog: pytest.LogCaptureFixture) -> None:
    got = delivered(2)
    got.thread.consumer.inner.connection.close()
    with caplog.at_level(logging.WARNING, logger="reliable.rabbitmq"):
        assert ack_together(got.thread, got.messages) == Acked([], 0)
    assert "2 acknowledgements not sent, the connection is closed" in caplog.text
    # Back in the queue with the connection: RabbitMQ redelivers them.
    wait_for(lambda: ready(got.rabbitmq_url, got.queue) == 2, "both deliveries back", timeout=15)


def test_a_delivery_of_a_consumer_since_replaced_is_not_acknowledged_on_the_new_one(
        delivered: Callable[[int], Delivered], caplog: pytest.LogCaptureFixture) -> None:
    """After a reconnect the consumer thread's new channel numbers its deliveries from 1 again: the
    old delivery's tag would name one of the new channel's deliveries, not yet run. It is not sent
    (RabbitMQ redelivers the old one); Dramatiq's own ack would have acknowledged the new delivery."""
    got = delivered(2)
    old = got.messages
    got.thread.consumer.close()  # the old channel goes: its two deliveries are back in the queue
    fresh = QueueNamingConsumer(got.broker.consume(got.queue, prefetch=2, timeout=100), got.queue)
    got.thread.consumer = fresh
    redelivered: list[Any] = []

    def one_more() -> bool:
        message = next(fresh)
        if message is not None:
            redelivered.append(message)
        return len(redelivered) == 2

    wait_for(one_more, "the two deliveries on the new channel", timeout=15, interval=0)
    assert {m._tag for m in old} == {m._tag for m in redelivered}, "the new channel reuses the old tags"
    with caplog.at_level(logging.WARNING, logger="reliable.rabbitmq"):
        assert ack_together(got.thread, old) == Acked([], 0)
    assert "its consumer reconnected since it was delivered" in caplog.text
    assert fresh.inner.known_tags == {m._tag for m in redelivered}
    next(fresh)
    fresh.close()
    wait_for(lambda: ready(got.rabbitmq_url, got.queue) == 2, "both back: none acknowledged", timeout=15)


def test_a_consumer_other_than_rabbitmqs_is_left_to_dramatiq() -> None:
    broker = StubBroker()
    broker.declare_queue("default")
    thread = ConsumerThread(broker=broker, queue_name="default", prefetch=1, work_queue=PriorityQueue(),
                            worker_timeout=100)
    thread.consumer = QueueNamingConsumer(broker.consume("default"), "default")
    message = MessageProxy(dramatiq.Message(queue_name="default", actor_name="a", args=(), kwargs={}, options={}))
    assert rabbitmq_consumer(thread) is None
    assert ack_together(thread, [message]) == Acked([message], 0)
