"""Which queue a delivery belongs to (issue 30, item 1): the pure rule (`delivery.queue_problem`)
and the consumer wrapper that tells the worker where a delivery came from (`consumed`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker

from reliable import consumed
from reliable.worker import delivery


def job(queue: str, home: str) -> Any:
    return SimpleNamespace(queue=queue, home_queue=home)


def test_the_actors_queue_and_the_stores_queues_are_accepted() -> None:
    assert delivery.queue_problem("payments", "payments", "payments", None, ()) is None
    assert delivery.queue_problem("payments", None, "payments", None, ()) is None  # consumer unknown
    assert delivery.queue_problem("slow", "slow", "payments", job("slow", "payments"), ()) is None  # its lane
    assert delivery.queue_problem("slow", "slow", "payments", job("payments", "payments"), ("slow",)) is None
    assert delivery.queue_problem("high", "high", "payments", job("high", "high"), ()) is None  # a producer's


def test_a_body_naming_another_queue_is_refused() -> None:
    came = delivery.queue_problem("default", "payments", "payments", None, ())
    assert came == "it names queue 'default' but came from queue 'payments'"
    declared = delivery.queue_problem("default", "default", "payments", None, ())
    assert declared is not None and "not its actor's ('payments')" in declared and "no such job" in declared
    stored = delivery.queue_problem("default", None, "payments", job("payments", "payments"), ("slow",))
    assert stored is not None and "nor its job's ('payments')" in stored


def test_a_delay_queue_counts_as_its_queue_and_deliveries_name_their_consumer() -> None:
    broker = StubBroker()
    broker.declare_queue("payments")
    consumed.watch_consumers(broker)
    consumed.watch_consumers(broker)  # once
    message: dramatiq.Message[Any] = dramatiq.Message(queue_name="default", actor_name="charge", args=(),
                                                      kwargs={}, options={})
    broker.queues["payments"].put(message.encode())
    consumer = broker.consume("payments", timeout=1000)
    assert isinstance(consumer, consumed.QueueNamingConsumer)
    delivered = next(consumer)
    assert consumed.consumed_from(delivered) == "payments"
    assert delivery.delivered_queue(delivered) == ("default", "payments")
    consumed.restore(delivered)
    assert delivered.queue_name == "payments" and delivered.message_id == message.message_id
    delayed = dramatiq.Message(queue_name="payments.DQ", actor_name="charge", args=(), kwargs={}, options={})
    assert delivery.delivered_queue(delayed) == ("payments", None)
    consumer.close()


def test_a_body_naming_the_delay_queue_of_the_queue_it_came_from_is_refused() -> None:
    # Dramatiq acknowledges a delivery on the consumer its body names: a body saying <queue>.DQ
    # consumed from <queue> would be acked with <queue>'s delivery tag on the delay queue's channel.
    broker = StubBroker()
    broker.declare_queue("payments")
    consumed.watch_consumers(broker)
    for named, came in (("payments.DQ", "payments"), ("payments", "payments.DQ")):
        message: dramatiq.Message[Any] = dramatiq.Message(queue_name=named, actor_name="charge", args=(),
                                                          kwargs={}, options={})
        broker.queues[came].put(message.encode())
        consumer = broker.consume(came, timeout=1000)
        delivered = next(consumer)
        assert delivery.delivered_queue(delivered) == (named, came)
        problem = delivery.queue_problem(*delivery.delivered_queue(delivered), "payments", None, ())
        assert problem == f"it names queue {named!r} but came from queue {came!r}"
        consumed.restore(delivered)
        assert delivered.queue_name == came
        consumer.close()
    genuine = dramatiq.Message(queue_name="payments.DQ", actor_name="charge", args=(), kwargs={}, options={})
    broker.queues["payments.DQ"].put(genuine.encode())
    consumer = broker.consume("payments.DQ", timeout=1000)
    assert delivery.delivered_queue(next(consumer)) == ("payments", "payments")
    consumer.close()
