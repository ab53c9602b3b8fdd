"""The actors the browser tests drive, declared on a given broker: by the worker app
(console_worker.py) and by the test's producer, as an application and its web process both would."""

from __future__ import annotations

import os
import time
from typing import Any

import dramatiq

import reliable


def declare(broker: dramatiq.Broker, queue: str) -> dict[str, Any]:
    """Declare `pages` and `charge` on `broker` for `queue`; name -> actor."""

    @dramatiq.actor(broker=broker, queue_name=queue, resumable=True, checkpoint_schema=1, time_limit=600_000)
    def pages(account: str, last_page: int, page_seconds: float) -> None:
        """Export `last_page` pages, checkpointing after each: pause, stop and cancel land between pages."""
        job = reliable.current_job()
        for page in range(job.checkpoint_value or 0, last_page):
            time.sleep(page_seconds)  # the page's work
            job.checkpoint(page + 1)

    @dramatiq.actor(broker=broker, queue_name=queue, idempotent=False, max_retries=0, time_limit=60_000)
    def charge(account: str, amount_cents: int) -> None:
        """Charge a card (not idempotent): the first attempt is declined (ValueError: FAILED)."""
        if reliable.current_job().attempt == 1:
            raise ValueError(f"card of {account} declined ({amount_cents} cents)")

    # c28-flows: a workflow node that dies (a timeout, no retry: DEAD) while its flag file exists.
    @dramatiq.actor(broker=broker, queue_name=queue, max_retries=0, time_limit=60_000)
    def flow_node(name: str, fail_flag: str) -> str:
        """One node of the browser tests' workflow: a TimeoutError while `fail_flag` names a file."""
        if fail_flag and os.path.exists(fail_flag):
            raise TimeoutError(f"{name}: the warehouse did not answer")
        return name
    # /c28-flows

    return {"pages": pages, "charge": charge, "flow_node": flow_node}
