"""The store-outage test's worker app: bodies that record each execution, then wait for their gate.

Each execution appends "job_id lease_id pid" to RELIABLE_OUTAGE_DIR/bodies.log (one O_APPEND write:
atomic across processes), then waits until the file gate-<run> exists (at most 60 s). The test
opens the gate while the store is down: `outage_body` then returns during the outage;
`outage_units` applies its units during it (each appended to units.log, then `record_effect` and
`checkpoint`, which must wait for the store rather than fail the attempt).

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


UNITS = 3


def _append(name: str, line: str) -> None:
    fd = os.open(RECORDS / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _start(run: int) -> reliable.JobContext:
    job = reliable.current_job()
    _append("bodies.log", f"{job.job_id} {job.fencing_token} {os.getpid()}\n")
    deadline = time.monotonic() + GATE_PATIENCE
    while not (RECORDS / f"gate-{run}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return job


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def outage_body(run: int) -> None:
    """Record this execution, wait for the run's gate, return."""
    _start(run)


@dramatiq.actor(queue_name=QUEUE, time_limit=600_000)
def outage_units(run: int) -> None:
    """Record this execution, wait for the gate, then apply the units from the last checkpoint on."""
    job = _start(run)
    for unit in range(job.checkpoint_value or 0, UNITS):
        _append("units.log", f"{job.job_id} {unit}\n")  # the side effect
        job.record_effect(unit)
        job.checkpoint(unit + 1)
