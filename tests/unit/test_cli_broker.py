"""The broker CLI commands publish on: declared as the application's workers declare their queues."""

from __future__ import annotations

import uuid

import dramatiq
import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from reliable.cli.common import ENV_BROKER_DELIVERY_LIMIT, ENV_BROKER_QUEUES, rabbitmq_broker
from reliable.errors import ConfigError
from reliable.rabbitmq import ReliableRabbitmqBroker

from support import RABBITMQ_URL, port_open, require_service


def test_classic_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_BROKER_QUEUES, raising=False)
    broker = rabbitmq_broker("amqp://guest:guest@127.0.0.1:5672/")
    assert type(broker) is RabbitmqBroker


def test_quorum_takes_the_delivery_limit_and_several_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BROKER_QUEUES, "Quorum")
    monkeypatch.setenv(ENV_BROKER_DELIVERY_LIMIT, "7")
    broker = rabbitmq_broker("amqp://a:5672/;amqp://b:5673/")
    assert isinstance(broker, ReliableRabbitmqBroker)
    assert broker.quorum and broker.delivery_limit == 7
    assert [p.port for p in broker.parameters] == [5672, 5673]


@pytest.mark.parametrize(("name", "value", "says"), [
    (ENV_BROKER_QUEUES, "stream", "RELIABLE_BROKER_QUEUES must be 'classic' or 'quorum'"),
    (ENV_BROKER_DELIVERY_LIMIT, "many", "RELIABLE_BROKER_DELIVERY_LIMIT must be an integer"),
])
def test_bad_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str) -> None:
    monkeypatch.setenv(ENV_BROKER_QUEUES, "quorum")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=says):
        rabbitmq_broker("amqp://127.0.0.1:5672/")


@pytest.mark.integration
def test_a_command_publishes_on_the_workers_quorum_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    queue = f"t_cli_{uuid.uuid4().hex[:10]}"
    workers = ReliableRabbitmqBroker(url=RABBITMQ_URL)  # what the application's workers declared
    workers.declare_queue(queue)
    monkeypatch.setenv(ENV_BROKER_QUEUES, "quorum")
    command = rabbitmq_broker(RABBITMQ_URL)
    try:
        command.enqueue(dramatiq.Message(queue_name=queue, actor_name="noop", args=(), kwargs={}, options={}))
        connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
        try:
            assert connection.channel().queue_declare(queue, passive=True).method.message_count == 1
        finally:
            connection.close()
    finally:
        command.close()
        workers.close()
        connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
        for suffix in ("", ".DQ", ".XQ"):
            connection.channel().queue_delete(queue + suffix)
        connection.close()
