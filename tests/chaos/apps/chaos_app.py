"""The chaos suite's worker app: checkpointed jobs whose units have an external, countable effect.

Each unit is guarded by reliable's operation key (`record_effect`, fenced by the lease) and, when
that says it is the first application, written to `chaos_ledger`: a plain table with no unique
constraint standing in for a downstream system. A unit applied twice shows up as two ledger rows,
whatever reliable's own effects table says.

Configured by environment variables: RELIABLE_TEST_BROKER, RELIABLE_TEST_STORE, RELIABLE_TEST_QUEUE,
RELIABLE_CHAOS_POLICY.
"""

from __future__ import annotations

import os
import threading
import time

import dramatiq
import psycopg
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"], policies=os.environ["RELIABLE_CHAOS_POLICY"])
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
LEDGER_DSN = os.environ["RELIABLE_TEST_STORE"].replace("postgresql+psycopg://", "postgresql://", 1)
#: How long a unit keeps trying to reach the ledger while PostgreSQL is down.
LEDGER_PATIENCE = 60.0

_local = threading.local()


def _ledger_insert(job_id: str, unit: int, lease_id: int) -> None:
    deadline = time.monotonic() + LEDGER_PATIENCE
    while True:
        try:
            conn = getattr(_local, "conn", None)
            if conn is None or conn.closed:
                conn = _local.conn = psycopg.connect(LEDGER_DSN, autocommit=True, connect_timeout=5)
            conn.execute("INSERT INTO chaos_ledger (job_id, unit, lease_id, pid) VALUES (%s, %s, %s, %s)",
                         (job_id, unit, lease_id, os.getpid()))
            return
        except psycopg.OperationalError:
            _local.conn = None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dramatiq.actor(queue_name=QUEUE, resumable=True, time_limit=600_000)
def chaos_units(n_units: int, unit_seconds: float) -> None:
    """Apply `n_units` units, checkpointing after each; resume from the checkpoint."""
    job = reliable.current_job()
    start = job.checkpoint_value or 0
    job.record_effect(f"start-{job.attempt}", result=start)
    for unit in range(start, n_units):
        if job.record_effect(unit):
            _ledger_insert(job.job_id, unit, job.fencing_token)
        time.sleep(unit_seconds)
        job.checkpoint(unit + 1)
