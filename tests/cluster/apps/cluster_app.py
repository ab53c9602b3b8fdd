"""A Dramatiq app on `reliable.rabbitmq.ReliableRabbitmqBroker` for the cluster tests.

Settings come from the environment: RELIABLE_TEST_BROKER (URLs separated by `;`: every node of
the cluster), RELIABLE_TEST_STORE, RELIABLE_TEST_QUEUE, RELIABLE_TEST_CONSUMER_TIMEOUT (seconds).
Every run of an actor appends a row to the `ledger` table of the store's database: the test counts
executions there, not in reliable's own tables.
"""

from __future__ import annotations

import logging
import os
import time

import dramatiq
from sqlalchemy import create_engine, text

import reliable
from reliable.rabbitmq import ReliableRabbitmqBroker

logging.getLogger("reliable.rabbitmq").setLevel(logging.DEBUG)  # the re-hold lines, which the test reads

broker = ReliableRabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"].split(";"),
                                consumer_timeout=float(os.environ.get("RELIABLE_TEST_CONSUMER_TIMEOUT", "1800")))
reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"], lease_ttl=5.0, heartbeat_interval=1.0,
                 recovery_interval=1.0, sweep_after=30.0)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
_ledger = create_engine(os.environ["RELIABLE_TEST_STORE"], pool_size=8)


def _record(job_id: str) -> None:
    with _ledger.begin() as conn:
        conn.execute(text("INSERT INTO ledger (job_id, pid, at) VALUES (:job, :pid, :at)"),
                     {"job": job_id, "pid": os.getpid(), "at": time.time()})


@dramatiq.actor(queue_name=QUEUE, time_limit=60_000)
def record() -> None:
    """One effect: a ledger row for this job."""
    _record(reliable.current_job().job_id)


@dramatiq.actor(queue_name=QUEUE, time_limit=60_000)
def slow(seconds: float) -> None:
    """Run for `seconds` (longer than the broker's consumer_timeout in the test), then one ledger row."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)
    _record(reliable.current_job().job_id)
