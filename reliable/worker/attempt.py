"""After the run: what Dramatiq's after_process_message and after_skip_message hooks hand over.

`Attempt.after_run`: a durable attempt's outcome is committed fenced by its lease
(`completion`), then its lease is released; a fast-path run (`FastEnd`) commits its success in
one compare-and-set, or claims the job so that the durable path decides a failure as for any
attempt. `Skipped.skipped`: another middleware's skip ends the job (reliable.worker.skips);
reliable's own changes nothing, a claim held ahead for it goes back.

Each step is built once per middleware with the few collaborators it uses: none reads the middleware.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import dramatiq

from ..errors import ClaimRefused
from ..states import JobStatus
from . import spans
from .context import JobContext, _fast_run
from .delivery import fields
from .leases import new_attempt_id
from .skips import is_its_message

if TYPE_CHECKING:
    from ..tracing import Tracing
    from .acks import HeldAcks
    from .claim import DurableClaim
    from .completion import Completion
    from .context import Delivery
    from .leases import Leases
    from .registration import Registration
    from .runtime import Runtime
    from .skips import Skip

__all__ = ["Attempt", "FastEnd", "Skipped", "take", "take_fast"]

logger = logging.getLogger("reliable.middleware")


class Attempt:
    """A delivery ran: this thread's delivery, the leases, the completion, the fast path's end and
    the attempt spans."""

    __slots__ = ("completion", "fast", "leases", "thread", "tracing")

    def __init__(self, thread: Delivery, leases: Leases, completion: Completion, fast: FastEnd,
                 tracing: Tracing | None) -> None:
        self.thread, self.leases, self.completion, self.fast, self.tracing = thread, leases, completion, fast, tracing

    def after_run(self, broker: dramatiq.Broker, message: Any, result: Any, exception: BaseException | None) -> None:
        """Commit the attempt's outcome, fenced by its lease; then end the attempt's span."""
        thread = self.thread
        try:
            if take_fast(thread, message):
                self.fast.done(broker, message, thread.fast_attempt, exception)
            elif (context := take(thread, message)) is not None:
                handed_over, leases = False, self.leases
                try:
                    context.leave()
                    completion = self.completion
                    completion.note_unrecorded_effects(context)
                    # An attempt holding a limits slot waits for its commit: the slot is tied to the lease.
                    release = functools.partial(leases.release, context) if thread.limits is None else None
                    handed_over = completion.complete(broker, message, context, result, exception, release=release)
                finally:
                    # Only now: the lease is renewed while the final write may still be retried (a slow
                    # or blipping store must not let recovery reclaim a job that already finished). A
                    # success handed over to the group commit releases it once committed.
                    if not handed_over:
                        leases.release(context)
        finally:
            thread.limits = None  # its slot frees itself: the attempt ended (reliable.limits)
            if self.tracing is not None:
                spans.end(self.tracing, exception)


class FastEnd:
    """A fast-path run ended: the process's store (`runtime`), the held acknowledgements, the
    leases, the completion (for a failure) and the attempt spans."""

    __slots__ = ("acks", "completion", "leases", "runtime", "tracing")

    def __init__(self, runtime: Runtime, acks: HeldAcks, leases: Leases, completion: Completion,
                 tracing: Tracing | None) -> None:
        self.runtime, self.acks, self.leases, self.completion, self.tracing = runtime, acks, leases, completion, tracing

    def done(self, broker: dramatiq.Broker, message: Any, attempt_id: str | None,
             exception: BaseException | None) -> None:
        """Commit a success in one compare-and-set; claim a failure and let the durable path decide
        it (policy, retry, callbacks) as for any attempt. `attempt_id`: the one chosen for the run."""
        # One for every try: a retry after a lost reply finds its commit.
        attempt_id = attempt_id or new_attempt_id()
        if exception is None:
            # Nothing is written before a fast-path run, so a run cut short by a crash leaves no
            # trace; the broker's redelivered flag says an earlier run may have happened.
            detail = {"redelivered": True} if getattr(message, "redelivered", False) else None
            if not self._commit_later(message, attempt_id, detail):
                self._succeed(message, attempt_id, detail)
            return
        context = self.claim_after_run(message, attempt_id, "failure")
        if context is None:
            return
        try:
            self.completion.complete(broker, message, context, None, exception)
        finally:
            self.leases.release(context)

    def _succeed(self, message: Any, attempt_id: str, detail: dict[str, Any] | None) -> None:
        """Commit a fast-path success and wait for it (the store's retry loop while it cannot be reached)."""
        runtime, job_id = self.runtime, message.message_id
        committed = runtime.with_store_retry("fast_succeed", lambda: runtime.store.fast_committed(
            job_id, worker_id=runtime.worker_id, attempt_id=attempt_id, detail=detail))
        if not committed:
            logger.warning("job %s: fast-path result discarded, the job left PENDING during the run", job_id)
            message.options["store_results"] = False

    def _commit_later(self, message: Any, attempt_id: str, detail: dict[str, Any] | None) -> bool:
        """Submit a fast-path success to the group commit with the delivery's acknowledgement held
        until it has committed (reliable.worker.acks); False: not here, wait for it instead."""
        runtime = self.runtime
        return self.acks.hand_over(message, lambda done: runtime.store.fast_commit_later(
            message.message_id, worker_id=runtime.worker_id, attempt_id=attempt_id, detail=detail, done=done),
            settle=lambda: self._succeed(message, attempt_id, detail))

    def claim_after_run(self, message: Any, attempt_id: str, what: str) -> JobContext | None:
        """Claim a fast-path job whose run ended without a success, so the durable path decides
        what follows (held in the heartbeat while it does). Only from PENDING: a job that moved on
        meanwhile (a duplicate's outcome, an operator) is left alone."""
        runtime, job_id = self.runtime, message.message_id
        try:
            won = runtime.with_store_retry("claim", lambda: runtime.store.claim(
                job_id, worker_id=runtime.worker_id, lease_ttl=runtime.settings.lease_ttl, attempt_id=attempt_id,
                from_states=(JobStatus.PENDING,)))
        except ClaimRefused as refusal:
            logger.warning("job %s: fast-path %s not recorded, the job left PENDING during the run (%s)",
                           job_id, what, refusal.reason)
            return None
        active = self.tracing.current() if self.tracing is not None else None  # the run's span, still current
        context = self.leases.hold(message, won, span_id=active.span_id if active else None)
        context.leave()  # its run is over: a lease lost now stops nothing (the heartbeat leaves it be)
        return context


class Skipped:
    """A delivery was skipped: this thread's delivery, the durable claim (its claims ahead), the
    completion, the leases, and what is tracked (`registration`)."""

    __slots__ = ("completion", "durable", "leases", "registration", "thread")

    def __init__(self, thread: Delivery, durable: DurableClaim, completion: Completion, leases: Leases,
                 registration: Registration) -> None:
        self.thread, self.durable, self.completion, self.leases = thread, durable, completion, leases
        self.registration = registration

    def skipped(self, broker: dramatiq.Broker, message: Any, skip: Skip) -> None:
        """reliable's own skip (a refused claim, a deferral) changes nothing; another middleware's
        ends the job, as Dramatiq acks a skipped message for good: fenced by the lease when reliable
        had claimed it, by the version read when not (`skips.end_unclaimed`)."""
        thread = self.thread
        context = None if take_fast(thread, message) else take(thread, message)
        if context is None and (held := self.durable.held_ahead(message)) is not None:
            if skip.own:  # put off or refused by reliable before its claim: the claim ahead goes back
                self.durable.hand_back([held], "its delivery was put off")
            else:  # another middleware skipped it before our hook: end it under the claim ahead's lease
                held.context.adopt(None)
                context = held.context
        if context is None:
            if not skip.own and self.registration.tracked(broker, message.actor_name):
                self.completion.skipped_unclaimed(broker, message, skip)
            return
        context.leave()
        if not skip.own and not is_its_message(context.claim.job, message):
            self.durable.give_back(context, skip)
            return
        try:
            logger.warning("job %s: skipped %s after its claim", context.job_id, skip.describe())
            self.completion.skipped(broker, message, context, skip)
        finally:
            self.leases.release(context)


def take_fast(thread: Delivery, message: Any) -> bool:
    """Whether this thread's delivery is `message`'s fast-path run (forgotten from now on)."""
    fast = thread.fast
    thread.fast = None
    _fast_run.set(None)
    return fast is not None and fast == message.message_id


def take(thread: Delivery, message: Any) -> JobContext | None:
    """This thread's running attempt of `message`'s job, if any (forgotten from now on)."""
    context = thread.context
    thread.context = None
    if context is None or context.job_id != fields(message).message_id:
        return None
    return context
