"""The write that ends a claimed attempt: its outcome, fenced by its lease, with what follows it.

For a failure the policy decides (with the job's retry counts: the actor's retries in the last
`RETRY_BUDGET_WINDOW` seconds, the job's rate-limited ones); `outcome` turns the decision into the
event. The messages that follow the attempt (next pipeline step, callbacks, on_retry_exhausted:
`continuations`), a group member's arrival at its barrier and a workflow node's result are
registered in the same transaction (`StateStore.finish`); `after_commit` acts on the result.
A write that lost its lease or its transition is logged and dropped: the store holds the truth.

The step is `Completion`, built once per middleware with what it uses: the process's store
(`runtime`), the actors' plans, the metrics, the messages that follow an attempt (`FollowUps`),
the policy's decision on a failure (`Decisions`), group barriers (`Groups`) and the held
acknowledgements (`HeldAcks`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dramatiq

from ..errors import LeaseLost, StoreError, TransitionRefused
from ..policy import Decision, Failure
from ..policy.model import RATE_LIMITED_MARK
from ..states import Event, JobStatus
from ..store import FanIn, NewJob, NodeResult
from ..tracebacks import failure_texts
from ..workflows.engine import node_result
from . import after_commit, delivery, outcome
from .context import JobContext
from .continuations import FollowUp, follow_ups, follows_success
from .skips import end_unclaimed

if TYPE_CHECKING:
    from ..metrics import Metrics
    from ..store import Job
    from .acks import HeldAcks
    from .admission import Limits
    from .groups import Groups
    from .plans import Plans
    from .registration import Registration
    from .runtime import Runtime
    from .skips import Skip

__all__ = ["RETRY_BUDGET_WINDOW", "Completion", "Decisions", "FollowUps"]

logger = logging.getLogger("reliable.middleware")

#: The window over which retries are counted against an actor's retry budget.
RETRY_BUDGET_WINDOW = 60.0

Planned = list[tuple[FollowUp, NewJob | None]]

#: A success's write (immutable: one for every success).
_SUCCEEDED = outcome.Outcome(Event.SUCCEED)


class FollowUps:
    """The messages that follow an attempt (reliable.worker.continuations), each with its job."""

    __slots__ = ("kinds", "plans", "registration")

    def __init__(self, plans: Plans, registration: Registration) -> None:
        self.plans, self.registration = plans, registration
        #: The continuation kinds reliable sends for tracked actors (set by `install` from the
        #: Dramatiq middleware it found: see `reliable.worker.continuations`).
        self.kinds: frozenset[str] = frozenset()

    def plan(self, broker: dramatiq.Broker, message: Any, context: JobContext, *,
             result: Any = None, exception: BaseException | None = None,
             exhausted: dict[str, Any] | None = None) -> Planned:
        """The messages that follow this attempt, each with the job to register for it (None: untracked)."""
        kinds = self.kinds
        if not kinds:
            return []
        if exception is None:
            fields = delivery.fields(message)
            if not follows_success(fields, self.plans.options(fields.actor_name)):
                return []  # nothing to build: most successes end here, without reading the actor again
        try:
            found = follow_ups(broker, message, kinds=kinds, result=result, exception=exception, exhausted=exhausted)
        except Exception:
            logger.exception("job %s: could not build the messages that follow it; they are not sent", context.job_id)
            return []
        planned: Planned = []
        job = context.claim.job
        registration = self.registration
        for follow_up in found:
            options = follow_up.message.options
            options.update(context.traceparent.as_options())
            options["parent_job_id"] = job.job_id
            if job.workflow_id:
                options.setdefault("workflow_id", job.workflow_id)
            try:
                follow_up.message.encode()  # what the broker will do: fail here, not inside the commit
                prepared = registration.new_job(broker, follow_up.message, follow_up.delay)
            except Exception:
                logger.exception("job %s: the %s message that follows it cannot be sent; dropped",
                                 context.job_id, follow_up.message.actor_name)
                continue
            if prepared is not None:
                registration.untrusted_ignored(*prepared)
            planned.append((follow_up, None if prepared is None else prepared[0]))
        return planned


class Decisions:
    """The policy's decision on a failed attempt, with the job's retry counts; a rate-limited one
    is counted against the actor's limits."""

    __slots__ = ("admission", "plans", "retries", "runtime")

    def __init__(self, runtime: Runtime, plans: Plans, admission: Limits) -> None:
        self.runtime, self.plans, self.admission = runtime, plans, admission
        #: Dramatiq's Retries middleware of the broker, if any: its `retry_when` applies to tracked actors.
        self.retries: Any = None

    def decide(self, message: Any, context: JobContext, exception: BaseException, texts: Any) -> Decision:
        """The policy's decision on this failure (see the module doc)."""
        job_row = context.claim.job
        actor_options = self.plans.options(job_row.actor)
        decision = self.plans.policy.decide(Failure(
            exception=exception, actor=job_row.actor, queue=job_row.home_queue,
            attempt=context.attempt, retry_count=job_row.retry_count, contract=context.contract,
            now=time.time(), recent_retries=self._recent_retries(context),
            rate_limited_retries=self._rate_limited_retries(context),
            throws=message.options.get("throws") or actor_options.get("throws"),
            retry_when=actor_options.get("retry_when") or getattr(self.retries, "retry_when", None),
        ))
        if decision.rate_limited:
            self.admission.rate_limited(context)
        return decision

    def _rate_limited_retries(self, context: JobContext) -> int:
        if context.claim.job.retry_count == 0:
            return 0
        try:
            return self.runtime.store.count_job_events(context.job_id, "retry_scheduled",
                                                       detail_contains=RATE_LIMITED_MARK, since_fresh_budget=True)
        except StoreError:
            return 0

    def _recent_retries(self, context: JobContext) -> int:
        try:
            return self.runtime.store.count_recent_events("retry_scheduled", actor=context.claim.job.actor,
                                                          window=RETRY_BUDGET_WINDOW)
        except StoreError:
            return 0


