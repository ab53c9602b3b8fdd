"""A Dramatiq app with reliable installed, run under `reliable worker` by tests/supervisor.

Configured by environment variables (its own queue and store per test). SUP_TEST_EXIT_AT_BOOT=N makes
every child exit with code N while importing it (a crash loop); SUP_TEST_BROKEN=1 makes the import fail;
SUP_TEST_SLEEP_AT_BOOT=S makes the import take S seconds (a child that never gets ready).
"""

from __future__ import annotations

import os
import time

if os.environ.get("SUP_TEST_SLEEP_AT_BOOT"):
    time.sleep(float(os.environ["SUP_TEST_SLEEP_AT_BOOT"]))
if os.environ.get("SUP_TEST_EXIT_AT_BOOT"):
    os._exit(int(os.environ["SUP_TEST_EXIT_AT_BOOT"]))
if os.environ.get("SUP_TEST_BROKEN"):
    raise ImportError("supervised_app: broken on purpose (SUP_TEST_BROKEN)")

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"], lease_ttl=2.0, heartbeat_interval=0.5,
                 recovery_interval=0.5, sweep_after=300.0)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
_held: list[bytes] = []


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def work(seconds: float) -> None:
    """Take `seconds`."""
    time.sleep(seconds)


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def grow(megabytes: int) -> None:
    """Keep `megabytes` MB referenced (touched, so resident) for the rest of the process's life."""
    _held.append(b"\x01" * (megabytes * 1024 * 1024))
