"""What the API and console show of a job: its whole story, disclosed for the caller (the reads are
`StateStore`'s and `reliable.store.job_history`'s; the overview is `reliable.store.overview`).
Every value goes through `reliable.disclosure.disclose_record` with its record's declared fields."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..access import Principal
from ..control import Control
from ..disclosure import ATTEMPT_FIELDS, EFFECT_FIELDS, EVENT_FIELDS, JOB_FIELDS, Audience, disclose_record
from ..store import Job, JobEvent, Reads
from ..store.job_history import attempt_tracebacks, last_command
from .redaction import audience_for

__all__ = ["MAX_SHOWN_MESSAGE_BYTES", "event_view", "job_detail", "job_message", "job_view"]

#: The largest message (its JSON, in bytes) a job's detail carries whole; above it the detail says
#: how large it is and the whole message is at GET /api/v1/jobs/{job_id}/message (the console's
#: /jobs/{job_id}/message). Listings never carry messages.
MAX_SHOWN_MESSAGE_BYTES = 64 * 1024


def job_view(job: Job, principal: Principal, patterns: Sequence[str], *, message: bool = False) -> dict[str, Any]:
    """A job as the caller may see it: its arguments, checkpoint and last error masked unless the
    caller may act on it (`Principal.sees_secrets_of`; `patterns`: WebConfig.redact). Without its
    message (a listing's row) unless `message`: then cut above MAX_SHOWN_MESSAGE_BYTES (`message`
    None, `message_cut` saying how large it is)."""
    data = disclose_record(job.as_dict(), JOB_FIELDS, audience_for(principal, job, patterns))
    shown = data.pop("message")
    if message:
        size = len(json.dumps(shown, default=str, separators=(",", ":")))
        cut = size > MAX_SHOWN_MESSAGE_BYTES
        data["message"] = None if cut else shown
        data["message_cut"] = {"bytes": size, "limit": MAX_SHOWN_MESSAGE_BYTES} if cut else None
    return data


def job_message(store: Reads, job_id: str, principal: Principal, patterns: Sequence[str]) -> dict[str, Any]:
    """A job's whole message as the caller may see it (what a cut detail leaves out)."""
    job = store.get(job_id)
    audience = audience_for(principal, job, patterns)
    shown: dict[str, Any] = disclose_record(job.as_dict(), JOB_FIELDS, audience)["message"]
    return shown


def event_view(event: JobEvent, audience: Audience) -> dict[str, Any]:
    """An event as `audience` may see it (its checkpoint, error, traceback and detail)."""
    return disclose_record(event.as_dict(), EVENT_FIELDS, audience)


def job_detail(control: Control, job_id: str, principal: Principal, patterns: Sequence[str], *,
               events: Sequence[str] | None = None, since: float | None = None,
               event_limit: int | None = 200, before: int | None = None) -> dict[str, Any]:
    """Everything about one job: the job, its contract, attempts (with the traceback of each failed
    one), effects, the event history (filtered; the `event_limit` most recent, older than the event
    `before` when given; `older_events`: the `before` of the next page, None when this is the
    oldest), the last command an operator ran on it (`last_command`: event, operator, reason, at;
    None when none did) and the actions its state and contract offer."""
    store = control.store
    job = store.get(job_id)
    audience = audience_for(principal, job, patterns)
    history = store.events(job_id, events=events, since=since, limit=event_limit, before=before)
    older = history[0].id if history and event_limit is not None and len(history) == event_limit else None
    if older is not None and not store.events(job_id, events=events, since=since, limit=1, before=older):
        older = None
    command = last_command(store, job_id)
    tracebacks = attempt_tracebacks(store, job_id)
    attempts = [disclose_record({**a.__dict__, "traceback": tracebacks.get((a.attempt_id, a.outcome or ""))},
                                ATTEMPT_FIELDS, audience)
                for a in store.attempts(job_id)]
    contract = control.contract_for(job)
    return {
        "masked": not audience.sees_secrets,
        "job": job_view(job, principal, patterns, message=True),
        "contract": contract.__dict__,
        "attempts": attempts,
        "effects": [disclose_record(e.__dict__, EFFECT_FIELDS, audience) for e in store.effects(job_id)],
        "events": [event_view(e, audience) for e in history],
        "older_events": older,
        "last_command": None if command is None else {
            "event": command.event, "operator": command.operator, "reason": command.reason, "at": command.at},
        "actions": [a.as_dict() | {"permitted": principal.allows(a.command, job.home_queue, job.owner)}
                    for a in control.available(job_id)],
    }
