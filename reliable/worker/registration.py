"""How a message becomes a job: the one public way, for producers, workflows, schedules and follow-ups.

`Registration.new_job` turns a message of a tracked actor into the `NewJob` to register (None for
an untracked actor, or a message whose job exists: re-dispatched, retried, promoted from the delay
queue). On the way it:
- refuses a message whose behaviour-choosing options break their rules (`options.option_problem`:
  MessageRefused naming the option, nothing registered or published);
- removes the options a message may not set (they choose code or loosen the contract: the actor's
  declaration and the policy decide them), reported by `untrusted_ignored` with an event;
- links the job to the job whose run sent it (parent, trace context) and to its workflow (a
  declared or inherited id, its group's, or a pipeline's first step's id, down every later step);
- stores the contract declared in code with the job, so a process that does not import the actor
  (recovery, the CLI) decides with it; marks the message `REGISTERED` on every copy.
`register` and `register_many` write the jobs (the producer's `before_enqueue` and `enqueue_many`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import dramatiq

from ..errors import ActorContractError, ConfigError, MessageRefused, StoreError
from ..options import SEND_TIMEOUT, STORED_CONTRACT, option_problem, own_queue, strip_untrusted
from ..policy import Policy
from ..store import NewJob, StateStore
from ..tracecontext import TraceParent
from ..tracing import Tracing
from .context import FastRun, JobContext, _current, _fast_run
from .plans import Plans
from .settings import check_send_timeout

__all__ = ["REGISTERED", "Registration", "StoreAccess", "enqueue_hooks_after", "group_of", "send_timeout_of"]

logger = logging.getLogger("reliable.middleware")

#: Message option marking a message whose job is already in the store.
REGISTERED = "reliable_registered"


def enqueue_hooks_after(broker: dramatiq.Broker, reliable: object) -> list[str]:
    """The middlewares after `reliable` in the broker's list that have a `before_enqueue` of their own.

    Their hook runs after the job is registered: an option it sets that chooses behaviour
    (`options.DELIVERY_OPTIONS`, e.g. time_limit, on_failure) is not in the registered digest, so
    every delivery of the job would be refused as not its message (docs/compatibility.md).
    """
    middleware = list(getattr(broker, "middleware", ()))
    if reliable not in middleware:
        return []
    later = middleware[middleware.index(reliable) + 1:]
    return [type(m).__name__ for m in later
            if getattr(type(m), "before_enqueue", None) is not dramatiq.Middleware.before_enqueue]


class StoreAccess(Protocol):
    """How registration reaches the store (`reliable.worker.runtime.Runtime`)."""

    @property
    def store(self) -> StateStore:
        """This process's store."""

    def with_store_retry(self, what: str, call: Callable[[], Any]) -> Any:
        """Run a store call, waiting while the store is unreachable."""

    def send(self, what: str, call: Callable[[], Any], timeout: float | None = None) -> Any:
        """Run a send's store call: a configuration error at once, an outage waited out for `timeout`
        (default: install's send_timeout), then SendTimedOut."""

    def send_wait(self, timeout: float | None = None) -> float | None:
        """How long a send may wait behind other threads' writes (None: no bound, inside a job's run)."""


