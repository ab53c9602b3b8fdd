"""Re-publishing a job's stored Dramatiq message (recovery, sweeper, operator resume)."""

from __future__ import annotations

from typing import Any

import dramatiq

from .options import OWN_QUEUE
from .store import Job

__all__ = ["declare_queue", "dispatch", "message_for"]


def message_for(job: Job, *, traceback: str | None = None) -> dramatiq.Message[Any]:
    """Rebuild the Dramatiq message a job was enqueued with (same message_id = job_id).

    Like Dramatiq's Retries, a job that was retried carries `retries` (the job's retry count),
    `requeue_timestamp` and, when the caller knows it, the last attempt's `traceback`. A job
    waiting on another queue than its own (a routed retry) names its own in `OWN_QUEUE`.
    """
    data = dict(job.message)
    options = dict(data.get("options") or {})
    # Delivery details of the previous publish must not leak into the new one.
    for key in ("eta", "retries", "traceback", "requeue_timestamp", "redelivered"):
        options.pop(key, None)
    options.pop(OWN_QUEUE, None)
    if job.queue != job.home_queue:  # on a lane: the worker must know whose contract applies
        options[OWN_QUEUE] = job.home_queue
    if job.retry_count:
        options["retries"] = job.retry_count
        options["requeue_timestamp"] = int(job.updated_at * 1000)
        if traceback is not None:
            options["traceback"] = traceback
    return dramatiq.Message(
        queue_name=job.queue,
        actor_name=job.actor,
        args=tuple(data.get("args") or ()),
        kwargs=dict(data.get("kwargs") or {}),
        options=options,
        message_id=job.job_id,
        message_timestamp=int(data.get("message_timestamp") or 0),
    )


def declare_queue(broker: dramatiq.Broker, queue: str) -> None:
    """Declare `queue` on `broker` unless it is (a CLI's broker has declared no actor's queue)."""
    if queue not in broker.get_declared_queues():
        broker.declare_queue(queue)


def dispatch(broker: dramatiq.Broker, job: Job, *, delay_ms: int | None = None) -> None:
    """Publish the job's message on `broker` (the job row must already say it is dispatchable), on
    the queue the job waits on (declared first: a routed retry's queue may be new to this broker)."""
    declare_queue(broker, job.queue)
    broker.enqueue(message_for(job), delay=delay_ms)
