"""What happens to side effects when a job is cancelled: run its compensation, or say they remain.

Used by the worker (cancel observed at a checkpoint), the recovery loop (a cancel whose worker
died) and operator commands (cancel of a job that was not running). Never claims a rollback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dramatiq

from .dispatch import declare_queue
from .store import Job, Reads

__all__ = ["compensate"]


def compensate(store: Reads, broker: dramatiq.Broker | None, job: Job, actor: str | None,
               **audit: Any) -> str | None:
    """Enqueue `actor`(job_id) if the cancelled job applied effects; return a warning, or None.

    Records `compensation_enqueued`, `compensation_pending` (no broker, or the publish failed) or
    `partial_effects_remain` (effects but no compensation declared) on the job. `audit` carries
    operator, reason and host for operator commands.
    """
    effects = store.effects(job.job_id)
    if not effects:
        return None
    detail: Mapping[str, Any] = {"actor": actor, "effects": len(effects)}
    if actor is None:
        store.record_event(job.job_id, "partial_effects_remain", **audit, detail=detail)
        return f"{len(effects)} side effects were applied and no compensation is declared: they remain"
    if broker is None:
        store.record_event(job.job_id, "compensation_pending", **audit,
                           detail={**detail, "why": "no broker to enqueue it on"})
        return f"compensation {actor} is pending: no broker was given to enqueue it"
    message: dramatiq.Message[Any] = dramatiq.Message(queue_name=job.home_queue, actor_name=actor, args=(job.job_id,),
                                                      kwargs={}, options={})
    try:
        declare_queue(broker, job.home_queue)
        broker.enqueue(message)
    except Exception as exc:
        store.record_event(job.job_id, "compensation_pending", **audit,
                           detail={**detail, "why": f"enqueue failed: {exc}"})
        return f"compensation {actor} could not be enqueued ({exc}); recorded as pending"
    store.record_event(job.job_id, "compensation_enqueued", **audit,
                       detail={**detail, "message_id": message.message_id})
    return None
