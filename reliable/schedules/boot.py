"""At worker boot, where the actors are imported: each schedule's job template, then its row.

The template is the job a slot registers, built as for any enqueue (`reliable.worker.registration`:
the actor's queue, owner and declared contract travel in the message options), so that any process with only
the store and a broker (another worker, `reliable schedules run`, `reliable schedules trigger`)
can fire a slot without importing the actor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import dramatiq

from ..store import StateStore
from .model import Schedule
from .storage import declare

if TYPE_CHECKING:
    from ..registrar import Registrar

__all__ = ["build_template", "declare_schedules"]

#: Options that belong to one message, never to the template (each slot gets its own).
_PER_MESSAGE = ("traceparent", "trace_id")


def build_template(installed: Registrar, broker: dramatiq.Broker, schedule: Schedule) -> dict[str, Any]:
    """The job template of `schedule`; ConfigError naming the schedule when its actor is unknown or
    not tracked (`reliable=False`: nothing would record its slots' jobs)."""
    actor = installed.registration.tracked_actor(broker, schedule.actor, who=f"schedule {schedule.name!r}")
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=actor.queue_name, actor_name=actor.actor_name, args=tuple(schedule.args),
        kwargs=dict(schedule.kwargs), options={})
    prepared = installed.registration.new_job(broker, message, None)
    assert prepared is not None  # a tracked actor's message without eta always makes a job
    job = prepared[0]
    data = dict(job.message)
    data.pop("message_id", None)
    data.pop("message_timestamp", None)
    data["options"] = {k: v for k, v in dict(data.get("options") or {}).items() if k not in _PER_MESSAGE}
    return {"queue": job.queue, "actor": job.actor, "message": data, "owner": job.owner,
            "checkpoint_schema": job.checkpoint_schema}


def declare_schedules(store: StateStore, installed: Registrar, broker: dramatiq.Broker,
                      schedules: Sequence[Schedule]) -> list[str]:
    """Store every schedule with its template (all templates first: one bad schedule stores none);
    the names of those that were new."""
    templates = [(schedule, build_template(installed, broker, schedule)) for schedule in schedules]
    return [schedule.name for schedule, template in templates if declare(store, schedule, template)]
