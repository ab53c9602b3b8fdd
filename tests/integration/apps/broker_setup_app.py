"""An app whose broker URL comes from $BROKER_SETUP_URL, with reliable installed the documented way
(`reliable.install(broker, ...)`) on a SQLite store ($BROKER_SETUP_STORE, migrated by the test).
$BROKER_SETUP_KIND "reliable" builds a ReliableRabbitmqBroker, anything else Dramatiq's RabbitmqBroker."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.rabbitmq import ReliableRabbitmqBroker

URL = os.environ["BROKER_SETUP_URL"]
broker = (ReliableRabbitmqBroker(url=URL) if os.environ.get("BROKER_SETUP_KIND") == "reliable"
          else RabbitmqBroker(url=URL))
reliable.install(broker, store=os.environ["BROKER_SETUP_STORE"], recovery=False, metrics=False, json_logs=False)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=os.environ.get("BROKER_SETUP_QUEUE", "broker_setup"))
def noop() -> None:
    """Never sent: the tests are about the boot."""
