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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import dramatiq

from ..errors import LeaseLost, StoreError, TransitionRefused
from ..policy import Failure
from ..policy.model import RATE_LIMITED_MARK
from ..states import Event, JobStatus
from ..store import FanIn, NewJob, NodeResult
from ..tracebacks import failure_texts
from ..tracecontext import TRACE_OPTIONS
from ..workflows.engine import node_result
from . import after_commit, outcome
from .context import JobContext
from .continuations import FollowUp, follow_ups

if TYPE_CHECKING:
    from .middleware import ReliableMiddleware

__all__ = ["RETRY_BUDGET_WINDOW", "complete", "finish", "group_completion", "note_unrecorded_effects"]

logger = logging.getLogger("reliable.middleware")

#: The window over which retries are counted against an actor's retry budget.
RETRY_BUDGET_WINDOW = 60.0

Planned = list[tuple[FollowUp, NewJob | None]]


def complete(mw: ReliableMiddleware, broker: dramatiq.Broker, message: Any, context: JobContext, result: Any,
             exception: BaseException | None) -> None:
    """Commit the attempt's outcome and act on it (see the module doc)."""
    if exception is None:
        planned = plan(mw, broker, message, context, result=result)
        fan_in = group_completion(mw, broker, message, trace=context.traceparent.as_options(),
                                  parent_job_id=context.job_id)
        stored_result = node_result(context.job_id, result) if message.options.get("workflow_node") else None
        job = finish(mw, context, outcome.Outcome(Event.SUCCEED), planned=planned,
                     fan_in=fan_in[0] if fan_in else None, node_result=stored_result)
        if job is None:  # discarded (lease reassigned): Dramatiq's Results must not keep this value
            message.options["store_results"] = False
        after_commit.conclude(mw, broker, message, context, job, None, planned)
        if fan_in is not None and job is not None and job.status is JobStatus.SUCCEEDED:
            group_arrived(mw, broker, context, *fan_in)
        return
    if not outcome.needs_decision(exception):
        ended = outcome.attempt_ended(exception)
        if ended is None:
            logger.warning("job %s: lease lost, attempt %s abandoned", context.job_id, context.attempt_id)
            return
        # An operator's pause, stop or cancel, not a failure: no on_failure callback follows.
        # The store turns a stop into a cancel when one was requested since (honour_requests).
        job = finish(mw, context, ended)
        after_commit.conclude(mw, broker, message, context, job, None, [])
        return
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
    after_commit.conclude(mw, broker, message, context, job, decision, planned)


def plan(mw: ReliableMiddleware, broker: dramatiq.Broker, message: Any, context: JobContext, *,
         result: Any = None, exception: BaseException | None = None,
         exhausted: dict[str, Any] | None = None) -> Planned:
    """The messages that follow this attempt, each with the job to register for it (None: untracked)."""
    if not mw.continuation_kinds:
        return []
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


def group_completion(mw: ReliableMiddleware, broker: dramatiq.Broker, message: Any, *, trace: dict[str, Any],
                     parent_job_id: str) -> tuple[FanIn, list[dramatiq.Message[Any]]] | None:
    """A group member's arrival at its completion barrier, with the group's callbacks to register."""
    barrier_id = message.options.get("group_completion_uuid")
    callbacks = message.options.get("group_completion_callbacks")
    if not barrier_id or not callbacks or mw.group_callbacks is None:
        return None
    messages: list[dramatiq.Message[Any]] = []
    new_jobs: list[NewJob] = []
    for data in callbacks:
        # A copy: the member's message (and Dramatiq's barrier, if it decides) keep theirs as sent.
        callback: dramatiq.Message[Any] = dramatiq.Message(**{**data, "options": dict(data.get("options") or {})})
        callback.options.update(trace, parent_job_id=parent_job_id, workflow_id=barrier_id)
        prepared = mw.registration.new_job(broker, callback, None)
        messages.append(callback)
        if prepared is not None:
            new_jobs.append(prepared[0])
    return FanIn(barrier_id, new_jobs), messages


def untracked_member_succeeded(mw: ReliableMiddleware, broker: dramatiq.Broker, message: Any) -> bool:
    """An untracked group member's success arrives at its group's barrier in the store (so a group
    mixing tracked and untracked members completes); False when the store does not know the
    barrier, and Dramatiq's barrier decides."""
    trace = {key: message.options[key] for key in TRACE_OPTIONS if message.options.get(key)}
    built = group_completion(mw, broker, message, trace=trace, parent_job_id=message.message_id)
    if built is None:
        return False
    fan_in, callbacks = built
    mw.runtime.with_store_retry("arrive_at_barrier", lambda: mw.store.arrive_at_barrier(fan_in))
    if not fan_in.known:
        return False
    if fan_in.cleared:
        after_commit.publish_group_callbacks(broker, message.message_id, callbacks)
    return True


def group_arrived(mw: ReliableMiddleware, broker: dramatiq.Broker, context: JobContext, fan_in: FanIn,
                  callbacks: list[dramatiq.Message[Any]]) -> None:
    """Publish the group's completion callbacks if this member cleared its barrier (registered
    with its success), or let Dramatiq's barrier decide for a group the store does not know."""
    if not fan_in.known:
        from dramatiq.rate_limits import Barrier

        assert mw.group_callbacks is not None
        inner = mw.group_callbacks.inner
        barrier = Barrier(inner.rate_limiter_backend, fan_in.barrier_id, ttl=inner.barrier_ttl)  # type: ignore[no-untyped-call]
        if not barrier.wait(block=False):  # type: ignore[no-untyped-call]
            return
        # Not registered with the success (the store has no barrier to clear): register now,
        # before publishing, as a producer's enqueue would.
        mw.runtime.with_store_retry("register", lambda: mw.store.register_many(fan_in.jobs))
    elif not fan_in.cleared:
        return
    after_commit.publish_group_callbacks(broker, context.job_id, callbacks)


def finish(mw: ReliableMiddleware, context: JobContext, ended: outcome.Outcome, *,
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


def note_unrecorded_effects(mw: ReliableMiddleware, context: JobContext) -> None:
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


def _rate_limited_retries(mw: ReliableMiddleware, context: JobContext) -> int:
    if context.claim.job.retry_count == 0:
        return 0
    try:
        return mw.store.count_job_events(context.job_id, "retry_scheduled", detail_contains=RATE_LIMITED_MARK,
                                         since_fresh_budget=True)
    except StoreError:
        return 0


def _recent_retries(mw: ReliableMiddleware, context: JobContext) -> int:
    try:
        return mw.store.count_recent_events("retry_scheduled", actor=context.claim.job.actor,
                                            window=RETRY_BUDGET_WINDOW)
    except StoreError:
        return 0
