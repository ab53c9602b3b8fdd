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
