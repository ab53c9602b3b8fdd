"""The failover test's Dramatiq app: each job writes what it saw committed to a ledger file.

The ledger is a file outside the database on purpose: it survives the failover whatever the
replication lost, so the test can compare what workers saw committed with what the promoted
standby has. One line per fact, appended with one write(2) (O_APPEND: lines never interleave):

    claim  <job_id> <lease_id> <attempt_id>   the claim committed (the body runs after it)
    effect <job_id> <lease_id> <attempt_id>   the effect's record committed first, then it was applied
"""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    lease_ttl=float(os.environ.get("RELIABLE_TEST_LEASE_TTL", "4")),
    heartbeat_interval=float(os.environ.get("RELIABLE_TEST_HEARTBEAT", "1")),
    recovery_interval=float(os.environ.get("RELIABLE_TEST_RECOVERY_INTERVAL", "0.5")),
    replication=os.environ.get("RELIABLE_TEST_REPLICATION", "warn"),
)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
LEDGER = os.environ["RELIABLE_TEST_LEDGER"]


def note(*fields: object) -> None:
    """Append one ledger line."""
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(str(f) for f in fields) + "\n").encode())
    finally:
        os.close(fd)


@dramatiq.actor(queue_name=QUEUE, resumable=True, time_limit=600_000)
def pay(seconds: float) -> None:
    """Record the payment (fenced), then apply it once; checkpoint; take `seconds`."""
    job = reliable.current_job()
    note("claim", job.job_id, job.fencing_token, job.attempt_id)
    if job.checkpoint_value is None:
        if job.record_effect("pay"):  # False: an earlier attempt recorded (and applied) it
            note("effect", job.job_id, job.fencing_token, job.attempt_id)
        job.checkpoint(1)
    time.sleep(seconds)
