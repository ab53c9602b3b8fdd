"""The worker app of the browser tests (`dramatiq console_worker`), configured by environment variables."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

from browser_actors import declare

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"], lease_ttl=10.0, heartbeat_interval=0.5,
                 recovery_interval=1.0)
dramatiq.set_broker(broker)
declare(broker, os.environ["RELIABLE_TEST_QUEUE"])
