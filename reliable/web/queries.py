"""What the API and console show of a job: its whole story, masked for the caller (the reads are
`StateStore`'s and `reliable.store.job_history`'s; the overview is `reliable.store.overview`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..access import Principal
from ..control import Control
from ..store import JobEvent, StateStore
from ..store.job_history import attempt_tracebacks
from .redaction import masked_job, redact_text, redact_value

__all__ = ["MAX_SHOWN_MESSAGE_BYTES", "event_view", "job_detail", "job_message", "job_view"]

#: The largest message (its JSON, in bytes) a job's detail carries whole; above it the detail says
#: how large it is and the whole message is at GET /api/v1/jobs/{job_id}/message (the console's
#: /jobs/{job_id}/message). Listings never carry messages.
MAX_SHOWN_MESSAGE_BYTES = 64 * 1024


def job_view(job: Any, principal: Principal, patterns: Sequence[str], *, message: bool = False) -> dict[str, Any]:
    """A job as the caller may see it: secrets in its arguments, checkpoint and last error masked
    unless the caller may act on it (`Principal.sees_secrets_of`; `patterns`: WebConfig.redact).
    Without its message (a listing's row) unless `message`: then cut above MAX_SHOWN_MESSAGE_BYTES
    (`message` None, `message_cut` saying how large it is)."""
    data: dict[str, Any] = masked_job(job, principal, patterns).as_dict()
    shown = data.pop("message")
    if message:
        size = len(json.dumps(shown, default=str, separators=(",", ":")))
        cut = size > MAX_SHOWN_MESSAGE_BYTES
        data["message"] = None if cut else shown
        data["message_cut"] = {"bytes": size, "limit": MAX_SHOWN_MESSAGE_BYTES} if cut else None
    return data


def job_message(store: StateStore, job_id: str, principal: Principal, patterns: Sequence[str]) -> dict[str, Any]:
    """A job's whole message as the caller may see it (what a cut detail leaves out)."""
    shown: dict[str, Any] = masked_job(store.get(job_id), principal, patterns).message
    return shown


def event_view(event: JobEvent, masked: bool, patterns: Sequence[str]) -> dict[str, Any]:
    """An event as the caller may see it (`masked`: the caller may not act on its job)."""
    row = event.as_dict()
    if masked:
        row["checkpoint"] = redact_value(row["checkpoint"], patterns)
        row["error_message"] = redact_text(row["error_message"], patterns)
        row["traceback"] = redact_text(row["traceback"], patterns)
    return row


def job_detail(control: Control, job_id: str, principal: Principal, patterns: Sequence[str], *,
               events: Sequence[str] | None = None, since: float | None = None,
               event_limit: int | None = 200) -> dict[str, Any]:
    """Everything about one job: the job, its contract, attempts (with the traceback of each failed
    one), effects, the event history (filtered) and the actions its state and contract offer."""
    store = control.store
    job = store.get(job_id)
    history = store.events(job_id, events=events, since=since, limit=event_limit)
    tracebacks = attempt_tracebacks(store, job_id)
    masked = not principal.sees_secrets_of(job.home_queue, job.owner)
    attempts = [{**a.__dict__, "traceback": tracebacks.get((a.attempt_id, a.outcome or ""))}
                for a in store.attempts(job_id)]
    if masked:
        for attempt in attempts:
            attempt["error_message"] = redact_text(attempt["error_message"], patterns)
            attempt["traceback"] = redact_text(attempt["traceback"], patterns)
    contract = control.contract_for(job)
    event_rows = [event_view(e, masked, patterns) for e in history]
    return {
        "masked": masked,
        "job": job_view(job, principal, patterns, message=True),
        "contract": contract.__dict__,
        "attempts": attempts,
        "effects": [e.__dict__ for e in store.effects(job_id)],
        "events": event_rows,
        "actions": [a.as_dict() | {"permitted": principal.allows(a.command, job.home_queue, job.owner)}
                    for a in control.available(job_id)],
    }