class Completion:
    """The write that ends a claimed attempt, and what follows it (see the module doc)."""

    __slots__ = ("acks", "decisions", "follow_ups", "groups", "metrics", "plans", "runtime")

    def __init__(self, runtime: Runtime, plans: Plans, metrics: Metrics | None, follow_ups: FollowUps,
                 decisions: Decisions, groups: Groups, acks: HeldAcks) -> None:
        self.runtime, self.plans, self.metrics = runtime, plans, metrics
        self.follow_ups, self.decisions, self.groups, self.acks = follow_ups, decisions, groups, acks

    def complete(self, broker: dramatiq.Broker, message: Any, context: JobContext, result: Any,
                 exception: BaseException | None, *, release: Callable[[], None] | None = None) -> bool:
        """Commit the attempt's outcome and act on it (see the module doc). With `release` (what
        ends the attempt's lease; None while the attempt holds a limits slot), a success that
        nothing follows may be committed without waiting for it, its delivery's acknowledgement
        held until then (reliable.worker.acks): True when so, and `release` is then called once it
        has committed or been settled, else by the caller."""
        runtime, metrics = self.runtime, self.metrics
        if exception is None:
            planned = self.follow_ups.plan(broker, message, context, result=result)
            options = message.options
            # A group member's arrival (reliable.worker.groups): most successes are none, and build no callback.
            fan_in = self.groups.completion(broker, message, trace=lambda: context.traceparent.as_options(),
                                            parent_job_id=context.job_id) \
                if options.get("group_completion_uuid") else None
            stored_result = node_result(context.job_id, result) if options.get("workflow_node") else None
            if release is not None and not planned and fan_in is None and stored_result is None \
                    and self._succeed_later(broker, message, context, release):
                return True
            job = self.finish(context, _SUCCEEDED, planned=planned,
                              fan_in=fan_in[0] if fan_in else None, node_result=stored_result)
            if job is None:  # discarded (lease reassigned): Dramatiq's Results must not keep this value
                message.options["store_results"] = False
            after_commit.conclude(runtime, metrics, broker, message, context, job, None, planned)
            if fan_in is not None and job is not None and job.status is JobStatus.SUCCEEDED:
                self.groups.arrived(broker, context, *fan_in)
            return False
        if not outcome.needs_decision(exception):
            ended = outcome.attempt_ended(exception)
            if ended is None:
                logger.warning("job %s: lease lost, attempt %s abandoned", context.job_id, context.attempt_id)
                return False
            # An operator's pause, stop or cancel, not a failure: no on_failure callback follows.
            # The store turns a stop into a cancel when one was requested since (honour_requests).
            job = self.finish(context, ended)
            after_commit.conclude(runtime, metrics, broker, message, context, job, None, [])
            return False
        texts = failure_texts(exception)
        retries = _count_failure(message, texts.message)
        decision = self.decisions.decide(message, context, exception, texts)
        job_row = context.claim.job
        failure = outcome.failed(decision, traceback=texts.stored, retries=retries,
                                 max_attempts=context.contract.max_attempts, home_queue=job_row.home_queue,
                                 queue=job_row.queue)
        planned = self.follow_ups.plan(broker, message, context, exception=exception, exhausted=failure.exhausted)
        job = self.finish(context, failure, planned=planned)
        after_commit.conclude(runtime, metrics, broker, message, context, job, decision, planned)
        return False

    def _succeed_later(self, broker: dramatiq.Broker, message: Any, context: JobContext,
                       release: Callable[[], None]) -> bool:
        """Submit the success to the group commit with the delivery's acknowledgement held until it
        commits; one its batch did not commit is settled the waited way (`finish`, then `conclude`).
        False: not here (no held acknowledgements), wait for it instead."""
        runtime = self.runtime

        def settle() -> None:
            try:
                job = self.finish(context, _SUCCEEDED)
                after_commit.conclude(runtime, self.metrics, broker, message, context, job, None, [])
            finally:
                release()

        return self.acks.hand_over(message, lambda done: runtime.store.succeed_later(
            context.job_id, context.fencing_token, worker_id=runtime.worker_id, done=done), settle, committed=release)

    def finish(self, context: JobContext, ended: outcome.Outcome, *,
               planned: Sequence[tuple[FollowUp, NewJob | None]] = (), fan_in: FanIn | None = None,
               node_result: NodeResult | None = None) -> Any:
        """Write `ended`, fenced by the attempt's lease; the job as written, None when refused (logged)."""
        def registered(status: JobStatus) -> list[NewJob]:
            return [job for follow_up, job in planned if job is not None and follow_up.applies(status)]

        runtime = self.runtime
        try:
            return runtime.with_store_retry(ended.event.value, lambda: runtime.store.finish(
                context.job_id, context.fencing_token, ended.event, worker_id=runtime.worker_id, error=ended.error,
                retry_delay=ended.retry_delay, detail=ended.detail, follow_ups=registered if planned else None,
                fan_in=fan_in, node_result=node_result, queue=ended.queue))
        except LeaseLost:
            logger.warning("job %s: result of attempt %s discarded, its lease %d was reassigned",
                           context.job_id, context.attempt_id, context.fencing_token)
        except TransitionRefused as exc:
            logger.warning("job %s: %s", context.job_id, exc)
        return None

    def skipped(self, broker: dramatiq.Broker, message: Any, context: JobContext, skip: Skip) -> None:
        """End a claimed attempt that another middleware skipped (fenced by its lease), and act on it."""
        job = self.finish(context, outcome.skipped(skip))
        after_commit.conclude(self.runtime, self.metrics, broker, message, context, job, None, [])

    def skipped_unclaimed(self, broker: dramatiq.Broker, message: Any, skip: Skip) -> None:
        """End the job of a delivery another middleware skipped before any claim (`skips.end_unclaimed`),
        and act on it: its workflow advanced, the effects of its earlier attempts compensated."""
        runtime = self.runtime
        job: Job | None = runtime.with_store_retry("skipped", lambda: end_unclaimed(runtime.store, message, skip))
        if job is not None and job.workflow_id and message.options.get("workflow_node"):
            after_commit.advance_workflow(runtime, self.metrics, broker, job.workflow_id)
        if job is not None and job.status is JobStatus.CANCELLED:  # effects of earlier attempts
            contract = self.plans.contract(message.actor_name, job.home_queue, message.options)
            after_commit.compensate_cancelled(runtime, broker, job, contract.compensation)

    def note_unrecorded_effects(self, context: JobContext) -> None:
        """Units the attempt applied but could not record: a later first record is a possible duplicate."""
        runtime = self.runtime
        for key in context.unrecorded_effects:
            runtime.with_store_retry("effect_unrecorded", functools.partial(
                runtime.store.effect_unrecorded, context.job_id, key, lease_id=context.fencing_token,
                worker_id=runtime.worker_id))


def _count_failure(message: Any, formatted_traceback: str) -> int:
    """Set Dramatiq's `retries`, `traceback` (`FailureTexts.message`) and `requeue_timestamp` on a failed
    attempt's message, as its Retries middleware does (callbacks and the retry see them); the new `retries`."""
    options = message.options
    options["retries"] = int(options.get("retries") or 0) + 1
    options["traceback"] = formatted_traceback
    options["requeue_timestamp"] = int(time.time() * 1000)
    return int(options["retries"])
