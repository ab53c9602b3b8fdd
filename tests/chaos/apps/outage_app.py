"""The store-outage test's worker app: a body that records each execution, then waits for its gate.

Each execution appends "job_id lease_id pid" to RELIABLE_OUTAGE_DIR/bodies.log (one O_APPEND write:
atomic across processes), then waits until the file gate-<run> exists (at most 60 s) and returns.
The test opens the gate while the store is down, so every body returns during the outage.

Configured by environment variables: RELIABLE_TEST_BROKER, RELIABLE_TEST_STORE, RELIABLE_TEST_QUEUE,
RELIABLE_OUTAGE_DIR, RELIABLE_TEST_LEASE_TTL, RELIABLE_TEST_HEARTBEAT, RELIABLE_TEST_RECOVERY_INTERVAL.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker, store=os.environ["RELIABLE_TEST_STORE"], metrics=False,
    lease_ttl=float(os.environ["RELIABLE_TEST_LEASE_TTL"]),
    heartbeat_interval=float(os.environ["RELIABLE_TEST_HEARTBEAT"]),
    recovery_interval=float(os.environ["RELIABLE_TEST_RECOVERY_INTERVAL"]),
)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
RECORDS = Path(os.environ["RELIABLE_OUTAGE_DIR"])
GATE_PATIENCE = 60.0


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def outage_body(run: int) -> None:
    """Record this execution, wait for the run's gate, return."""
    job = reliable.current_job()
    line = f"{job.job_id} {job.fencing_token} {os.getpid()}\n".encode()
    fd = os.open(RECORDS / "bodies.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    deadline = time.monotonic() + GATE_PATIENCE
    while not (RECORDS / f"gate-{run}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
