"""A Dramatiq app for the retry-routing integration test: one actor on the job's own queue.

Every worker process runs this module; `-Q` says which queue it consumes (the own queue, or the
slow lane the policy routes retries to). Each attempt leaves a marker file naming the worker's
role, so the test knows where every attempt ran.
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
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    policies=os.environ["RELIABLE_TEST_POLICY"],
    lease_ttl=2.0,
    heartbeat_interval=0.5,
    recovery_interval=0.5,
    sweep_after=300.0,
)
dramatiq.set_broker(broker)

ROLE = os.environ["RELIABLE_TEST_ROLE"]
OUT = Path(os.environ["RELIABLE_TEST_OUT"])


@dramatiq.actor(queue_name=os.environ["RELIABLE_TEST_HOME"], time_limit=600_000)
def routed(kind: str) -> None:
    """The first attempt fails with a class the policy routes to the slow lane: `long` asks for a
    20 min retry (past the broker's delay limit: the recovery loop publishes it), the others time
    out. Then `hang` blocks its second attempt (the test kills its worker); every other attempt succeeds."""
    job = reliable.current_job()
    (OUT / f"{job.job_id}-{job.attempt}").write_text(ROLE)
    if job.attempt == 1:
        if kind == "long":
            raise dramatiq.Retry(delay=20 * 60 * 1000)
        raise TimeoutError("slow upstream")
    if kind == "hang" and job.attempt == 2:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # killed long before
            time.sleep(0.05)
        raise RuntimeError("the test did not kill this worker")
