"""Store events told as sentences (the live log) and as short phrases (the summary table)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from reliable.inputs import shorten
from reliable.store.records import JobEvent

__all__ = ["page_of", "phrase", "sentence", "story_of"]

Label = Callable[[str | None], str]


def page_of(checkpoint: Any) -> int:
    """The pages done according to a checkpoint (None: none)."""
    return int(checkpoint) if isinstance(checkpoint, int | float) else 0


def _error(event: JobEvent) -> str:
    kind = (event.error_type or "error").rsplit(".", 1)[-1]
    message = (event.error_message or "").splitlines()[0] if event.error_message else ""
    message = shorten(message, 70)
    return f"{event.error_class}: {kind}" + (f" {message!r}" if message else "")


def _audit(event: JobEvent, what: str) -> str:
    who = f"{event.operator or '?'}@{event.host}" if event.host else (event.operator or "?")
    return f"audited in the store: {what} by {who}, reason {event.reason!r}"


def sentence(event: JobEvent, label: Label) -> str | None:
    """One line for the live log, or None for events not worth a line (checkpoints)."""
    d = event.detail or {}
    worker = label(event.worker_id)
    n = event.attempt
    delay = float(d.get("delay") or 0.0)
    match event.event:
        case "enqueued":
            return f"enqueued: PENDING on queue {event.queue}"
        case "claim" if event.checkpoint is not None:
            return (f"claimed by {worker} (attempt {n}, lease {event.lease_id}): resumes at page "
                    f"{page_of(event.checkpoint) + 1}, pages 1-{page_of(event.checkpoint)} are done")
        case "claim":
            return f"claimed by {worker} (attempt {n}, lease {event.lease_id}) -> RUNNING"
        case "retry_scheduled" if d.get("rate_limited"):
            return f"attempt {n}: HTTP 429, Retry-After {delay:g}s honoured -> RETRY_WAIT, next try in {delay:g}s"
        case "retry_scheduled":
            return f"attempt {n} failed ({_error(event)}) -> RETRY_WAIT, backoff {delay:.2f}s"
        case "fail":
            return f"attempt {n} failed ({_error(event)}) -> FAILED at once: a retry cannot fix invalid input"
        case "need_review":
            return (f"attempt {n} failed ({_error(event)}) -> REVIEW: the card may have been charged; "
                    "not idempotent, so never retried automatically")
        case "dead_letter":
            return f"attempt {n} failed ({_error(event)}) -> DEAD: {n} attempts used up"
        case "succeed":
            return f"SUCCEEDED on attempt {n}"
        case "pause_requested":
            return _audit(event, "pause requested") + "; the worker will see it at its next checkpoint"
        case "pause_observed":
            return f"{worker} observed the pause at its checkpoint -> PAUSED after page {page_of(event.checkpoint)}"
        case "resume":
            return _audit(event, "resume") + f" -> PENDING, from its checkpoint (page {page_of(event.checkpoint)})"
        case "lease_expired":
            return (f"lease {d.get('expired_lease')} of {label(d.get('expired_worker'))} expired (no heartbeat) -> "
                    f"recovery requeued it: PENDING, checkpoint page {page_of(event.checkpoint)} kept")
        case "requeue":
            return _audit(event, "requeue") + " -> PENDING with a fresh retry budget"
        case "stale_commit_rejected" if d.get("write") == "heartbeat":
            return None  # a heartbeat racing the attempt's own end (see the demo's report); not part of the story
        case "stale_commit_rejected":
            return (f"a stale {d.get('write')} with old lease {event.lease_id} was refused "
                    f"(the job holds lease {d.get('current_lease_id')}): fencing")
        case "claim_refused":
            return f"a redelivered message was skipped: claim refused ({d.get('reason')})"
        case "duplicate_effect":
            return f"replay detected: unit {d.get('op_key')} had been applied already"
        case "checkpoint" | "redispatched" | "retry_due":
            return None
        case _:
            return f"{event.event} -> {event.to_status}"


def phrase(event: JobEvent, label: Label) -> str | None:
    """A few words for the summary's 'what happened' column, or None."""
    d = event.detail or {}
    delay = float(d.get("delay") or 0.0)
    match event.event:
        case "retry_scheduled" if d.get("rate_limited"):
            return f"429, waited Retry-After {delay:g}s"
        case "retry_scheduled":
            return f"{event.error_class} error, backoff {delay:.1f}s"
        case "fail":
            return f"{event.error_class}: failed fast"
        case "need_review":
            return f"{event.error_class}: REVIEW"
        case "dead_letter":
            return f"DEAD after {event.attempt} attempts"
        case "pause_observed":
            return f"paused after page {page_of(event.checkpoint)}"
        case "claim" if event.checkpoint is not None:
            return f"resumed at page {page_of(event.checkpoint) + 1} on {label(event.worker_id)}"
        case "lease_expired":
            return f"{label(d.get('expired_worker'))} crashed, lease expired"
        case "requeue":
            return f"requeued by {event.operator}"
        case "stale_commit_rejected" if d.get("write") != "heartbeat":
            return "stale write fenced"
        case "succeed":
            return "succeeded"
        case _:
            return None


def story_of(events: Sequence[JobEvent], label: Label) -> str:
    """The job's story in one line."""
    return " -> ".join(p for e in events if (p := phrase(e, label)) is not None) or "-"
