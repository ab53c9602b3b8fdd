"""`current_job()`: what an actor sees of its job — checkpoint, operation keys, fencing, control."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from dramatiq.middleware import raise_thread_exception

from ..errors import JobCancelled, JobInterrupted, JobPaused, JobStopped, LeaseLost, LeaseLostInterrupt
from ..states import JobStatus
from ..store import Claim, LeaseStatus, StateStore
from ..store.retrying import retry_while_unavailable
from ..tracecontext import TraceParent, new_trace_id, span_id_for, trace_id_from

if TYPE_CHECKING:
    from ..limits.gate import Admission
    from ..policy import JobContract

__all__ = ["CheckpointCodec", "Delivery", "JobContext", "current_job", "in_job_run"]

T = TypeVar("T")

_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("reliable_job", default=None)


class FastRun:
    """The fast-path run of a job (it has no JobContext): the job and trace the messages it sends
    are linked to, as a durable job's are through `_current`. The trace context is worked out when
    a message first asks for it (`trace()`, once): most runs send none."""

    __slots__ = ("_trace", "_traceparent", "job_id")

    def __init__(self, job_id: str, trace: Callable[[], TraceParent]) -> None:
        self.job_id = job_id
        self._trace = trace
        self._traceparent: TraceParent | None = None

    @property
    def traceparent(self) -> TraceParent:
        """The W3C trace context of this run: what the messages it sends carry."""
        if self._traceparent is None:
            self._traceparent = self._trace()
        return self._traceparent


_fast_run: contextvars.ContextVar[FastRun | None] = contextvars.ContextVar("reliable_fast_run", default=None)


def in_job_run() -> bool:
    """Whether the calling thread runs a job: a durable attempt (`current_job`) or a fast-path run.
    A send from there holds the job's message: its store writes wait like the job's own, bounded
    by the lease, never by a send_timeout (reliable.worker.runtime, reliable.worker.publishing)."""
    return _current.get() is not None or _fast_run.get() is not None


def _boundary() -> None:
    """A call: a bytecode boundary where a pending async exception is delivered."""


def current_job() -> JobContext:
    """The job the calling actor is running; RuntimeError outside a reliable-tracked actor (or on
    the fast path, until a failure moves the job to the durable path)."""
    job = _current.get()
    if job is None:
        raise RuntimeError("current_job() is only available inside an actor tracked by reliable, and not on "
                           "the fast path (fast_path=True: no claim, lease or checkpoints before a success)")
    return job


class CheckpointCodec(Protocol):
    """How an actor stores checkpoint values JSON cannot carry (declare `checkpoint_codec=` on the actor).

    `encode` turns the actor's value into one that round-trips through JSON; `decode` turns it
    back when the next attempt reads `checkpoint_value`.
    """

    def encode(self, value: Any) -> Any:
        """The JSON-ready form of `value`."""

    def decode(self, data: Any) -> Any:
        """The actor's value from its JSON form."""


@dataclass
class _Control:
    """Control flags as last seen by a checkpoint or heartbeat (guarded by JobContext._lock)."""

    status: JobStatus = JobStatus.RUNNING
    pause_requested: bool = False
    cancel_requested: bool = False
    lease_lost: bool = False
    stop_requested_at: float | None = None


