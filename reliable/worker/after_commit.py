"""What follows an attempt's committed outcome, acting on where the store left the job.

Every message published after a commit (a retry, the messages that follow a step, a group's
completion callbacks) was registered with the outcome, so a publish that fails is only logged:
the recovery loop's sweeper publishes what stayed PENDING (`publish`, the one place saying so).
Also here: the workflow advance (recovery's sweep of running workflows is its backstop), the
compensation of a cancelled job, the alert and escalation events, and the failing (nack) of a
message whose job failed for good, as Dramatiq's Retries does.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dramatiq

from ..compensation import compensate
from ..dispatch import declare_queue, message_for
from ..errors import ReliableError, StoreError
from ..policy import THROWS_RULE, Decision
from ..rabbitmq.timeouts import MAX_BROKER_DELAY
from ..states import JobStatus
from ..store import NewJob
from ..workflows.engine import WorkflowEngine
from ..workflows.planning import ACTIVE as WORKFLOW_ACTIVE
from .context import JobContext
from .continuations import FollowUp
from .outcome import fails_message

if TYPE_CHECKING:
    from ..metrics import Metrics
    from .runtime import Runtime

__all__ = ["advance_workflow", "alert", "compensate_cancelled", "conclude", "escalate",
           "publish", "publish_group_callbacks"]

logger = logging.getLogger("reliable.middleware")



def publish(job_id: str, what: str, send: Callable[[], Any], *,
            fallback: str = "the recovery loop will") -> Any:
    """Publish what a commit registered: what `send` returned, or None when it failed (logged: the
    job stays registered, the recovery loop's sweeper publishes it later)."""
    try:
        return send()
    except Exception:
        logger.warning("job %s: publishing %s failed; %s", job_id, what, fallback, exc_info=True)
        return None


def conclude(runtime: Runtime, metrics: Metrics | None, broker: dramatiq.Broker, message: Any, context: JobContext,
             job: Any, decision: Decision | None, planned: Sequence[tuple[FollowUp, NewJob | None]]) -> None:
    """Act on where the attempt's outcome left the job (the store may have changed it)."""
    if job is None:
        return
    if job.workflow_id and message.options.get("workflow_node") and job.status.value not in WORKFLOW_ACTIVE:
        advance_workflow(runtime, metrics, broker, job.workflow_id)
    if decision is not None and (decision.alert or (decision.action == "halt" and job.status is JobStatus.STOPPED)):
        alert(runtime, context, decision)
    for follow_up, _registered in planned:
        if follow_up.applies(job.status):
            publish(context.job_id, f"the {follow_up.message.actor_name} message that follows it",
                    functools.partial(broker.enqueue, follow_up.message, delay=follow_up.delay))
    if job.status is JobStatus.CANCELLED:
        compensate_cancelled(runtime, broker, job, context.contract.compensation)
    elif job.status is JobStatus.RETRY_WAIT and job.retry_at is not None:
        delay = max(0.0, job.retry_at - job.updated_at)
        if delay <= MAX_BROKER_DELAY:
            def send_retry() -> None:
                declare_queue(broker, job.queue)  # a routed retry's queue may be new to this broker
                broker.enqueue(message_for(job, traceback=message.options.get("traceback")), delay=int(delay * 1000))

            publish(context.job_id, "the retry", send_retry, fallback="the recovery loop will re-dispatch it")
    elif fails_message(job.status, decision):
        assert decision is not None
        if decision.rule == THROWS_RULE:
            logger.info("Aborting message %r.", message.message_id)  # Retries' line, which apps may watch for
        message.fail()  # as Dramatiq's Retries: nacked, Results stores the exception


def compensate_cancelled(runtime: Runtime, broker: dramatiq.Broker, job: Any, compensation: str | None) -> None:
    """Enqueue the compensation of a job that ended CANCELLED with effects applied (or record that
    they remain), as every other path to CANCELLED does (`reliable.compensation`)."""
    warning = compensate(runtime.store, broker, job, compensation, worker_id=runtime.worker_id)
    if warning:
        logger.warning("job %s: %s", job.job_id, warning)


def publish_group_callbacks(broker: dramatiq.Broker, member_id: str, callbacks: list[dramatiq.Message[Any]]) -> None:
    """Publish a group's completion callbacks, already registered: one that fails is left to the sweeper."""
    for callback in callbacks:
        publish(member_id, f"the group's completion callback {callback.actor_name}",
                functools.partial(broker.enqueue, callback))


def advance_workflow(runtime: Runtime, metrics: Metrics | None, broker: dramatiq.Broker, workflow_id: str) -> None:
    """Start what this node's outcome allows in its workflow (after the commit: should this
    process die first, the recovery loop's sweep of running workflows does it)."""
    try:
        listener = metrics.workflow_transition if metrics is not None else None
        engine = WorkflowEngine(runtime.store, broker, on_transition=listener)
        runtime.with_store_retry("advance workflow", lambda: engine.advance(workflow_id))
    except ReliableError as exc:
        logger.warning("workflow %s: advancing it failed (%s); the recovery loop will", workflow_id, exc)


def alert(runtime: Runtime, context: JobContext, decision: Decision) -> None:
    """Record the decision's alert on the job (an error log when the store cannot)."""
    try:
        runtime.store.record_event(context.job_id, "alert", worker_id=runtime.worker_id,
                                   error_class=decision.error_class, reason=decision.reason,
                                   detail={"owner": context.contract.owner, **decision.as_detail()})
    except StoreError:
        logger.error("job %s: could not record alert: %s", context.job_id, decision.reason)


def escalate(runtime: Runtime, context: JobContext, overdue: float) -> None:
    """Record the heartbeat's termination of a job running past its stop grace."""
    try:
        runtime.store.record_event(context.job_id, "escalation", worker_id=runtime.worker_id,
                                   detail={"overdue_seconds": round(overdue, 3),
                                           "stop_grace": context.contract.stop_grace,
                                           "action": "terminate_thread"})
    except StoreError:
        logger.error("job %s: could not record the escalation", context.job_id)
