"""How every surface colours a state: state -> tone (one of a few colours), as data. Pure.

One table for the console's badges (CSS classes `tone-<tone>`, in reliable/web/static/console.css),
the workflow drawing's boxes (`TONE_FILLS`) and any page that shows a job's, a workflow's or a
node's state, so that FAILED is red wherever it is written. The job states come from
`reliable.states`; a workflow's statuses are job state names; a node's extra states (not started,
blocked by an upstream failure...) are listed here. An unknown state is `neutral`.

    tone       states
    running    RUNNING, STOPPING
    waiting    PENDING, RETRY_WAIT, READY
    attention  PAUSED, STOPPED, REVIEW
    good       SUCCEEDED
    bad        FAILED, DEAD, UPSTREAM_FAILED, BLOCKED
    neutral    CANCELLED, SKIPPED, WAITING, anything else
"""

from __future__ import annotations

from collections.abc import Mapping

from .states import JobStatus

__all__ = ["NODE_STATES", "STATE_TONES", "TONES", "TONE_FILLS", "tone"]

#: The tones, each a CSS class `tone-<name>` and a fill of the workflow drawing.
TONES: tuple[str, ...] = ("running", "waiting", "attention", "good", "bad", "neutral")

S = JobStatus
#: A workflow node's states besides its job's (reliable.workflows.planning).
NODE_STATES: tuple[str, ...] = ("READY", "WAITING", "BLOCKED", "UPSTREAM_FAILED", "SKIPPED")

#: The tone of each state (job states, workflow statuses, node states).
STATE_TONES: Mapping[str, str] = {
    S.RUNNING: "running", S.STOPPING: "running",
    S.PENDING: "waiting", S.RETRY_WAIT: "waiting", "READY": "waiting",
    S.PAUSED: "attention", S.STOPPED: "attention", S.REVIEW: "attention",
    S.SUCCEEDED: "good",
    S.FAILED: "bad", S.DEAD: "bad", "UPSTREAM_FAILED": "bad", "BLOCKED": "bad",
    S.CANCELLED: "neutral", "SKIPPED": "neutral", "WAITING": "neutral",
}

#: The box fill of each tone in the workflow drawing (SVG: the stylesheet's background colours).
TONE_FILLS: Mapping[str, str] = {
    "running": "#d6e6ff", "waiting": "#eef3ff", "attention": "#fff1c2", "good": "#d6f5d6", "bad": "#ffc9c9",
    "neutral": "#e4e4e4",
}


def tone(state: object) -> str:
    """The tone of `state` (a JobStatus or its name; `neutral` when unknown)."""
    return STATE_TONES.get(str(state), "neutral")
