"""What an attempt's end writes to its job: a pure derivation, no broker, no store, no clock.

The only tables mapping how an attempt ended to the event recorded for it:
- `OBSERVED`: reliable's own interrupts (the control flags an operator set, seen by the running
  attempt) -> pause_observed, stop_observed, cancel_observed, force_stop. No failure callback follows.
- `ACTIONS`: the policy's decision for a failed attempt -> retry, fail, need_review, dead_letter, halt.
  Any other action is a bug in the policy: ValueError.
  (An attempt whose worker crashed ends in recovery: `reliable.recovery.CRASH_EVENTS`.)
- `states.FAILED_FOR_GOOD`: the outcomes that are final failures in Dramatiq's sense (the message
  is failed, nacked, as Dramatiq's Retries would).

Rules (`attempt_ended`):
- success -> succeed.
- a LeaseLostInterrupt -> nothing is written: the attempt was abandoned, its lease belongs to another.
- an interrupt in `OBSERVED` -> its event, detail {"interrupt": class name}.
- another middleware's abort of the running actor (dramatiq-abort's Abort, `skips.aborted_by`) ->
  aborted (CANCELLED), detail {"interrupt", "middleware"}: not a failure the policy retries.
- a delivery another middleware skipped after the claim (`skipped`) -> skipped, or skipped_failed
  when it failed the message (AgeLimit), detail {"middleware", "reason"}.
- anything else (an exception, or an interrupt reliable does not own, e.g. Dramatiq's TimeLimit):
  the policy decides (`failed`): the action's event, the error (message masked by the policy engine), the decision's
  detail; a retry waits `decision.delay` on the decision's queue (None: where it waits already);
  when the retries ran out, what the on_retry_exhausted continuation is told.
The store then honours any stop, cancel or pause requested meanwhile (states.honour_requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import JobCancelled, JobForceStopped, JobInterrupted, JobPaused, JobStopped, LeaseLostInterrupt
from ..policy import Decision
from ..states import FAILED_FOR_GOOD, Event, JobStatus
from ..store import ErrorInfo
from .skips import Skip, aborted_by

__all__ = [
    "ACTIONS",
    "OBSERVED",
    "Outcome",
    "attempt_ended",
    "failed",
    "fails_message",
    "needs_decision",
    "retry_queue",
    "skipped",
]

#: The outcome each of reliable's own interrupts reports.
OBSERVED: dict[type[BaseException], Event] = {
    JobPaused: Event.PAUSE_OBSERVED, JobStopped: Event.STOP_OBSERVED, JobCancelled: Event.CANCEL_OBSERVED,
    JobForceStopped: Event.FORCE_STOP,
}
#: The event of each policy action for a failed attempt.
ACTIONS: dict[str, Event] = {
    "retry": Event.RETRY, "fail": Event.FAIL, "review": Event.NEED_REVIEW, "dead": Event.DEAD_LETTER,
    "halt": Event.HALT,
}


@dataclass(frozen=True)
class Outcome:
    """The write that ends an attempt: `StateStore.finish`'s event and arguments."""

    event: Event
    error: ErrorInfo | None = None
    retry_delay: float | None = None
    detail: dict[str, Any] | None = None
    #: The queue a retry moves the job to (None: it stays where it waits).
    queue: str | None = None
    #: For the on_retry_exhausted continuation when the retries ran out: {"retries", "max_retries"}.
    exhausted: dict[str, Any] | None = None


def attempt_ended(exception: BaseException | None) -> Outcome | None:
    """The outcome of an attempt that returned or was interrupted, without the policy; None when
    nothing is written (a lost lease) or when the policy must decide (`needs_decision`)."""
    if exception is None:
        return Outcome(Event.SUCCEED)
    observed = OBSERVED.get(type(exception)) if isinstance(exception, JobInterrupted) else None
    if observed is not None:
        return Outcome(observed, detail={"interrupt": type(exception).__name__})
    aborter = aborted_by(exception)
    if aborter is not None:  # another middleware's abort (dramatiq-abort): ended, not retried
        return Outcome(Event.ABORTED, detail={"interrupt": type(exception).__name__, "middleware": aborter})
    return None


def needs_decision(exception: BaseException | None) -> bool:
    """Whether the policy decides this attempt's outcome (a failure, not a success, a lost lease or
    one of reliable's own interrupts)."""
    if exception is None or isinstance(exception, LeaseLostInterrupt) or aborted_by(exception) is not None:
        return False
    return not (isinstance(exception, JobInterrupted) and type(exception) in OBSERVED)


def failed(decision: Decision, *, traceback: str | None, retries: int, max_attempts: int,
           home_queue: str, queue: str) -> Outcome:
    """The outcome of a failed attempt the policy decided: `retries` counts this failure, the job
    waits on `queue` and belongs to `home_queue`."""
    event = ACTIONS.get(decision.action)
    if event is None:
        raise ValueError(f"policy decision {decision.action!r} is not valid for a failed attempt")
    exhausted = {"retries": retries - 1, "max_retries": max_attempts - 1} if decision.retries_exhausted else None
    # The decision's message is masked where it is made (PolicyEngine.decide): the error and the
    # event's detail carry the same text.
    error = ErrorInfo(decision.error_class, decision.exception_type, decision.message, traceback=traceback)
    return Outcome(event, error=error, retry_delay=decision.delay if decision.action == "retry" else None,
                   detail=decision.as_detail(), queue=retry_queue(decision, home_queue=home_queue, queue=queue),
                   exhausted=exhausted)


def retry_queue(decision: Decision, *, home_queue: str, queue: str) -> str | None:
    """The queue a retry moves the job to (docs/policies.md, "Retry routing"): the decision's, else
    the job's own; None when it waits there already (the common case keeps its single write)."""
    if decision.action != "retry":
        return None
    lane = decision.queue or home_queue
    return None if lane == queue else str(lane)


def skipped(skip: Skip) -> Outcome:
    """A claimed job another middleware skipped before it ran: ended, as Dramatiq acks a skipped
    message (skipped -> CANCELLED; skipped_failed -> FAILED when the middleware failed the message)."""
    return Outcome(skip.event, detail=skip.detail())


def fails_message(status: JobStatus, decision: Decision | None) -> bool:
    """Whether the message of a job the policy left in `status` is failed (nacked), as Dramatiq's
    Retries would: Results stores the exception, StubBroker.join(fail_fast=True) raises it."""
    return status in FAILED_FOR_GOOD and decision is not None
