"""The write that ends a claimed attempt: its outcome, fenced by its lease, with what follows it.

For a failure the policy decides (with the job's retry counts: the actor's retries in the last
`RETRY_BUDGET_WINDOW` seconds, the job's rate-limited ones); `outcome` turns the decision into the
event. The messages that follow the attempt (next pipeline step, callbacks, on_retry_exhausted:
`continuations`), a group member's arrival at its barrier and a workflow node's result are
registered in the same transaction (`StateStore.finish`); `after_commit` acts on the result.
A write that lost its lease or its transition is logged and dropped: the store holds the truth.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dramatiq

from ..errors import LeaseLost, StoreError, TransitionRefused
from ..policy import Failure
from ..policy.model import RATE_LIMITED_MARK
from ..states import Event, JobStatus
from ..store import FanIn, NewJob, NodeResult
from ..tracebacks import failure_texts
from ..workflows.engine import node_result
from . import after_commit, delivery, groups, outcome
from .context import JobContext
from .continuations import FollowUp, follow_ups, follows_success

if TYPE_CHECKING:
    from .state import Worker

__all__ = ["RETRY_BUDGET_WINDOW", "complete", "finish", "note_unrecorded_effects", "plan"]

logger = logging.getLogger("reliable.middleware")

#: The window over which retries are counted against an actor's retry budget.
RETRY_BUDGET_WINDOW = 60.0

Planned = list[tuple[FollowUp, NewJob | None]]


def complete(mw: Worker, broker: dramatiq.Broker, message: Any, context: JobContext, result: Any,
             exception: BaseException | None, *, release: Callable[[], None] | None = None) -> bool:
    """Commit the attempt's outcome and act on it (see the module doc). With `release` (what
    ends the attempt's lease), a success that nothing follows may be committed without waiting for
    it, its delivery's acknowledgement held until then (reliable.worker.acks): True when so, and
    `release` is then called once it has committed or been settled, else by the caller."""
    if exception is None:
        planned = plan(mw, broker, message, context, result=result)
        fan_in = groups.group_completion(mw, broker, message, trace=lambda: context.traceparent.as_options(),
                                  parent_job_id=context.job_id)
        stored_result = node_result(context.job_id, result) if message.options.get("workflow_node") else None
        if release is not None and not planned and fan_in is None and stored_result is None \
                and _succeed_later(mw, broker, message, context, release):
            return True
        job = finish(mw, context, outcome.Outcome(Event.SUCCEED), planned=planned,
                     fan_in=fan_in[0] if fan_in else None, node_result=stored_result)
        if job is None:  # discarded (lease reassigned): Dramatiq's Results must not keep this value
            message.options["store_results"] = False
        after_commit.conclude(mw.runtime, mw.metrics, broker, message, context, job, None, planned)
        if fan_in is not None and job is not None and job.status is JobStatus.SUCCEEDED:
            groups.group_arrived(mw, broker, context, *fan_in)
        return False
    if not outcome.needs_decision(exception):
        ended = outcome.attempt_ended(exception)
        if ended is None:
            logger.warning("job %s: lease lost, attempt %s abandoned", context.job_id, context.attempt_id)
            return False
        # An operator's pause, stop or cancel, not a failure: no on_failure callback follows.
        # The store turns a stop into a cancel when one was requested since (honour_requests).
        job = finish(mw, context, ended)
        after_commit.conclude(mw.runtime, mw.metrics, broker, message, context, job, None, [])
        return False
    texts = failure_texts(exception)
    retries = _count_failure(message, texts.message)
    job_row = context.claim.job
    actor_options = mw.plans.options(job_row.actor)
    decision = mw.policy.decide(Failure(
        exception=exception, actor=job_row.actor, queue=job_row.home_queue,
        attempt=context.attempt, retry_count=job_row.retry_count, contract=context.contract,
        now=time.time(), recent_retries=_recent_retries(mw, context),
        rate_limited_retries=_rate_limited_retries(mw, context),
        throws=message.options.get("throws") or actor_options.get("throws"),
        retry_when=actor_options.get("retry_when") or getattr(mw.dramatiq_retries, "retry_when", None),
    ))
    failure = outcome.failed(decision, traceback=texts.stored, retries=retries,
                             max_attempts=context.contract.max_attempts, home_queue=job_row.home_queue,
                             queue=job_row.queue)
    if decision.rate_limited:
        mw.admission.rate_limited(context)
    planned = plan(mw, broker, message, context, exception=exception, exhausted=failure.exhausted)
    job = finish(mw, context, failure, planned=planned)
    after_commit.conclude(mw.runtime, mw.metrics, broker, message, context, job, decision, planned)
    return False


def _succeed_later(mw: Worker, broker: dramatiq.Broker, message: Any, context: JobContext,
                   release: Callable[[], None]) -> bool:
    """Submit the success to the group commit with the delivery's acknowledgement held until it
    commits; one its batch did not commit is settled the waited way (`finish`, then `conclude`).
    False: not here (no held acknowledgements, or a limited actor's slot), wait for it instead."""
    if mw.delivery.limits is not None:
        return False

    def settle() -> None:
        try:
            job = finish(mw, context, outcome.Outcome(Event.SUCCEED))
            after_commit.conclude(mw.runtime, mw.metrics, broker, message, context, job, None, [])
        finally:
            release()

    return mw.acks.hand_over(message, lambda done: mw.store.succeed_later(
        context.job_id, context.fencing_token, worker_id=mw.worker_id, done=done), settle, committed=release)


def plan(mw: Worker, broker: dramatiq.Broker, message: Any, context: JobContext, *,
         result: Any = None, exception: BaseException | None = None,
         exhausted: dict[str, Any] | None = None) -> Planned:
    """The messages that follow this attempt, each with the job to register for it (None: untracked)."""
    if not mw.continuation_kinds:
        return []
    if exception is None:
        fields = delivery.fields(message)
        if not follows_success(fields, mw.plans.options(fields.actor_name)):
            return []  # nothing to build: most successes end here, without reading the actor again
    try:
        found = follow_ups(broker, message, kinds=mw.continuation_kinds, result=result, exception=exception,
                           exhausted=exhausted)
    except Exception:
        logger.exception("job %s: could not build the messages that follow it; they are not sent", context.job_id)
        return []
    planned: Planned = []
    job = context.claim.job
    for follow_up in found:
        options = follow_up.message.options
        options.update(context.traceparent.as_options())
        options["parent_job_id"] = job.job_id
        if job.workflow_id:
            options.setdefault("workflow_id", job.workflow_id)
        try:
            follow_up.message.encode()  # what the broker will do: fail here, not inside the commit
            prepared = mw.registration.new_job(broker, follow_up.message, follow_up.delay)
        except Exception:
            logger.exception("job %s: the %s message that follows it cannot be sent; dropped",
                             context.job_id, follow_up.message.actor_name)
            continue
        if prepared is not None:
            mw.registration.untrusted_ignored(*prepared)
        planned.append((follow_up, None if prepared is None else prepared[0]))
    return planned


def finish(mw: Worker, context: JobContext, ended: outcome.Outcome, *,
           planned: Sequence[tuple[FollowUp, NewJob | None]] = (), fan_in: FanIn | None = None,
           node_result: NodeResult | None = None) -> Any:
    """Write `ended`, fenced by the attempt's lease; the job as written, None when refused (logged)."""
    def registered(status: JobStatus) -> list[NewJob]:
        return [job for follow_up, job in planned if job is not None and follow_up.applies(status)]

    try:
        return mw.runtime.with_store_retry(ended.event.value, lambda: mw.store.finish(
            context.job_id, context.fencing_token, ended.event, worker_id=mw.worker_id, error=ended.error,
            retry_delay=ended.retry_delay, detail=ended.detail, follow_ups=registered if planned else None,
            fan_in=fan_in, node_result=node_result, queue=ended.queue))
    except LeaseLost:
        logger.warning("job %s: result of attempt %s discarded, its lease %d was reassigned",
                       context.job_id, context.attempt_id, context.fencing_token)
    except TransitionRefused as exc:
        logger.warning("job %s: %s", context.job_id, exc)
    return None


def note_unrecorded_effects(mw: Worker, context: JobContext) -> None:
    """Units the attempt applied but could not record: a later first record is a possible duplicate."""
    for key in context.unrecorded_effects:
        mw.runtime.with_store_retry("effect_unrecorded", functools.partial(
            mw.store.effect_unrecorded, context.job_id, key, lease_id=context.fencing_token, worker_id=mw.worker_id))


def _count_failure(message: Any, formatted_traceback: str) -> int:
    """Set Dramatiq's `retries`, `traceback` (`FailureTexts.message`) and `requeue_timestamp` on a failed
    attempt's message, as its Retries middleware does (callbacks and the retry see them); the new `retries`."""
    options = message.options
    options["retries"] = int(options.get("retries") or 0) + 1
    options["traceback"] = formatted_traceback
    options["requeue_timestamp"] = int(time.time() * 1000)
    return int(options["retries"])


def _rate_limited_retries(mw: Worker, context: JobContext) -> int:
    if context.claim.job.retry_count == 0:
        return 0
    try:
        return mw.store.count_job_events(context.job_id, "retry_scheduled", detail_contains=RATE_LIMITED_MARK,
                                         since_fresh_budget=True)
    except StoreError:
        return 0


def _recent_retries(mw: Worker, context: JobContext) -> int:
    try:
        return mw.store.count_recent_events("retry_scheduled", actor=context.claim.job.actor,
                                            window=RETRY_BUDGET_WINDOW)
    except StoreError:
        return 0
