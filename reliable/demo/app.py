"""The entry point of the demo's real worker processes: `python -m dramatiq reliable.demo.app:setup -Q ...`.

`reliable demo --broker amqp://... --store postgresql+psycopg://...` starts these processes and
configures them with environment variables (RELIABLE_DEMO_BROKER, _STORE, _POLICY, _STATE,
_PREFIX, _SPEED). Importing this module does nothing; Dramatiq's CLI calls `setup()`.
"""

from __future__ import annotations

import os
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

from .actors import World, declare

__all__ = ["setup"]


def setup() -> None:
    """Build this worker's broker: RabbitMQ, reliable installed with the demo policy, the story's actors."""
    env = os.environ
    broker = RabbitmqBroker(url=env["RELIABLE_DEMO_BROKER"])
    reliable.install(broker, store=env["RELIABLE_DEMO_STORE"], policies=env["RELIABLE_DEMO_POLICY"], metrics=False)
    world = World(Path(env["RELIABLE_DEMO_STATE"]), float(env.get("RELIABLE_DEMO_SPEED", "1")))
    declare(broker, world, env["RELIABLE_DEMO_PREFIX"])
    dramatiq.set_broker(broker)
