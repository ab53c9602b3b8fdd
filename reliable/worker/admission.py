"""Concurrency and rate limits at the worker (the rules live in `reliable.limits`).

Before a claim a delivery takes its actor's slot and token (`admit`), or is published again later
and skipped (`defer`); a job whose limits key cannot be computed fails. After the claim the slot is
tied to the claim's lease (`bind`); a slot lost meanwhile gives the job back. The slot is released
when a delivery is skipped or its claim fails (`release`); once the attempt ended it frees itself.
A failure the policy calls rate limited is counted against the actor's limits (`rate_limited`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

import dramatiq
from dramatiq.middleware import SkipMessage

from ..errors import ClaimRefused, LeaseLost, ReliableError, TransitionRefused
from ..limits.gate import Admission, Denial, LimitGate
from ..limits.model import LimitKeyError
from ..redact import redact_secrets
from ..states import Event
from ..store import ErrorInfo
from . import after_commit
from .context import JobContext
from .delivery import fields

if TYPE_CHECKING:
    from ..metrics import Metrics
    from .context import Delivery
    from .plans import Plans
    from .runtime import Runtime

__all__ = ["Limits"]

logger = logging.getLogger("reliable.middleware")


class Limits:
    """The worker side of an app's limits (`limits=` on actors) for one middleware."""

    def __init__(self, runtime: Runtime, plans: Plans, delivery: Delivery, metrics: Metrics | None) -> None:
        self.runtime, self.plans, self.delivery = runtime, plans, delivery
        #: The limits declared with `limits=` (reliable.limits).
        self.gate = LimitGate(
            alert_after=lambda actor, queue: plans.contract(actor, queue).rate_limit.alert_after,
            on_deferral=metrics.limit_deferred if metrics is not None else None)

    def admit(self, broker: dramatiq.Broker, message: Any, digest: str | None = None) -> ClaimRefused | None:
        """Take the actor's slot and token for this delivery, or publish it again later and skip it.
        Only a delivery whose claim can win spends a slot or a token (not a duplicate of a finished
        or running job, nor an early retry): the claim's refusal when it would lose, to handle as
        the claim's own. `digest`: the delivery's (`worker.delivery`), refused when it is not the job's."""
        process = self.runtime
        self.delivery.limits = None
        spec = self.gate.spec_for(broker, fields(message).actor_name)
        if spec is None:
            return None
        refusal: ClaimRefused | None = process.with_store_retry(
            "claimable", lambda: process.store.claim_refusal(message.message_id, delivery_digest=digest))
        if refusal is not None:
            return refusal
        try:
            admitted = process.with_store_retry("limits", lambda: self.gate.admit(
                process.store, spec, message, lease_ttl=process.settings.lease_ttl, worker_id=process.worker_id))
        except LimitKeyError as exc:
            self._key_failed(message, exc)
            message.options["store_results"] = False
            raise SkipMessage("limits key") from None
        if isinstance(admitted, Admission):
            self.delivery.limits = admitted
            return None
        self.defer(broker, message, admitted)

    def defer(self, broker: dramatiq.Broker, message: Any, denial: Denial) -> NoReturn:
        """Publish the delivery again later and skip it (always raises SkipMessage)."""
        process = self.runtime
        delay = after_commit.publish(  # the job stays PENDING in the store: the sweeper re-publishes it
            message.message_id, "its deferral",
            lambda: self.gate.defer(broker, process.store, message, denial, worker_id=process.worker_id),
            fallback="the recovery loop will re-dispatch it")
        if delay is not None:
            logger.debug("job %s deferred %.2fs: %s limit of %s", message.message_id, delay, denial.limit,
                         denial.spec.actor)
        message.options["store_results"] = False  # never ran: Results must not store None for it
        raise SkipMessage(f"{denial.limit} limit")

    def _key_failed(self, message: Any, exc: LimitKeyError) -> None:
        """Fail the job whose limits key cannot be computed from its arguments: it can never run.
        The claim decides as for any attempt (a duplicate of a finished job changes nothing)."""
        process, job_id = self.runtime, message.message_id
        logger.error("job %s: %s; the job fails", job_id, exc)
        try:
            claim = process.with_store_retry("claim", lambda: process.store.claim(
                job_id, worker_id=process.worker_id, lease_ttl=process.settings.lease_ttl))
        except ClaimRefused as refusal:
            logger.info("message %s skipped: claim refused (%s)", job_id, refusal.reason)
            return
        cause = exc.__cause__ or exc
        error = ErrorInfo("limits_key", type(cause).__name__, redact_secrets(str(exc)))
        try:
            process.with_store_retry("fail", lambda: process.store.finish(
                job_id, claim.job.lease_id, Event.FAIL, worker_id=process.worker_id, error=error))
        except (LeaseLost, TransitionRefused) as refused:
            logger.warning("job %s: %s", job_id, refused)

    def bind(self, broker: dramatiq.Broker, message: Any, claim: Any) -> None:
        """Tie the admission's slot to the claim's lease; when the slot was lost and none is free,
        give the job back (PENDING is not reachable from a claim: a retry now, no attempt of the
        actor's code) and defer this delivery: it never runs without its slot."""
        process = self.runtime
        admission = self.delivery.limits
        if admission is None or self.gate.bind(process.store, admission, claim.job.lease_id,
                                               lease_ttl=process.settings.lease_ttl, worker_id=process.worker_id):
            return
        self.delivery.limits = None
        job_id = message.message_id
        logger.warning("job %s: its %s slot was taken by another job before its claim; deferred", job_id,
                       admission.spec.actor)
        try:
            process.with_store_retry("retry_scheduled", lambda: process.store.finish(
                job_id, claim.job.lease_id, Event.RETRY, worker_id=process.worker_id, retry_delay=0.0,
                detail={"limit_slot_lost": admission.spec.actor}))
        except (LeaseLost, TransitionRefused) as refused:
            logger.warning("job %s: %s", job_id, refused)
        self.defer(broker, message, Denial(admission.spec, admission.key, "concurrency", 0.0))

    def release(self) -> None:
        """Free the slot this thread's delivery holds (it was skipped, or its claim failed)."""
        admission = self.delivery.limits
        self.delivery.limits = None
        if admission is not None:
            self.gate.release(self.runtime.store, admission)

    def rate_limited(self, context: JobContext) -> None:
        """Count a rate-limited failure of `context`'s job against its actor's limits."""
        process, job = self.runtime, context.claim.job
        spec = self.gate.spec_for(self.plans.broker, job.actor) if self.plans.broker is not None else None
        if spec is None:
            return
        try:
            self.gate.rate_limited(process.store, spec, job.home_queue, job.job_id, worker_id=process.worker_id)
        except ReliableError as exc:
            logger.warning("job %s: could not record the rate-limited failure for %s's limits: %s",
                           job.job_id, job.actor, exc)
