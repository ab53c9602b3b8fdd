"""A Dramatiq app for the integration tests: an unchanged app plus reliable's two lines.

Configured by environment variables so each test runs it on its own queue and store.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    policies=os.environ.get("RELIABLE_TEST_POLICY") or None,
    lease_ttl=float(os.environ.get("RELIABLE_TEST_LEASE_TTL", "2")),
    heartbeat_interval=float(os.environ.get("RELIABLE_TEST_HEARTBEAT", "0.5")),
    recovery_interval=float(os.environ.get("RELIABLE_TEST_RECOVERY_INTERVAL", "0.5")),
    sweep_after=float(os.environ.get("RELIABLE_TEST_SWEEP_AFTER", "300")),
    claims_ahead=os.environ.get("RELIABLE_TEST_CLAIMS_AHEAD") == "1",
)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]


@dramatiq.actor(queue_name=QUEUE, resumable=True, time_limit=600_000)
def units(n_units: int, unit_seconds: float) -> None:
    """Apply `n_units` effects, one per unit, checkpointing after each; resume from the checkpoint."""
    job = reliable.current_job()
    start = job.checkpoint_value or 0
    job.record_effect(f"start-{job.attempt}", result=start)
    for unit in range(start, n_units):
        job.record_effect(unit)
        time.sleep(unit_seconds)
        job.checkpoint(unit + 1)


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def hold(release: str, timeout: float) -> None:
    """Keep running (holding the lease) until the file `release` exists: the test decides when it ends."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} was not created within {timeout}s")
        time.sleep(0.05)


@dramatiq.actor(queue_name=QUEUE, fast_path=True, time_limit=600_000)
def fast_hold(release: str, started_dir: str, timeout: float) -> None:
    """`hold` on the fast path (no claim): first leave a marker file of its own in `started_dir`,
    so the test counts the runs, then keep running until the file `release` exists."""
    Path(started_dir, f"{os.getpid()}-{uuid.uuid4().hex}").touch()
    deadline = time.monotonic() + timeout
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} was not created within {timeout}s")
        time.sleep(0.05)


@dramatiq.actor(queue_name=QUEUE)
def noop() -> None:
    """Do nothing (the lost-message test)."""
