"""Another middleware's skip is final: the job ends as Dramatiq ends the message.

In Dramatiq a middleware that raises `SkipMessage` from `before_process_message` (dramatiq-abort's
cancel, `AgeLimit`'s expiry, an app's own de-duplication) has the message acknowledged and never
run; `AgeLimit` fails the message first, so it is nacked (dead-lettered) instead. With reliable
installed the job ends the same way, with an event naming the middleware and its reason:

- `skipped` (-> CANCELLED), or `skipped_failed` (-> FAILED) when the message was failed;
- before reliable's claim (the other middleware runs first, or reliable took the fast path) the
  job is PENDING, or RETRY_WAIT for a retry's delivery: a compare-and-set on the version read;
- after it (reliable claimed: RUNNING) the write is fenced by the lease (`StateStore.finish`).

Only the job's own message ends it (`is_its_message`): its digest, and `message_timestamp`, which
AgeLimit decides on and the digest leaves out. A copy that differs (an old-timestamp copy AgeLimit
expires) leaves a waiting job as it was; skipped after reliable's claim, the claim is handed back
(`claim_returned`), and the job's real message still runs.

A delivery of a job in any other state (a duplicate of a finished job, a job running elsewhere, a
paused one) changes nothing. reliable's own skips (refused claims, limits deferrals, failed claims)
are not final: the middleware marks them and they are left as they were.

Who skipped: Dramatiq emits `after_skip_message` inside its `except SkipMessage:` block
(dramatiq/worker.py, `Worker.process_message`), so the exception being handled is the skip; the
innermost frame of its traceback whose `self` is a `dramatiq.Middleware` is the middleware that
raised it. dramatiq-abort's abort of a RUNNING job interrupts the actor with its `Abort`
exception: `aborted_by` names it, and the attempt ends `aborted` (-> CANCELLED), not retried.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from dramatiq.middleware import Middleware, SkipMessage

from ..errors import TransitionRefused
from ..states import Event, JobStatus
from ..store import Job, StateStore
from .delivery import is_registered_message

__all__ = ["ABORT_EXCEPTION", "UNKNOWN_MIDDLEWARE", "Skip", "aborted_by", "end_unclaimed", "is_its_message", "skip_of"]

logger = logging.getLogger("reliable.middleware")

#: The name a skip is recorded with when no middleware raised it (an actor's own SkipMessage).
UNKNOWN_MIDDLEWARE = "unknown middleware"
#: dramatiq-abort's interrupt of a running actor, by its class path (dramatiq-abort is optional).
ABORT_EXCEPTION = "dramatiq_abort.abort_manager.Abort"
#: The middleware that raises it.
_ABORT_MIDDLEWARE = "Abortable"
#: Where a delivery skipped before reliable's claim may end its job from.
_UNCLAIMED = frozenset({JobStatus.PENDING, JobStatus.RETRY_WAIT})


@dataclass(frozen=True)
class Skip:
    """One skipped delivery: who skipped it, why, and whether the message was failed."""

    middleware: str
    reason: str | None
    failed: bool
    #: reliable raised it itself (a refused claim, a limits deferral): nothing to end.
    own: bool

    @property
    def event(self) -> Event:
        """The event that ends the job."""
        return Event.SKIPPED_FAILED if self.failed else Event.SKIPPED

    def detail(self) -> dict[str, Any]:
        """The event's detail."""
        return {"middleware": self.middleware, "reason": self.reason}

    def describe(self) -> str:
        """For a log line: `by AgeLimit (Message age limit exceeded)`."""
        return f"by {self.middleware}" + (f" ({self.reason})" if self.reason else "")


def skip_of(message: Any, exception: BaseException | None, reliable: Middleware, *, marked_own: bool) -> Skip:
    """The skip of `message`, from the exception Dramatiq is handling (`sys.exc_info()[1]` in
    `after_skip_message`). `reliable`: the ReliableMiddleware instance; `marked_own`: it marked
    this delivery as skipped by itself."""
    failed = bool(getattr(message, "failed", False))
    if not isinstance(exception, SkipMessage):
        return Skip(UNKNOWN_MIDDLEWARE, None, failed, own=marked_own)
    raiser = _raiser(exception.__traceback__)
    reason = str(exception) or None
    if raiser is None:
        return Skip(UNKNOWN_MIDDLEWARE, reason, failed, own=marked_own)
    return Skip(type(raiser).__name__, reason, failed, own=marked_own or raiser is reliable)


def _raiser(tb: TracebackType | None) -> Middleware | None:
    """The innermost frame's `self` that is a Dramatiq middleware, along a traceback."""
    found = None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if isinstance(candidate, Middleware):
            found = candidate
        tb = tb.tb_next
    return found


def end_unclaimed(store: StateStore, message: Any, skip: Skip) -> Job | None:
    """End the job of a delivery skipped before any claim (compare-and-set on the version read).

    Only a job still waiting for this delivery (PENDING, RETRY_WAIT) is ended; None when the job
    is unknown, in another state, or moved on meanwhile.
    """
    job = store.find(message.message_id)
    if job is None or job.status not in _UNCLAIMED:
        return None
    if not is_its_message(job, message):  # a forged delivery skipped first must not end the real job
        logger.warning("job %s: a delivery that is not its message was skipped %s; the job is left %s",
                       job.job_id, skip.describe(), job.status.value)
        return None
    try:
        ended = store.transition(job.job_id, skip.event, expected_version=job.version, detail=skip.detail())
    except TransitionRefused as exc:
        logger.info("job %s: skipped %s, but it moved on meanwhile (%s)", job.job_id, skip.describe(), exc)
        return None
    logger.warning("job %s: skipped %s before its claim; it ended %s", job.job_id, skip.describe(),
                   ended.status.value)
    return ended


def is_its_message(job: Job, message: Any) -> bool:
    """Whether `message` is `job`'s own, as far as a skip is concerned: what the digest covers
    (`delivery.is_registered_message`), and what another middleware decides on beyond it:
    `message_timestamp` (AgeLimit's age). Every delivery of a job carries the timestamp it was
    registered with (a retry's and a re-dispatch's too: reliable.dispatch.message_for), so a copy
    with another one, skipped for it, cannot end the job whose real message still waits."""
    if not is_registered_message(job, message):
        return False
    registered = job.message.get("message_timestamp") if isinstance(job.message, dict) else None
    return registered is None or registered == getattr(message, "message_timestamp", None)


def aborted_by(exception: BaseException | None) -> str | None:
    """The middleware whose interrupt `exception` is (dramatiq-abort's Abort), or None."""
    if exception is None:
        return None
    for cls in type(exception).__mro__:
        if f"{cls.__module__}.{cls.__qualname__}" == ABORT_EXCEPTION:
            return _ABORT_MIDDLEWARE
    return None
