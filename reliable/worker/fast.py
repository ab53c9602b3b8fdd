"""The fast path's start: a delivery whose success nothing has to follow runs without a claim.

An actor with `fast_path=True` writes nothing before its run: the delivery only looks that the job
is PENDING (one read for the fast-path messages waiting in the process, each answer at most a
second old: reliable.worker.waiting), chooses the run's attempt id (the messages it sends name its
span) and runs. After the run (`reliable.worker.attempt.FastEnd`) a success commits in one
compare-and-set, a failure claims the job so that the durable path decides it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..limits.gate import fast_path_allowed
from ..states import JobStatus
from ..tracecontext import span_id_for
from . import spans
from .context import FastRun, _fast_run
from .continuations import follows_success
from .leases import new_attempt_id
from .waiting import Row

if TYPE_CHECKING:
    from ..limits.gate import LimitGate
    from ..tracing import Tracing
    from .context import Delivery
    from .plans import Plans
    from .runtime import Runtime
    from .waiting import Looks

__all__ = ["FastStart"]


class FastStart:
    """The fast path before the run: the process's store (`runtime`), the actors' plans and limits
    (`gate`), the batched looks, this thread's delivery and the attempt spans."""

    __slots__ = ("gate", "looks", "plans", "runtime", "thread", "tracing")

    def __init__(self, runtime: Runtime, plans: Plans, gate: LimitGate, looks: Looks, thread: Delivery,
                 tracing: Tracing | None) -> None:
        self.runtime, self.plans, self.gate, self.looks = runtime, plans, gate, looks
        self.thread, self.tracing = thread, tracing

    def start(self, message: Any, fields: Any, digest: str | None, at_home: bool) -> bool:
        """Whether this delivery runs on the fast path, its run set up (its job PENDING); False:
        the durable claim decides (a retry, a paused or finished job, an unknown message). Raises
        ClaimRefused when the delivery is not its job's message."""
        if not self._eligible(fields, at_home):
            return False
        job_id = fields.message_id
        if self._look(job_id, digest) is not JobStatus.PENDING:
            return False
        thread = self.thread
        thread.fast = job_id
        # The run's attempt id is chosen now, so the messages it sends name its span.
        attempt_id = thread.fast_attempt = new_attempt_id()
        tracing = self.tracing
        if tracing is None:  # no span to start: the trace is worked out only for a message sent
            _fast_run.set(FastRun(job_id, lambda: spans.message_trace(message).child(span_id_for(attempt_id))))
            return True
        trace = spans.message_trace(message)
        span_id = spans.start(tracing, message, attempt=None, attempt_id=attempt_id, parent=trace)
        _fast_run.set(FastRun(job_id, lambda: trace.child(span_id or span_id_for(attempt_id))))
        return True

    def _look(self, job_id: str, digest: str | None) -> JobStatus | None:
        """The fast path's look: the job's state, batched with the fast-path jobs waiting in the
        process when their queue can be read (reliable.worker.waiting), else read alone."""
        runtime, looks = self.runtime, self.looks
        if not looks.batched:
            alone: JobStatus | None = runtime.with_store_retry("job_status", lambda: runtime.store.job_status(
                job_id, delivery_digest=digest))
            return alone
        found: Row = runtime.with_store_retry("job_status", lambda: looks.look(job_id))
        return runtime.store.looked_status(job_id, found, delivery_digest=digest)

    def _eligible(self, fields: Any, at_home: bool) -> bool:
        """Whether this delivery may run on the fast path: nothing follows its success (a pipeline
        step, on_success, a group's completion) that would have to be registered with it."""
        plans = self.plans
        broker = plans.broker
        limited = self.gate.spec_for(broker, fields.actor_name) if broker is not None else None
        if not fast_path_allowed(limited):
            return False  # a concurrency slot is tied to a claim's lease, whatever the policy says
        if fields.options.get("group_completion_uuid") or fields.options.get("workflow_node"):
            return False  # a group's barrier or a workflow node's result commits with the success
        if not at_home:  # its home queue (`home_queue`) is not the queue its body names
            # On a routed retry's lane: the claim reads the job's own queue from the store, which
            # a message cannot misstate (a routed job is PENDING after a resume or a crash only).
            return False
        return not follows_success(fields, plans.options(fields.actor_name))
