"""The silent-network test's worker app: a body that records each execution and outlives its lease.

Each execution appends "job_id lease_id pid" to RELIABLE_SILENT_DIR/bodies.log (one O_APPEND
write), then waits until the file release-<lease_id> exists (at most 60 s). An interrupt (the lease
given up after a TTL without renewal) is caught and recorded in interrupts.log, and the body then
returns: as a thread the interrupt cannot reach would, so that its late commit is what the test
sees refused.

Configured by environment variables: RELIABLE_TEST_BROKER, RELIABLE_TEST_STORE, RELIABLE_TEST_QUEUE,
RELIABLE_SILENT_DIR, RELIABLE_TEST_LEASE_TTL, RELIABLE_TEST_HEARTBEAT, RELIABLE_TEST_RECOVERY_INTERVAL.
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
    broker, store=os.environ["RELIABLE_TEST_STORE"], metrics=False, json_logs=False,
    lease_ttl=float(os.environ["RELIABLE_TEST_LEASE_TTL"]),
    heartbeat_interval=float(os.environ["RELIABLE_TEST_HEARTBEAT"]),
    recovery_interval=float(os.environ["RELIABLE_TEST_RECOVERY_INTERVAL"]),
    interrupt_unrenewed=True,
)
dramatiq.set_broker(broker)

RECORDS = Path(os.environ["RELIABLE_SILENT_DIR"])


def _append(name: str, line: str) -> None:
    fd = os.open(RECORDS / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@dramatiq.actor(queue_name=os.environ["RELIABLE_TEST_QUEUE"], time_limit=600_000)
def silent_body() -> None:
    """Record this execution, wait for its release file, return (an interrupt recorded, then ignored)."""
    job = reliable.current_job()
    _append("bodies.log", f"{job.job_id} {job.fencing_token} {os.getpid()}\n")
    deadline = time.monotonic() + 60.0
    try:
        while not (RECORDS / f"release-{job.fencing_token}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    except BaseException as exc:  # a thread the interrupt cannot stop, on purpose
        _append("interrupts.log", f"{job.job_id} {job.fencing_token} {type(exc).__name__}\n")
