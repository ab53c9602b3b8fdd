"""The Dramatiq middleware: Dramatiq's hooks, each handing over to the module that owns the step.

before_enqueue, enqueue_many: the job is registered PENDING before its message is published
(`registration`). before_process_message: a paused queue's delivery put off (`paused`), limits
(`admission`), then the claim (`claim`).
after_process_message: the attempt's end (`attempt`): its outcome (`outcome`, pure) written fenced
by the lease with what follows it (`completion`), then acted on (`after_commit`).
after_skip_message: another middleware's skip ends the job (`skips`, `attempt`). Worker boot and
shutdown: the per-process threads (`boot`, `runtime`).

The steps are built once here (`_wire`), each with the few collaborators it uses; none reads the
middleware back. A collaborator replaced later (`looks`, `paused_queues`, `metrics`) wires them again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, MiddlewareError, SkipMessage

from ..compat.dramatiq_internals import waiting_messages, work_queue_readable
from ..errors import ActorContractError, ConfigError, PolicyError, RegistrationFailed
from ..metrics import Metrics
from ..options import ACTOR_OPTIONS
from ..policy import JobContract, Policy
from ..schedules import Schedule
from ..store import StateStore
from . import runtime, spans
from .acks import HeldAcks
from .admission import Limits
from .after_commit import escalate
from .ahead import ClaimsAhead
from .attempt import Attempt, FastEnd, Skipped
from .boot import boot
from .claim import AheadRule, Claim, DurableClaim
from .completion import Completion, Decisions, FollowUps
from .context import Delivery
from .delivery import fields
from .fast import FastStart
from .groups import Groups, TrackedGroupCallbacks
from .heartbeat import Heartbeat
from .leases import Leases
from .paused import PausedDeliveries, PausedQueues
from .plans import Plans
from .publishing import PublishDeadlines
from .registration import Registration
from .settings import DEFAULT_SEND_TIMEOUT, Settings
from .skips import skip_of
from .waiting import Looks, waiting_ids

__all__ = ["ReliableMiddleware"]

logger = logging.getLogger("reliable.middleware")


class ReliableMiddleware(Middleware):
    """Track every message of the broker's actors as a durable job with leases and fencing.

    The constructor's options (store, policy, lease_ttl, heartbeat_interval, recovery,
    recovery_interval, sweep_after, listeners, metrics, json_logs, max_connections, group_commit,
    tracing, schedules, replication, send_timeout, send_commit, claims_ahead, log_events,
    interrupt_unrenewed) are documented in `reliable.worker.settings.Settings`.
    """

    def __init__(self, store: StateStore | str, *, policy: Policy | None = None,
                 lease_ttl: float | None = None, heartbeat_interval: float | None = None,
                 recovery: bool = True, recovery_interval: float | None = None,
                 sweep_after: float | None = None,
                 listeners: tuple[Callable[[dict[str, Any]], None], ...] = (),
                 metrics: Metrics | bool = True, json_logs: bool = True,
                 max_connections: int | None = None, group_commit: bool = True, tracing: object = False,
                 schedules: Sequence[Schedule] | str | os.PathLike[str] | None = None,
                 replication: str = "warn", send_timeout: float = DEFAULT_SEND_TIMEOUT,
                 claims_ahead: bool = False, strict_names: bool = False, log_events: str = "transitions",
                 send_commit: str = "synchronous", interrupt_unrenewed: bool = False) -> None:
        self.settings = s = Settings.resolve(
            store, policy=policy, lease_ttl=lease_ttl, heartbeat_interval=heartbeat_interval, recovery=recovery,
            recovery_interval=recovery_interval, sweep_after=sweep_after, listeners=listeners, metrics=metrics,
            json_logs=json_logs, max_connections=max_connections, group_commit=group_commit, tracing=tracing,
            schedules=schedules, replication=replication, send_timeout=send_timeout, claims_ahead=claims_ahead,
            strict_names=strict_names, log_events=log_events, send_commit=send_commit,
            interrupt_unrenewed=interrupt_unrenewed)
        self.policy, self.lease_ttl, self.heartbeat_interval = s.policy, s.lease_ttl, s.heartbeat_interval
        self.recovery_enabled, self.recovery_interval, self.sweep_after = s.recovery, s.recovery_interval, s.sweep_after
        self.replication, self.group_commit, self.max_connections = s.replication, s.group_commit, s.max_connections
        self._metrics, self.tracing, self.schedules = s.metrics, s.tracing, s.schedules
        self.runtime = runtime.Runtime(s, on_escalation=lambda job, late: escalate(self.runtime, job, late))
        self.plans = Plans(s.policy)
        self.registration = Registration(self.plans, self.runtime, s.tracing,
                                         synchronous=s.send_commit == "synchronous")
        self.publishing = PublishDeadlines(s.send_timeout)
        #: What this worker thread's delivery holds between the hooks.
        self.delivery = Delivery()
        #: Group barriers in the store (reliable.worker.groups).
        self.groups = Groups(self.runtime, self.registration)
        #: The messages that follow an attempt, and the continuation kinds reliable sends (`install`).
        self.follow_ups = FollowUps(self.plans, self.registration)
        #: Concurrency and rate limits declared with `limits=` (reliable.limits).
        self.admission = Limits(self.runtime, self.plans, self.delivery, s.metrics)
        #: The policy's decision on a failed attempt (Dramatiq's Retries' retry_when, set by `install`).
        self.decisions = Decisions(self.runtime, self.plans, self.admission)
        #: The claims taken ahead for the durable messages waiting in the process (reliable.worker.ahead).
        self.ahead = ClaimsAhead()
        #: The acknowledgements held until their fast-path successes commit (reliable.worker.acks).
        self.acks = HeldAcks()
        #: The queues an operator paused, read at most every few seconds (reliable.worker.paused).
        run = self.runtime  # the lambdas below read the process's store, never the middleware
        self._paused_queues = PausedQueues(lambda: run.store, quiet=lambda: run.commands.quiet)
        #: The fast path's looks, batched over the messages waiting in the process (reliable.worker.waiting).
        self._looks = Looks(lambda ids: run.store.job_statuses(ids))
        self._wire()

    def _wire(self) -> None:
        """Build the steps a delivery walks through, each with the collaborators it uses."""
        run, plans, thread, gate, tracing = self.runtime, self.plans, self.delivery, self.admission.gate, self.tracing
        leases = Leases(run, plans, self.admission, thread, tracing)
        rule = AheadRule(self.registration, plans, self._paused_queues, gate)
        #: The durable claim and the claims taken ahead with it.
        self.durable = durable = DurableClaim(run, self.ahead, rule, leases, self.registration, self.groups)
        fast = FastStart(run, plans, gate, self._looks, thread, tracing)
        #: The claim before a run (before_process_message).
        self.claim = Claim(run, plans, PausedDeliveries(self._paused_queues, gate, run), self.admission, fast, durable)
        completion = Completion(run, plans, self._metrics, self.follow_ups, self.decisions, self.groups, self.acks)
        #: The end of an attempt (after_process_message).
        self.attempt = Attempt(thread, leases, completion, FastEnd(run, self.acks, leases, completion, tracing),
                               tracing)
        #: A skipped delivery (after_skip_message).
        self.skipped = Skipped(thread, durable, completion, leases, self.registration)

    @property
    def looks(self) -> Looks:
        """The fast path's batched looks."""
        return self._looks

    @looks.setter
    def looks(self, looks: Looks) -> None:
        self._looks = looks
        self._wire()

    @property
    def paused_queues(self) -> PausedQueues:
        """The paused queues as this process last read them."""
        return self._paused_queues

    @paused_queues.setter
    def paused_queues(self, queues: PausedQueues) -> None:
        self._paused_queues = queues
        self._wire()

    @property
    def metrics(self) -> Metrics | None:
        """The metrics updated, if any."""
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self._wire()

    @property
    def continuation_kinds(self) -> frozenset[str]:
        """The continuation kinds reliable sends for tracked actors (set by `install` from the
        Dramatiq middleware it found: see `reliable.worker.continuations`)."""
        return self.follow_ups.kinds

    @continuation_kinds.setter
    def continuation_kinds(self, kinds: frozenset[str]) -> None:
        self.follow_ups.kinds = kinds

    @property
    def dramatiq_retries(self) -> Any:
        """Dramatiq's Retries middleware of the broker, if any: its `retry_when` applies to tracked actors."""
        return self.decisions.retries

    @dramatiq_retries.setter
    def dramatiq_retries(self, retries: Any) -> None:
        self.decisions.retries = retries

    @property
    def group_callbacks(self) -> TrackedGroupCallbacks | None:
        """The broker's GroupCallbacks, replaced so group barriers live in the store (reliable.worker.groups)."""
        return self.groups.callbacks

    @property
    def actor_options(self) -> set[str]:
        """The options this middleware lets actors declare."""
        return set(ACTOR_OPTIONS)

    @property
    def broker(self) -> dramatiq.Broker | None:
        """The broker whose actors are tracked (the first one a hook saw)."""
        return self.plans.broker

    @broker.setter
    def broker(self, broker: dramatiq.Broker | None) -> None:
        self.plans.broker = broker

    @property
    def store(self) -> StateStore:
        """This process's StateStore (opened on first use after a fork)."""
        return self.runtime.store

    @property
    def worker_id(self) -> str:
        """host:pid:random — the identity written on claims and leases."""
        return self.runtime.worker_id

    def contract_for(self, actor_name: str, queue: str, message_options: dict[str, Any] | None = None) -> JobContract:
        """The job contract of an actor's job on `queue` (see `Plans.contract`)."""
        return self.plans.contract(actor_name, queue, message_options)

    def tracked(self, broker: dramatiq.Broker, actor_name: str) -> bool:
        """Whether reliable tracks this actor (all do, unless declared with `reliable=False`)."""
        return self.registration.tracked(broker, actor_name)

    def adopt_group_callbacks(self, broker: dramatiq.Broker) -> None:
        """Keep group barriers in the store from now on, if the broker has GroupCallbacks (reliable.worker.groups)."""
        self.groups.adopt(broker)

    def before_declare_actor(self, broker: dramatiq.Broker, actor: Any) -> None:
        """Resolve a tracked actor's contract now: a contradiction (e.g. `fast_path=True` with
        `resumable=True`) fails at its declaration (PolicyError naming actor and option)."""
        self.plans.forget()  # a re-declared actor may change its options
        if not actor.options.get("reliable", True):
            return
        try:
            self.plans.check(actor)
            self.admission.gate.declare(actor)
        except (PolicyError, ConfigError) as exc:
            raise ActorContractError(str(exc)) from None

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        """Remember the broker (re-dispatch needs it)."""
        self.broker = broker

    def before_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Start this process's heartbeat and recovery loop (see `reliable.worker.boot`)."""
        boot(broker, worker, installed=self, settings=self.settings, runtime=self.runtime, plans=self.plans,
             registration=self.registration, groups=self.groups, acks=self.acks, metrics=self._metrics)
        if work_queue_readable():  # Dramatiq's private work queue, on the versions verified only
            self.looks.watch(lambda: waiting_ids(worker, self.plans.likely_fast))
            if self.store.group_commit_stats() is not None:  # successes submitted to the group commit
                self.acks.watch(broker, worker, lambda queue: self._all_fast(broker, queue))
                self.store.scope_submitted_callbacks(self._callbacks_scope())
            # Claims ahead ride the claim's group-commit batch: none without one (SQLite, group_commit=False).
            if self.settings.claims_ahead and self.store.group_commit_stats() is not None:
                self.ahead.watch(lambda: waiting_messages(worker), int(getattr(worker, "worker_threads", 0)))
                # An idle process too hands back what no thread took (a busy one also does at each claim).
                self.runtime.every_pass.append(
                    lambda: self.durable.hand_back(self.ahead.overdue(), "not taken in time"))

    def _callbacks_scope(self) -> Callable[[], contextlib.AbstractContextManager[object]]:
        """Around a group-commit batch's callbacks, in the thread that runs them: the metrics'
        counters written once for the batch (Metrics.together), then its acknowledgements sent
        together by that thread (HeldAcks.together): a scrape counts a success once it is acked."""
        metrics, acks = self.settings.metrics, self.acks
        if metrics is None:
            return acks.together

        @contextlib.contextmanager
        def scope() -> Iterator[None]:
            with acks.together(), metrics.together():
                yield

        return scope

    def _all_fast(self, broker: dramatiq.Broker, queue_name: str) -> bool:
        """Whether `queue_name` has actors, all tracked and declared on the fast path."""
        actors = [broker.get_actor(name) for name in broker.get_declared_actors()]
        mine = [actor for actor in actors if actor.queue_name == queue_name]
        return bool(mine) and all(self.tracked(broker, actor.actor_name)
                                  and self.plans.contract(actor.actor_name, queue_name).fast_path for actor in mine)

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Hand back the claims taken ahead (before Dramatiq requeues their messages: another
        worker must find the jobs PENDING; a thread still taking one of them waits, then claims it
        itself), wait for the fast-path successes whose acknowledgements are held (from now on
        each is waited for by its thread), stop the recovery loop and wait for its pass to end; the
        heartbeat keeps running until the worker threads finish."""
        self.durable.hand_back(self.ahead.drain(), "worker shutdown")
        self.acks.drain(worker=worker)  # while the consumers still run: their acknowledgements reach the broker
        self.runtime.stop_recovery()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Hand back a claim ahead whose batch ended during the shutdown, then stop the heartbeat:
        every worker thread has finished its message."""
        self.durable.hand_back(self.ahead.drain(), "worker shutdown")
        if self.ahead.claimed:
            logger.info("claims ahead: %d claimed, %d taken, %d handed back",
                        self.ahead.claimed, self.ahead.taken, self.ahead.handed_back)
        self.runtime.shutdown()
        if self.acks.held:
            logger.info("successes: %d acknowledged after their commit without a wait (%d hand-offs to RabbitMQ), "
                        "%d settled waiting", self.acks.held, self.acks.handoffs, self.acks.settled)
        if self.looks.reads:
            logger.info("fast-path looks: %d looks in %d reads (%d waited for another's read)",
                        self.looks.looks, self.looks.reads, self.looks.waits)

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        """Register the job (PENDING) before its message is published (no-op for a known job_id), then
        bound the publish by what is left of the send's send_timeout (reliable.worker.publishing)."""
        self.publishing.begin(message)
        if not self.registration.registered_in_bulk(message):
            try:
                self._register(broker, message, delay)
            except BaseException:
                self.publishing.end(message)  # this send is over: sending the message again starts afresh
                raise
        self.publishing.arm(broker, message)

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        """The publish went through within the send's time."""
        self.publishing.end(message)

    def _register(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        if self.group_callbacks is None and "group_completion_uuid" in message.options:
            self.adopt_group_callbacks(broker)  # GroupCallbacks added after install: the next groups
        try:
            self.registration.register(broker, message, delay)
        except MiddlewareError:
            raise
        except Exception as exc:
            # Dramatiq logs any other error of a before_enqueue and publishes the message anyway: a message
            # no job row backs. Raised as a MiddlewareError, send() fails instead and nothing is published.
            raise RegistrationFailed(message.message_id, message.actor_name, exc) from exc

    def enqueue_many(self, broker: dramatiq.Broker, messages: list[dramatiq.Message[Any]]) -> int:
        """Register many messages in one transaction (one store round trip per 500 jobs), then publish
        them; how many were new jobs."""
        return self.registration.register_many(broker, messages)

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        """Claim the job; refuse to run it (skip + ack) unless the claim wins."""
        self.plans.broker = broker
        if self.registration.tracked(broker, fields(message).actor_name):
            try:
                self.claim.before_run(broker, message)
            except SkipMessage:
                self.delivery.own_skip = message.message_id  # not final: see after_skip_message
                raise

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        """Commit the attempt's outcome, fenced by its lease; then end the attempt's span."""
        self.attempt.after_run(broker, message, result, exception)

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        """Another middleware's skip ends the job, before or after our claim (reliable.worker.skips)."""
        own = self.delivery.own_skip == message.message_id
        self.delivery.own_skip = None
        try:
            # Dramatiq emits this inside its `except SkipMessage:`: the exception handled is the skip.
            self.skipped.skipped(broker, message, skip_of(message, sys.exc_info()[1], self, marked_own=own))
        finally:
            self.admission.release()
            spans.end(self.tracing, None, outcome="skipped")

    # The process state, as tests reach it.
    @property
    def _heartbeat(self) -> Heartbeat | None:
        return self.runtime.heartbeat

    @property
    def _recovery_stop(self) -> threading.Event:
        return self.runtime.recovery_stop

    @property
    def _recovery_thread(self) -> threading.Thread | None:
        return self.runtime.recovery_thread

    @_recovery_thread.setter
    def _recovery_thread(self, thread: threading.Thread | None) -> None:
        self.runtime.recovery_thread = thread
