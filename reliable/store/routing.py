"""Routing: the write that moves a job to wait on another queue, in the transaction that decided it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from .json_text import _detail
from .writes import JobWrite, event_write

__all__ = ["route_write"]


def route_write(job: Mapping[str, Any], queue: str, *, worker_id: str | None = None, operator: str | None = None,
                host: str | None = None) -> JobWrite | None:
    """The write moving a job just written (`job`, its row) to wait on `queue`, with a `routed`
    event saying from which queue to which; None when it waits there already. No transition: the
    caller runs it in the transaction of the write that decided it, guarded by the status it left.
    A job whose message does not name its own queue (not registered by the middleware) stays: it
    could not find its way back (`Job.home_queue`)."""
    message = job["message"]
    message = json.loads(message) if isinstance(message, str) else message
    if job["queue"] == queue or not (isinstance(message, dict) and message.get("queue_name")):
        return None
    write = event_write(str(job["job_id"]), "routed", worker_id=worker_id, operator=operator, host=host,
                        reason=f"waits on queue {queue} (was {job['queue']})",
                        detail=_detail({"from": job["queue"], "to": queue}))
    return dataclasses.replace(write, sources=[str(job["status"])], route_queue=queue)
