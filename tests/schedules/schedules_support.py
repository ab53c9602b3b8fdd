"""Helpers of the schedules suite."""

from __future__ import annotations

from typing import Any

#: The clock's start in these tests: an hour boundary, so minute and quarter-hour slots line up with it.
T0 = 1_900_000_800.0


def template(actor: str = "work", queue: str = "default", **kwargs: Any) -> dict[str, Any]:
    """A job template as `reliable.schedules.boot.build_template` makes one (for store tests without a broker)."""
    return {"queue": queue, "actor": actor, "owner": "team-a", "checkpoint_schema": None,
            "message": {"queue_name": queue, "actor_name": actor, "args": [], "kwargs": kwargs,
                        "options": {"reliable_registered": True}, "message_timestamp": 0}}


def slot_id(store: Any, name: str, slot: float) -> str:
    """The job id of `name`'s slot at `slot` in `store`: read from the schedule's stored key (a test
    may; nothing in reliable lists it)."""
    from sqlalchemy import select

    from reliable.schedules.storage import slot_job_id
    from reliable.store.schema import schedules

    with store.read() as conn:
        key = conn.execute(select(schedules.c.slot_key).where(schedules.c.name == name)).scalar_one()
    assert key, f"schedule {name!r} has no slot key yet (no slot decided)"
    return slot_job_id(key, name, slot)