class Registration:
    """Turns messages into jobs (see the module doc) with the installed policy, plans and store."""

    def __init__(self, plans: Plans, runtime: StoreAccess, tracing: Tracing | None, *,
                 synchronous: bool = True) -> None:
        self.plans = plans
        self.runtime = runtime
        self.tracing = tracing
        #: install's send_commit: False, a send's registration does not wait for its WAL flush.
        self.synchronous = synchronous
        self._bulk = threading.local()  # the ids `register_many` registered, while it publishes them
        self._orders_checked: set[int] = set()  # brokers whose middleware order was looked at

    @property
    def policy(self) -> Policy:
        """The policy contracts are computed with."""
        return self.plans.policy

    def tracked(self, broker: dramatiq.Broker, actor_name: str) -> bool:
        """Whether reliable tracks this actor (all do, unless declared with `reliable=False`)."""
        self.plans.broker = self.plans.broker or broker
        return self.plans.plan(actor_name).tracked

    def tracked_actor(self, broker: dramatiq.Broker, actor_name: str, *, who: str,
                      error: type[ConfigError] = ConfigError) -> Any:
        """The actor `who` (a workflow node, a schedule) names: `error` when the broker declares no
        such actor or reliable does not track it (its jobs would not be kept in the store)."""
        try:
            actor = broker.get_actor(actor_name)
        except dramatiq.errors.ActorNotFound:
            raise error(f"{who}: no actor named {actor_name!r} is declared on the broker (import the module that "
                        "declares it first)") from None
        if not self.tracked(broker, actor_name):
            raise error(f"{who}: actor {actor_name!r} is declared with reliable=False: it is not tracked by reliable, "
                        "so its jobs would not be kept in the store")
        return actor

    def rate_limited_rule(self, broker: dramatiq.Broker, message: Any, exception: BaseException) -> str | None:
        """The rule that classifies `exception` as rate limited for this tracked message, else None
        (used to keep Dramatiq's worker log from calling an expected 429 an unhandled error)."""
        actor, queue = str(message.actor_name), own_queue(str(message.queue_name), message.options)
        if not self.tracked(broker, actor):
            return None
        contract = self.plans.contract(actor, queue, dict(message.options))
        error_class, _rule, label = self.policy.classify(exception, actor, queue, contract)
        spec = self.policy.classes.get(error_class)
        return (label or error_class) if spec is not None and spec.rate_limited else None

    def new_job(self, broker: dramatiq.Broker, message: dramatiq.Message[Any],
                delay: int | None) -> tuple[NewJob, tuple[str, ...]] | None:
        """The job to register for `message` and the names of the options it may not set (removed)."""
        if not self.tracked(broker, message.actor_name):
            return None
        options = message.options
        if options.get(REGISTERED) or ("eta" in options and delay is None):
            return None  # re-dispatched, retried or promoted from the delay queue: the job exists
        if (bad := option_problem(options)) is not None:  # nothing registered, nothing published
            raise MessageRefused(f"options.{bad[0]}", bad[1], actor=message.actor_name)
        # Removed from the message that is published and stored (so no later reader can trust
        # them by mistake), and recorded on the job.
        ignored = strip_untrusted(options)
        link: JobContext | FastRun | None = _current.get() or _fast_run.get()
        sender = self.tracing.current() if self.tracing is not None else None
        if link is not None:
            options.setdefault("parent_job_id", link.job_id)
            sender = sender or link.traceparent
        options.update(TraceParent.for_message(options, sender=sender, job_id=message.message_id).as_options())
        options[REGISTERED] = True  # travels with every copy of the message, see above
        plan = self.plans.plan(message.actor_name)
        link_workflow(message, plan.options)
        canonical_queue = own_queue(message.queue_name, options)  # a producer's OWN_QUEUE was stripped above
        contract = self.plans.contract(message.actor_name, canonical_queue)
        data = _as_dict(message)
        data["queue_name"] = canonical_queue
        data["options"] = {k: v for k, v in options.items() if k != "eta"}
        if plan.declared:
            data["options"][STORED_CONTRACT] = dict(plan.declared)
        return NewJob(
            job_id=message.message_id, queue=canonical_queue, actor=message.actor_name, message=data,
            owner=contract.owner, workflow_id=options.get("workflow_id"),
            trace_id=options.get("trace_id"), parent_job_id=options.get("parent_job_id"),
            checkpoint_schema=contract.checkpoint_schema, delay=(delay / 1000.0) if delay else None,
        ), ignored

    def untrusted_ignored(self, job: NewJob, ignored: tuple[str, ...]) -> None:
        """Log and record the options removed from `job`'s message (names only: a value may be a
        code path the producer wanted run)."""
        if not ignored:
            return
        logger.warning("job %s: message options %s ignored: the actor's declaration and the policy decide them",
                       job.job_id, ", ".join(ignored))
        try:
            self.runtime.store.record_event(job.job_id, "untrusted_options_ignored",
                                            detail={"options": list(ignored)},
                                            reason="a message may not set the job contract or name code")
        except StoreError:
            logger.warning("job %s: could not record the ignored message options", job.job_id, exc_info=True)

    def registered_in_bulk(self, message: dramatiq.Message[Any]) -> bool:
        """Whether `register_many` registered `message`'s job (it is publishing it now)."""
        return message.message_id in getattr(self._bulk, "registered", ())

    def register(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        """Register `message`'s job (PENDING) unless it has one."""
        self.check_order(broker)
        timeout = send_timeout_of(message)
        prepared = self.new_job(broker, message, delay)
        if prepared is not None:
            job, ignored = prepared
            wait = self.runtime.send_wait(timeout)
            deadline = None if wait is None else time.monotonic() + wait

            def register() -> bool:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                return self.runtime.store.register(job, timeout=left, synchronous=self.synchronous)

            self.runtime.send(f"send {job.job_id}", register, timeout)
            self.untrusted_ignored(job, ignored)

    def check_order(self, broker: dramatiq.Broker) -> None:
        """Warn once per broker about middlewares whose before_enqueue runs after the registration
        (`enqueue_hooks_after`): the fix is to add them before reliable's."""
        if id(broker) in self._orders_checked:
            return
        self._orders_checked.add(id(broker))
        reliable = next((m for m in getattr(broker, "middleware", ()) if getattr(m, "registration", None) is self),
                        None)
        later = enqueue_hooks_after(broker, reliable) if reliable is not None else []
        if later:
            logger.warning(
                "middleware %s runs its before_enqueue after reliable registered the job: a behaviour-choosing "
                "option it sets (time_limit, on_failure, ...) would make every delivery of the job a "
                "delivery_mismatch, refused and dead-lettered. Add it before reliable: "
                "broker.add_middleware(m, before=reliable.ReliableMiddleware), or before reliable.install()",
                ", ".join(later))

    def register_many(self, broker: dramatiq.Broker, messages: list[dramatiq.Message[Any]]) -> int:
        """Register many messages in one transaction, then publish them; how many were new jobs."""
        self.check_order(broker)
        timeouts = [t for message in messages if (t := send_timeout_of(message)) is not None]
        prepared = [new for message in messages if (new := self.new_job(broker, message, None)) is not None]
        jobs = [job for job, _ in prepared]
        created = int(self.runtime.send(f"send {len(jobs)} jobs", lambda: self.runtime.store.register_many(
            jobs, synchronous=self.synchronous), max(timeouts, default=None)))
        for job, ignored in prepared:
            self.untrusted_ignored(job, ignored)
        self._bulk.registered = {job.job_id for job in jobs}
        try:
            for message in messages:
                broker.enqueue(message)
        finally:
            self._bulk.registered = set()
        return created


def _as_dict(message: dramatiq.Message[Any]) -> dict[str, Any]:
    """`message.asdict()`, its field names listed once per message class (`dataclasses.fields` per
    call was about a microsecond of every send)."""
    cls = type(message)
    if not issubclass(cls, dramatiq.Message) or cls.asdict is not dramatiq.Message.asdict:
        return message.asdict()  # a proxy's (MessageProxy), or a subclass's own: as it says
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(field.name for field in dataclasses.fields(message))
    return {name: getattr(message, name) for name in names}


#: The field names of each message class `_as_dict` met.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def send_timeout_of(message: dramatiq.Message[Any]) -> float | None:
    """The `send_timeout` option of `message` (seconds; None: install's), removed from its options:
    it is for this send only, never stored or published. A value that is not one raises
    ActorContractError (a MiddlewareError: Dramatiq lets it through `send()`, nothing is published)."""
    if SEND_TIMEOUT not in message.options:
        return None
    try:
        return check_send_timeout(message.options.pop(SEND_TIMEOUT), f"message option {SEND_TIMEOUT!r}")
    except ConfigError as exc:
        raise ActorContractError(f"actor {message.actor_name}: {exc}") from None


def group_of(options: Any) -> str | None:
    """The group a message's job belongs to: its own `group_completion_uuid`, or for a pipeline in
    a group, the one on its last step."""
    if not isinstance(options, dict):
        return None
    own = options.get("group_completion_uuid")
    return str(own) if own else _group_at_end(options)


def _group_at_end(options: dict[str, Any]) -> str | None:
    """The group a pipeline belongs to: a group of pipelines marks only each pipeline's last step."""
    step = options.get("pipe_target")
    while isinstance(step, dict):
        step_options = step.get("options") or {}
        if step_options.get("group_completion_uuid"):
            return str(step_options["group_completion_uuid"])
        step = step_options.get("pipe_target")
    return None


def link_workflow(message: dramatiq.Message[Any], actor_options: Any) -> None:
    """Give a message the workflow it belongs to: a declared or inherited `workflow_id`, its
    group's completion id (for a pipeline in a group: the id on its last step), or, for the first
    step of a pipeline, its own id; every later step (the nested `pipe_target`s) carries the same id."""
    options = message.options
    workflow_id = (options.get("workflow_id") or actor_options.get("workflow_id")
                   or group_of(options)
                   or (message.message_id if options.get("pipe_target") is not None else None))
    if not workflow_id:
        return
    options["workflow_id"] = workflow_id
    step = options.get("pipe_target")
    while isinstance(step, dict):
        step_options = step.setdefault("options", {})
        step_options.setdefault("workflow_id", workflow_id)
        step = step_options.get("pipe_target")
