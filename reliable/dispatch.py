"""Re-publishing a job's stored Dramatiq message (recovery, sweeper, operator resume)."""

from __future__ import annotations

from typing import Any

import dramatiq

from .store import Job

__all__ = ["dispatch", "message_for"]


def message_for(job: Job) -> dramatiq.Message[Any]:
    """Rebuild the Dramatiq message a job was enqueued with (same message_id = job_id)."""
    data = dict(job.message)
    options = dict(data.get("options") or {})
    # Delivery details of the previous publish must not leak into the new one.
    for key in ("eta", "retries", "traceback", "requeue_timestamp", "redelivered"):
        options.pop(key, None)
    return dramatiq.Message(
        queue_name=job.queue,
        actor_name=job.actor,
        args=tuple(data.get("args") or ()),
        kwargs=dict(data.get("kwargs") or {}),
        options=options,
        message_id=job.job_id,
        message_timestamp=int(data.get("message_timestamp") or 0),
    )


def dispatch(broker: dramatiq.Broker, job: Job, *, delay_ms: int | None = None) -> None:
    """Publish the job's message on `broker` (the job row must already say it is dispatchable)."""
    broker.enqueue(message_for(job), delay=delay_ms)