@dataclass
class JobContext:
    """One running attempt of a job, as seen from inside the actor.

    `checkpoint(value)` is the safe point: it durably records progress (fenced by the lease) and is
    where a pause, stop, cancel or lost lease is observed — it then raises JobPaused, JobStopped,
    JobCancelled or LeaseLostInterrupt, which the middleware turns into the right transition.
    These derive from BaseException, so `except Exception:` in the actor does not swallow them.
    """

    store: StateStore
    claim: Claim
    contract: JobContract
    worker_id: str
    lease_ttl: float
    #: The longest wait between tries of a write while the store is unreachable (see retry_while_unavailable).
    store_retry_cap: float = 2.0
    codec: CheckpointCodec | None = None
    #: The attempt's span id: the OpenTelemetry span's when tracing is on, else `span_id_for(attempt_id)`.
    span_id: str | None = None
    thread_id: int = field(default_factory=threading.get_ident)
    _control: _Control = field(default_factory=_Control)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_actor: bool = False
    #: The actor's run is over (`leave`): a lease lost from now on has nothing left to stop.
    _over: bool = False

    # -- identity --------------------------------------------------------------------------------

    @property
    def job_id(self) -> str:
        """The job's id (the Dramatiq message_id)."""
        return self.claim.job.job_id

    @property
    def attempt(self) -> int:
        """1 for the first attempt, 2 for the next..."""
        return self.claim.job.attempt

    @property
    def attempt_id(self) -> str:
        """The id of this attempt."""
        return self.claim.attempt_id

    @property
    def fencing_token(self) -> int:
        """The lease id: pass it to downstream systems so they can reject writes of stale workers."""
        return self.claim.lease_id

    @property
    def trace_id(self) -> str | None:
        """The job's trace id."""
        return self.claim.job.trace_id

    @property
    def traceparent(self) -> TraceParent:
        """The W3C trace context of this attempt: what the messages it sends carry."""
        trace_id = trace_id_from(self.trace_id) if self.trace_id else new_trace_id()
        return TraceParent(trace_id, self.span_id or span_id_for(self.attempt_id))

    @property
    def checkpoint_value(self) -> Any:
        """The last committed checkpoint (None on a fresh start): where to resume from."""
        return self._checkpoint

    @property
    def resumed(self) -> bool:
        """Whether this attempt starts from a checkpoint left by an earlier attempt."""
        return self.claim.job.checkpoint is not None

    # -- workflows -------------------------------------------------------------------------------

    @property
    def workflow_id(self) -> str | None:
        """The workflow (or Dramatiq pipeline/group) the job belongs to, if any."""
        return self.claim.job.workflow_id

    @property
    def workflow_node(self) -> str | None:
        """The workflow node this job runs (None outside a workflow declared with reliable.workflow)."""
        node = (self.claim.job.message.get("options") or {}).get("workflow_node")
        return str(node) if node else None

    def parent_states(self) -> dict[str, str | None]:
        """Each parent node's state: what a fan-in with trigger="all_done" reports on.

        A parent that ran has its job's status; one that never ran has the state the workflow derives
        for it (UPSTREAM_FAILED, SKIPPED, CANCELLED, BLOCKED: reliable.workflows.planning), as
        `reliable workflow show` prints it.
        """
        parents = self._parents()
        states: dict[str, str | None] = {name: parent["status"] for name, parent in parents.items()}
        workflow_id = self.workflow_id
        if workflow_id is not None and any(state is None for state in states.values()):
            from ..store.workflows import WorkflowStore
            from ..workflows.planning import node_states

            derived = self._store_call("parent states",
                                       lambda: node_states(WorkflowStore(self.store).snapshot(workflow_id)))
            states = {name: derived.get(name) if state is None else state for name, state in states.items()}
        return states

    def parent_results(self) -> dict[str, Any]:
        """Each parent node's result, read from the store: None for a parent that did not succeed.

        Raises WorkflowResultUnavailable for a parent that succeeded but whose result could not be
        kept (larger than the store's limit, or not JSON): the message says which and why.
        """
        import json

        from ..errors import WorkflowResultUnavailable

        results: dict[str, Any] = {}
        for name, parent in self._parents().items():
            if parent["status"] != JobStatus.SUCCEEDED.value:
                results[name] = None
            elif parent["result"] is None and parent["result_note"]:
                raise WorkflowResultUnavailable(f"workflow node {name!r}: {parent['result_note']}")
            else:
                results[name] = None if parent["result"] is None else json.loads(parent["result"])
        return results

    def _parents(self) -> dict[str, dict[str, Any]]:
        from ..store.workflows import WorkflowStore

        return self._store_call("parent results", lambda: WorkflowStore(self.store).parent_results(self.job_id))

    def __post_init__(self) -> None:
        stored = self.claim.job.checkpoint
        self._checkpoint: Any = stored if self.codec is None or stored is None else self.codec.decode(stored)
        #: Units applied whose record could not be written before the attempt ended (see record_effect).
        self.unrecorded_effects: list[str] = []

    def _store_call(self, what: str, call: Callable[[], T]) -> T:
        """A write from inside the actor: waits out a store outage like claim and completion do."""
        return retry_while_unavailable(call, what=f"job {self.job_id}: {what}", max_delay=self.store_retry_cap,
                                       note=" (message kept unacked)", hold=True)

    # -- progress --------------------------------------------------------------------------------

    def checkpoint(self, value: Any) -> None:
        """Durably record progress, renew the lease, observe control requests.

        `value` must round-trip through JSON (None, bool, int, float, str, lists, dicts with str
        keys) unless the actor declares a `checkpoint_codec`: TypeError names the offending type.
        While the store cannot be reached this waits (the lease is kept by the heartbeat), so an
        outage never turns into a failed attempt.
        """
        data = value if self.codec is None else self.codec.encode(value)
        try:
            lease = self._store_call("checkpoint", lambda: self.store.save_checkpoint(
                self.job_id, self.fencing_token, data, lease_ttl=self.lease_ttl, worker_id=self.worker_id))
        except LeaseLost:
            self.mark_lease_lost()
            raise LeaseLostInterrupt(f"job {self.job_id}: lease {self.fencing_token} lost") from None
        self._checkpoint = value
        self.observe(lease)
        self.check_control()

    def check_control(self) -> None:
        """Raise the pending control interrupt (as last seen by a heartbeat) without writing anything.

        A job paused or stopped here resumes from its last committed checkpoint.
        """
        with self._lock:
            control = self._control
            if control.lease_lost:
                raise LeaseLostInterrupt(f"job {self.job_id}: lease {self.fencing_token} lost")
            if control.status is JobStatus.STOPPING:
                if control.cancel_requested:
                    raise JobCancelled(f"job {self.job_id}: cancel requested")
                raise JobStopped(f"job {self.job_id}: stop requested")
            if control.pause_requested:
                raise JobPaused(f"job {self.job_id}: pause requested")

    def operation_key(self, item: Any) -> str:
        """A stable key for one unit of work of this job: the same on every attempt (idempotency key)."""
        return f"{self.job_id}:{item}"

    def record_effect(self, item: Any, result: Any = None) -> bool:
        """Record that the unit `item` was applied; False when it had been already (a replay, counted).

        Waits while the store cannot be reached. If the attempt ends before the record lands (the
        thread is interrupted while waiting), the unit is noted at the end of the attempt, and a later
        attempt's first record of it is reported as a possible duplicate (`possible_duplicate_effect`
        event and metric) instead of silently counting as the first.
        """
        key = self.operation_key(item)
        self.unrecorded_effects.append(key)
        try:
            effect = self._store_call("record_effect", lambda: self.store.record_effect(
                self.job_id, self.fencing_token, key, attempt_id=self.attempt_id, result=result,
                worker_id=self.worker_id))
        except LeaseLost:
            self.mark_lease_lost()
            raise LeaseLostInterrupt(f"job {self.job_id}: lease {self.fencing_token} lost") from None
        self.unrecorded_effects.remove(key)
        return effect.applied

    def effect_applied(self, item: Any) -> bool:
        """Whether the unit `item` was already recorded as applied (by this or an earlier attempt)."""
        key = self.operation_key(item)
        return self._store_call("effect_applied", lambda: self.store.effect_recorded(self.job_id, key))

    # -- used by the middleware and the heartbeat thread ----------------------------------------

    def observe(self, lease: LeaseStatus) -> None:
        """Take the control flags a checkpoint or heartbeat read back."""
        with self._lock:
            self._control.status = lease.status
            self._control.pause_requested = lease.pause_requested
            self._control.cancel_requested = lease.cancel_requested
            self._control.stop_requested_at = lease.stop_requested_at

    def mark_lease_lost(self) -> None:
        """Remember that the lease is gone: every further write would be a stale commit."""
        with self._lock:
            self._control.lease_lost = True

    @property
    def lease_lost(self) -> bool:
        """Whether a heartbeat or write found the lease reassigned."""
        with self._lock:
            return self._control.lease_lost

    def control_snapshot(self) -> _Control:
        """A copy of the flags as last seen."""
        with self._lock:
            c = self._control
            return _Control(c.status, c.pause_requested, c.cancel_requested, c.lease_lost, c.stop_requested_at)

    def adopt(self, span_id: str | None) -> None:
        """The calling thread runs this attempt, with this span: a claim held ahead was made by
        another thread's batch (reliable.worker.ahead), so interrupts must reach this one."""
        with self._lock:
            self.thread_id, self.span_id = threading.get_ident(), span_id

    def enter(self) -> bool:
        """Make this the current job of the calling thread (the actor is about to run); False, and
        nothing done, when the lease was lost before (a claim held ahead, lost while it waited):
        the run must not start. Decided under the lock `lose_lease` takes."""
        with self._lock:
            if self._control.lease_lost:
                return False
            self._in_actor = True
        _current.set(self)
        return True

    def leave(self) -> None:
        """The actor returned or raised: no more interrupts may be delivered to this thread.

        An interrupt the heartbeat scheduled just before can still land here (async exceptions
        fire at the next bytecode boundary): it is absorbed, the attempt is already over.
        """
        for _ in range(10):
            try:
                with self._lock:
                    self._in_actor, self._over = False, True
                _current.set(None)
                _boundary()
                return
            except JobInterrupted:
                continue

    def lease_matters(self) -> bool:
        """Whether losing the lease now stops a run: not known lost, and the actor running or yet to
        run (a claim held ahead). Once it returned, the attempt is committing its outcome."""
        with self._lock:
            return not self._control.lease_lost and not self._over

    def lose_lease(self) -> bool:
        """Mark the lease lost if it matters (`lease_matters`); whether it was marked. A run not
        begun never begins (`enter`); a running one is then interrupted by the caller."""
        with self._lock:
            if self._control.lease_lost or self._over:
                return False
            self._control.lease_lost = True
            return True

    def interrupt(self, exc: type[BaseException]) -> None:
        """Raise `exc` in the attempt's thread while its actor runs (as Dramatiq's TimeLimit does);
        nothing once the actor returned (`leave` holds the same lock)."""
        with self._lock:
            if self._in_actor:
                raise_thread_exception(self.thread_id, exc)  # type: ignore[no-untyped-call]


class Delivery(threading.local):
    """What the worker thread's current delivery holds between Dramatiq's hooks (per thread, not
    per job id: a stale attempt and its re-claimed successor can run one job in two threads)."""

    #: The job id of a fast-path run (nothing claimed before it), and the attempt id chosen for it.
    fast: str | None = None
    fast_attempt: str | None = None
    #: The running attempt of a won claim.
    context: JobContext | None = None
    #: The limits admission whose slot this delivery holds.
    limits: Admission | None = None
    #: The message id reliable itself skipped (a refused claim, a deferral): its skip is not final.
    own_skip: str | None = None
