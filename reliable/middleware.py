"""The Dramatiq middleware: register on enqueue, claim before running, fenced completion after.

Hooks (see Dramatiq's broker.py and worker.py):
- before_enqueue (producer thread): the job row is written PENDING before the message is published.
- before_process_message (worker thread): the claim, a compare-and-set. Refused -> SkipMessage:
  the message is acknowledged and dropped, the store already holds the truth.
- after_process_message (worker thread): success or the policy's decision for the exception, as a
  write fenced by the lease, with the messages that follow it (next pipeline step, callbacks,
  on_retry_exhausted: `reliable.continuations`) registered in the same transaction. Retries are
  new (delayed) publishes decided here, never Dramatiq's Retries middleware (see `install`). A
  job that ends FAILED or DEAD has its message failed (nacked), as Dramatiq's Retries would, so
  Results stores the exception and StubBroker.join(fail_fast=True) raises it; any other outcome
  is acknowledged.
- after/before_worker_boot/shutdown: the per-process heartbeat and recovery threads.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from .compensation import compensate
from .context import JobContext, _current, _fast_run
from .continuations import FollowUp, follow_ups, follows_success
from .dispatch import declare_queue, message_for
from .errors import (
    ActorContractError,
    ClaimRefused,
    ConfigError,
    JobCancelled,
    JobForceStopped,
    JobIdConflict,
    JobInterrupted,
    JobPaused,
    JobStopped,
    LeaseLost,
    LeaseLostInterrupt,
    PolicyError,
    ReliableError,
    StoreError,
    StoreUnavailable,
    TransitionRefused,
)
from .events import JsonLogSink, log_events_to_stderr
from .groups import TrackedGroupCallbacks, adopt_group_callbacks
from .leases import Heartbeat
from .limits.gate import Admission, Denial, LimitGate, fast_path_allowed
from .limits.model import LimitKeyError
from .metrics import Metrics
from .options import (
    ACTOR_OPTIONS,
    RETRY_OPTIONS,
    STORED_CONTRACT,
    contract_options,
    declared_contract,
    own_queue,
    strip_untrusted,
)
from .policy import THROWS_RULE, Decision, Failure, JobContract, Policy
from .policy.model import RATE_LIMITED_MARK
from .rabbitmq.boot import check_broker
from .recovery import Recovery
from .redact import redact_secrets
from .schedules import Schedule, Scheduler, load_schedules
from .schedules.boot import declare_schedules
from .states import Event, JobStatus
from .store import ErrorInfo, FanIn, NewJob, NodeResult, StateStore
from .store.db import DEFAULT_MAX_CONNECTIONS, POOL_TIMEOUT, check_max_connections, check_store_url, connect_engine
from .store.replication import check_mode as check_replication_mode
from .store.replication import check_replication
from .store.retrying import retry_while_unavailable
from .tracebacks import failure_texts
from .tracecontext import TRACE_OPTIONS, TraceParent, span_id_for
from .tracing import Tracing
from .worker import delivery
from .workflows.engine import WorkflowEngine, node_result
from .workflows.planning import ACTIVE as WORKFLOW_ACTIVE

__all__ = ["ReliableMiddleware"]

logger = logging.getLogger("reliable.middleware")

#: Message option marking a message whose job is already in the store.
REGISTERED = "reliable_registered"

#: The outcome each of reliable's own interrupts reports.
_OBSERVED: dict[type[BaseException], Event] = {
    JobPaused: Event.PAUSE_OBSERVED, JobStopped: Event.STOP_OBSERVED, JobCancelled: Event.CANCEL_OBSERVED,
    JobForceStopped: Event.FORCE_STOP,
}
_ACTIONS: dict[str, Event] = {
    "retry": Event.RETRY, "fail": Event.FAIL, "review": Event.NEED_REVIEW, "dead": Event.DEAD_LETTER,
    "halt": Event.HALT,
}
#: Delays up to this long ride Dramatiq's delay queue; longer ones are left to the recovery loop
#: (RabbitMQ's consumer_timeout would close a channel holding a delayed message for 30 min).
MAX_BROKER_DELAY = 15 * 60.0
#: The window over which retries are counted against an actor's retry budget.
RETRY_BUDGET_WINDOW = 60.0
#: Outcomes that are final failures in Dramatiq's sense: the message is failed (nacked).
_FAILED_FOR_GOOD = frozenset({JobStatus.FAILED, JobStatus.DEAD})
#: Contracts kept per (policy, actor, queue, message retry options); more distinct keys are computed each time.
_CONTRACT_CACHE = 10_000


class ReliableMiddleware(Middleware):
    """Track every message of the broker's actors as a durable job with leases and fencing.

    Parameters:
      store: a StateStore, or its URL (the store is opened lazily in each worker process).
      max_connections: the most store connections each process opens (default 10, see
        docs/operations.md); with a StateStore, pass it to the StateStore instead.
      policy: a loaded Policy (default: `Policy.load(None)`, the built-in defaults).
      lease_ttl, heartbeat_interval: override the policy's lease settings (seconds).
      recovery: run the recovery loop (expired leases, due retries, lost messages) in a thread of
        every worker process. Safe with many processes: each step is a compare-and-set.
      listeners: more store event listeners, called with every event row after its commit.
      metrics: a Metrics to update (True: one on Prometheus' default registry; False: none).
      json_logs: emit one JSON log line per event on the "reliable.events" logger. In a process
        that works jobs (from its worker's boot) the logger gets its own stderr handler
        (`reliable.events.log_events_to_stderr`: not propagated to the root logger, unless the
        application attached a handler to that logger itself); in a process that only sends
        (a web app) the lines go wherever the application's logging sends them.
      tracing: one OpenTelemetry span per attempt (`reliable.tracing`; needs the ``otel`` extra):
        True for the global TracerProvider, or a TracerProvider. Off (False) by default.
      group_commit: on PostgreSQL, commit the claims and finishes of all this process's worker
        threads in batches, one statement each (same guards, same durability; see
        reliable/store/batching.py). Taken from the StateStore when one is passed.
      schedules: recurring jobs (`reliable.Schedule` objects, or a YAML file of them: docs/schedules.md),
        stored with their job templates at each worker's boot. Every worker's recovery thread runs
        the scheduler of all stored schedules, declared here or not.
      replication: what a worker does at boot when a failover of the store's PostgreSQL could lose
        commits (asynchronous standbys; reliable/store/replication.py): "warn" (default) logs why,
        "require_sync" refuses to boot, "off" does not check. See docs/postgresql-failover.md.
    """

    def __init__(self, store: StateStore | str, *, policy: Policy | None = None,
                 lease_ttl: float | None = None, heartbeat_interval: float | None = None,
                 recovery: bool = True, recovery_interval: float | None = None,
                 sweep_after: float | None = None,
                 listeners: tuple[Callable[[dict[str, Any]], None], ...] = (),
                 metrics: Metrics | bool = True, json_logs: bool = True,
                 max_connections: int | None = None, group_commit: bool = True, tracing: object = False,
                 schedules: Sequence[Schedule] | str | os.PathLike[str] | None = None,
                 replication: str = "warn") -> None:
        if max_connections is not None and isinstance(store, StateStore):
            raise ConfigError("max_connections applies to a store URL: pass it to the StateStore instead")
        self.policy = policy or Policy.load(None)
        lease = self.policy.lease
        self.lease_ttl = lease_ttl if lease_ttl is not None else lease.ttl
        self.heartbeat_interval = heartbeat_interval if heartbeat_interval is not None else lease.heartbeat_interval
        if self.heartbeat_interval >= self.lease_ttl:
            raise ValueError(f"heartbeat interval {self.heartbeat_interval}s must be below the lease ttl "
                             f"{self.lease_ttl}s")
        self.recovery_enabled = recovery
        self.recovery_interval = recovery_interval if recovery_interval is not None else lease.recovery_interval
        self.sweep_after = sweep_after if sweep_after is not None else lease.sweep_after
        self.replication = check_replication_mode(replication)
        if isinstance(store, str):
            check_store_url(store)  # a bad URL fails here, not later in every worker's log
        self._store_arg = store
        #: PostgreSQL: claims and finishes of all worker threads committed in batches (batching.py).
        self.group_commit = store.group_commit if isinstance(store, StateStore) else group_commit
        if isinstance(store, StateStore):
            self.max_connections = store.max_connections
        else:
            self.max_connections = check_max_connections(
                DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections)
        self.metrics = Metrics() if metrics is True else (metrics or None)
        sinks: list[Callable[[dict[str, Any]], None]] = [JsonLogSink()] if json_logs else []
        self._json_logs = json_logs
        #: The attempt spans (None: tracing off, opentelemetry never imported).
        self.tracing = Tracing(None if tracing is True else tracing) if tracing else None
        if self.metrics is not None:
            sinks.append(self.metrics)
        self._listeners = (*sinks, *listeners)
        self._pid = -1
        self._store: StateStore | None = None
        self._worker_id = ""
        self._heartbeat: Heartbeat | None = None
        self._recovery: Recovery | None = None
        self._recovery_thread: threading.Thread | None = None
        self._recovery_stop = threading.Event()
        #: The schedules this app declares (stored at worker boot) and this process's scheduler.
        self.schedules = load_schedules(schedules)
        self._scheduler: Scheduler | None = None
        self._lock = threading.Lock()
        # The attempt a worker thread is running. Per thread, not per job id: a stale attempt and
        # its re-claimed successor can run the same job in two threads of one process.
        self._delivery = threading.local()
        self._contracts: dict[tuple[Any, ...], JobContract] = {}
        self._bulk = threading.local()
        self.broker: dramatiq.Broker | None = None
        #: The continuation kinds reliable sends for tracked actors (set by `install` from the
        #: Dramatiq middleware it found: see `reliable.continuations`).
        self.continuation_kinds: frozenset[str] = frozenset()
        #: Dramatiq's Retries middleware of the broker, if any: its `retry_when` applies to tracked actors.
        self.dramatiq_retries: Any = None
        #: The broker's GroupCallbacks, replaced so group barriers live in the store (reliable.groups).
        self.group_callbacks: TrackedGroupCallbacks | None = None
        #: Concurrency and rate limits declared with `limits=` (reliable.limits).
        self.limits = LimitGate(
            alert_after=lambda actor, queue: self.contract_for(actor, queue).rate_limit.alert_after,
            on_deferral=self.metrics.limit_deferred if self.metrics is not None else None)

    @property
    def actor_options(self) -> set[str]:
        """The options this middleware lets actors declare."""
        return set(ACTOR_OPTIONS)

    # -- per-process state (created after fork) -------------------------------------------------

    @property
    def store(self) -> StateStore:
        """This process's StateStore (opened on first use after a fork)."""
        self._ensure_process()
        assert self._store is not None
        return self._store

    @property
    def worker_id(self) -> str:
        """host:pid:random — the identity written on claims and leases."""
        self._ensure_process()
        return self._worker_id

    def _ensure_process(self) -> None:
        pid = os.getpid()
        if self._pid == pid:
            return
        with self._lock:
            if self._pid == pid:
                return
            if isinstance(self._store_arg, StateStore) and self._pid == -1:
                store = self._store_arg
            else:  # the URL object, never a rendered string: the password stays out of any text
                url = self._store_arg if isinstance(self._store_arg, str) else self._store_arg.engine.url
                timeout = POOL_TIMEOUT if isinstance(self._store_arg, str) else self._store_arg.pool_timeout
                engine = connect_engine(url, max_connections=self.max_connections, pool_timeout=timeout)
                store = StateStore(engine=engine, max_connections=self.max_connections, pool_timeout=timeout,
                                   group_commit=self.group_commit)
            for listener in self._listeners:
                store.add_listener(listener)
            self._store = store
            self._worker_id = f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:6]}"
            self._heartbeat = Heartbeat(
                store, worker_id=self._worker_id, interval=self.heartbeat_interval, lease_ttl=self.lease_ttl,
                on_escalation=self._escalate, on_beat=self.metrics.heartbeat if self.metrics else None,
                on_failure=self.metrics.heartbeat_failed if self.metrics else None)
            self._pid = pid

    def _actor_options(self, actor_name: str) -> dict[str, Any]:
        if self.broker is None:
            return {}
        try:
            return dict(self.broker.get_actor(actor_name).options)
        except dramatiq.errors.ActorNotFound:
            return {}

    def contract_for(self, actor_name: str, queue: str, message_options: dict[str, Any] | None = None) -> JobContract:
        """The job contract: policy defaults, queue and actor sections, actor options, then the
        Dramatiq retry options of the message (max_retries, min_backoff, max_backoff), as Dramatiq."""
        retry_options = tuple((key, message_options.get(key)) for key in RETRY_OPTIONS) if message_options else ()
        key = (id(self.policy), actor_name, queue, retry_options)
        contract = self._contracts.get(key)
        if contract is None:  # computed once per actor, queue and message retry options (the hot path)
            contract = self.policy.contract(actor_name, queue,
                                            contract_options(self._actor_options(actor_name), message_options))
            if len(self._contracts) < _CONTRACT_CACHE:
                self._contracts[key] = contract
        return contract

    def tracked(self, broker: dramatiq.Broker, actor_name: str) -> bool:
        """Whether reliable tracks this actor (all do, unless declared with `reliable=False`)."""
        self.broker = self.broker or broker
        return bool(self._actor_options(actor_name).get("reliable", True))

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
        contract = self.contract_for(actor, queue, dict(message.options))
        error_class, _rule, label = self.policy.classify(exception, actor, queue, contract)
        spec = self.policy.classes.get(error_class)
        return (label or error_class) if spec is not None and spec.rate_limited else None

    # -- lifecycle -------------------------------------------------------------------------------

    def before_declare_actor(self, broker: dramatiq.Broker, actor: Any) -> None:
        """Resolve the contract of a tracked actor now: a contradiction (e.g. `fast_path=True` with
        `resumable=True`) fails at its declaration (PolicyError naming actor and option), not at its
        first message."""
        self._contracts.clear()  # a re-declared actor may change its options
        if not actor.options.get("reliable", True):
            return
        try:
            self.policy.contract(actor.actor_name, actor.queue_name, dict(actor.options), strict=True)
            self.limits.declare(actor)
        except (PolicyError, ConfigError) as exc:
            raise ActorContractError(str(exc)) from None

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        """Remember the broker (re-dispatch needs it)."""
        self.broker = broker

    def before_worker_boot(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Start the heartbeat and, if enabled, the recovery loop of this process; create the
        metrics of every tracked actor at 0; with json_logs, write the events to stderr."""
        self.broker = broker
        if self._json_logs:
            log_events_to_stderr()
        self.adopt_group_callbacks(broker)
        self._ensure_process()
        self._check_replication()
        check_broker(broker, self, worker)  # reliable.rabbitmq: delivery limit, queues, consumer_timeout
        if self.metrics is not None:
            for name in broker.get_declared_actors():
                if self.tracked(broker, name):
                    self.metrics.track(name, broker.get_actor(name).queue_name)
        assert self._heartbeat is not None
        if self.schedules:  # here the actors are imported: their job templates can be built
            for schedule in self.schedules:
                if self.recovery_enabled and schedule.grace < self.recovery_interval:
                    # The scheduler ticks once per recovery pass: a slot could be older than the
                    # grace at every tick, and "skip" would drop every slot.
                    raise ActorContractError(
                        f"schedule {schedule.name!r}: misfire_grace {schedule.grace:g}s is shorter than the "
                        f"recovery interval {self.recovery_interval:g}s the scheduler ticks at")
            try:
                self._with_store_retry("declare schedules", lambda: declare_schedules(self.store, self, broker,
                                                                                       self.schedules))
            except ConfigError as exc:  # raised as a MiddlewareError, so that the worker does not boot
                raise ActorContractError(str(exc)) from None
        for lane in self.policy.lanes:  # retries routed there: a worker started with `--queues <lane>` consumes it
            declare_queue(broker, lane)
        self._heartbeat.start()
        if self.recovery_enabled:
            self._scheduler = Scheduler(self.store, broker)
            self._recovery = Recovery(self.store, broker, self.policy, actor_options=self._actor_options,
                                      sweep_after=self.sweep_after, lease_ttl=self.lease_ttl,
                                      worker_id=self.worker_id)
            self._recovery_stop.clear()
            self._recovery_thread = threading.Thread(target=self._recover_forever, name="reliable-recovery",
                                                     daemon=True)
            self._recovery_thread.start()

    def _check_replication(self) -> None:
        """Warn about (replication="require_sync": refuse to boot on) a store whose failover can lose
        commits. A store unreachable at boot is only logged: the worker's writes wait for it anyway."""
        try:
            check_replication(self.store.engine, self.replication)
        except ConfigError as exc:  # raised as a MiddlewareError, so that the worker does not boot
            raise ActorContractError(str(exc)) from None
        except StoreUnavailable as exc:
            logger.warning("could not check the store's replication at boot: %s", exc)
        except StoreError as exc:
            if self.replication == "require_sync":
                raise ActorContractError(f"could not check the store's replication (replication='require_sync'): "
                                         f"{exc}") from None
            logger.warning("could not check the store's replication at boot: %s", exc)

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Stop the recovery loop and wait for its pass to end; the heartbeat keeps running until
        the worker threads finish."""
        self._recovery_stop.set()
        # A pass still publishing while Dramatiq stops its consumers could declare a queue, and the
        # worker would add a consumer to the dict it is iterating (RuntimeError in Worker.stop).
        if self._recovery_thread is not None:
            self._recovery_thread.join(10)

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Stop the heartbeat once every worker thread has finished its message."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self.metrics is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]  # drop live-sum gauges
        if self._recovery_thread is not None:
            self._recovery_thread.join(5)
            self._recovery_thread = None
        group = self._store.group_commit_stats() if self._store is not None else None
        if group is not None and group[0]:
            batches, writes = group
            logger.info("group commit: %d writes in %d batches (%.1f per batch)", writes, batches, writes / batches)

    def _recover_forever(self) -> None:
        assert self._recovery is not None
        while not self._recovery_stop.wait(self.recovery_interval):
            try:
                self._recovery.run_once()
                if self._scheduler is not None:
                    self._scheduler.tick()
            except StoreError as exc:
                logger.warning("recovery pass failed (will retry): %s", exc)
            except Exception:
                logger.exception("recovery pass failed unexpectedly")

    def adopt_group_callbacks(self, broker: dramatiq.Broker) -> None:
        """Keep group barriers in the store from now on, if the broker has GroupCallbacks (reliable.groups)."""
        if self.group_callbacks is None:
            self.group_callbacks = adopt_group_callbacks(broker, self)

    def create_barrier(self, barrier_id: str, parties: int) -> None:
        """Create a group's completion barrier in the store (waits while the store is unreachable)."""
        self._with_store_retry("create_barrier", lambda: self.store.create_barrier(barrier_id, parties))

    # -- producer side ---------------------------------------------------------------------------

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        """Register the job (PENDING) before its message is published; no-op for a known job_id."""
        if message.message_id in getattr(self._bulk, "registered", ()):
            return  # enqueue_many registered it already, in one transaction with the others
        if self.group_callbacks is None and "group_completion_uuid" in message.options:
            self.adopt_group_callbacks(broker)  # GroupCallbacks added after install: the next groups
        prepared = self._new_job(broker, message, delay)
        if prepared is not None:
            job, ignored = prepared
            self._with_store_retry("register", lambda: self.store.register(job))
            self._untrusted_ignored(job, ignored)

    def enqueue_many(self, broker: dramatiq.Broker, messages: list[dramatiq.Message[Any]]) -> int:
        """Register many messages in one transaction, then publish them; how many were new jobs.

        The fast path for bulk producers: one store round trip per 500 jobs instead of one per job.
        """
        prepared = [new for message in messages if (new := self._new_job(broker, message, None)) is not None]
        jobs = [job for job, _ in prepared]
        created = int(self._with_store_retry("register", lambda: self.store.register_many(jobs)))
        for job, ignored in prepared:
            self._untrusted_ignored(job, ignored)
        self._bulk.registered = {job.job_id for job in jobs}
        try:
            for message in messages:
                broker.enqueue(message)
        finally:
            self._bulk.registered = set()
        return created

    def _new_job(self, broker: dramatiq.Broker, message: dramatiq.Message[Any],
                 delay: int | None) -> tuple[NewJob, tuple[str, ...]] | None:
        """The job to register for `message` and the names of the options it may not set (removed)."""
        if not self.tracked(broker, message.actor_name):
            return None
        options = message.options
        if options.get(REGISTERED) or ("eta" in options and delay is None):
            return None  # re-dispatched, retried or promoted from the delay queue: the job exists
        # A producer may not choose code or loosen the contract: those options come from the
        # actor's declaration and the policy only. Removed from the message that is published and
        # stored (so no later reader can trust them by mistake), and recorded on the job.
        ignored = strip_untrusted(options)
        parent = _current.get()
        link = (parent.job_id, parent.traceparent) if parent is not None else _fast_run.get()
        sender = self.tracing.current() if self.tracing is not None else None
        if link is not None:
            options.setdefault("parent_job_id", link[0])
            sender = sender or link[1]
        options.update(TraceParent.for_message(options, sender=sender, job_id=message.message_id).as_options())
        options[REGISTERED] = True  # travels with every copy of the message, see above
        actor_options = self._actor_options(message.actor_name)
        _link_workflow(message, actor_options)
        canonical_queue = own_queue(message.queue_name, options)  # a producer's OWN_QUEUE was stripped above
        contract = self.policy.contract(message.actor_name, canonical_queue, actor_options)
        data = message.asdict()
        data["queue_name"] = canonical_queue
        data["options"] = {k: v for k, v in options.items() if k != "eta"}
        # The contract declared in code travels with the job, so a recovery loop or CLI that does
        # not import the actor still decides with it (e.g. idempotent=False -> REVIEW after a crash).
        declared = declared_contract(actor_options)
        if declared:
            data["options"][STORED_CONTRACT] = declared
        return NewJob(
            job_id=message.message_id, queue=canonical_queue, actor=message.actor_name, message=data,
            owner=contract.owner, workflow_id=options.get("workflow_id"),
            trace_id=options.get("trace_id"), parent_job_id=options.get("parent_job_id"),
            checkpoint_schema=contract.checkpoint_schema, delay=(delay / 1000.0) if delay else None,
        ), ignored

    def _untrusted_ignored(self, job: NewJob, ignored: tuple[str, ...]) -> None:
        if not ignored:
            return
        # Names only: a value may be a code path the producer wanted run.
        logger.warning("job %s: message options %s ignored: the actor's declaration and the policy decide them",
                       job.job_id, ", ".join(ignored))
        try:
            self.store.record_event(job.job_id, "untrusted_options_ignored", detail={"options": list(ignored)},
                                    reason="a message may not set the job contract or name code")
        except StoreError:
            logger.warning("job %s: could not record the ignored message options", job.job_id, exc_info=True)

    # -- worker side -----------------------------------------------------------------------------

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        """Claim the job; refuse to run it (skip + ack) unless the claim wins."""
        self.broker = broker
        if not self.tracked(broker, message.actor_name):
            return
        try:
            self._claim(broker, message)
        except SkipMessage:
            self._limits_release()
            raise
        except BaseException:
            self._limits_release()
            # Dramatiq swallows any other exception of a before-hook and would run the actor
            # without a claim: never let that happen. The job row is the truth; a PENDING job is
            # re-dispatched by the sweeper.
            logger.exception("claim of message %s failed; skipping it", message.message_id)
            message.options["store_results"] = False  # never ran: Results must not store None for it
            raise SkipMessage("claim failed") from None

    def _claim(self, broker: dramatiq.Broker, message: Any) -> None:
        job_id = message.message_id
        digest = delivery.digest_of(self.store, message, worker_id=self.worker_id)  # a delivery must match its job
        contract = self.contract_for(message.actor_name, own_queue(message.queue_name, message.options),
                                     message.options)
        self._limits_admit(broker, message, digest)
        if contract.fast_path and self._fast_eligible(message):
            try:
                status = self._with_store_retry("job_status", lambda: self.store.job_status(
                    job_id, delivery_digest=digest))
            except ClaimRefused as refusal:
                self._skip_refused(broker, message, refusal)
            if status is JobStatus.PENDING:
                self._delivery.fast = job_id
                # The run's attempt id is chosen now, so the messages it sends name its span.
                attempt_id = self._delivery.fast_attempt = uuid.uuid4().hex
                trace = self._message_trace(message)
                span_id = self._start_span(message, attempt=None, attempt_id=attempt_id, parent=trace)
                _fast_run.set((job_id, trace.child(span_id or span_id_for(attempt_id))))
                return
            # Anything else (a retry, a paused or finished job, an unknown message): the durable
            # claim decides, as for any actor.
        # One attempt id for every try: a retry after a lost reply recognises its own committed claim.
        attempt_id = uuid.uuid4().hex
        try:
            claim = self._with_store_retry("claim", lambda: self.store.claim(
                job_id, worker_id=self.worker_id, lease_ttl=self.lease_ttl, attempt_id=attempt_id,
                delivery_digest=digest))
        except ClaimRefused as refusal:
            if refusal.reason == "not_found":  # published by a producer without the middleware
                unknown = message.copy(queue_name=message.queue_name)
                unknown.options.pop(REGISTERED, None)  # whatever it claims, the store has no such job
                try:
                    self.before_enqueue(broker, unknown, None)
                    claim = self.store.claim(job_id, worker_id=self.worker_id, lease_ttl=self.lease_ttl,
                                             delivery_digest=digest)
                except JobIdConflict:  # registered meanwhile, from another message
                    self._skip_refused(broker, message, ClaimRefused(job_id, delivery.MISMATCH))
                except ClaimRefused as again:
                    self._skip_refused(broker, message, again)
            else:
                self._skip_refused(broker, message, refusal)
        self._limits_bind(broker, message, claim)
        span_id = self._start_span(message, attempt=claim.job.attempt, attempt_id=claim.attempt_id)
        context = self._hold(message, claim, span_id=span_id)
        self._delivery.context = context
        context.enter()

    def _hold(self, message: Any, claim: Any, *, span_id: str | None = None) -> JobContext:
        """The running attempt of a won claim, its lease renewed by the heartbeat from now on; its
        contract is the one of the job's own queue as the store has it (whatever queue delivered it)."""
        contract = self.contract_for(message.actor_name, claim.job.home_queue, message.options)
        codec = self._actor_options(message.actor_name).get("checkpoint_codec")
        context = JobContext(self.store, claim, contract, self.worker_id, self.lease_ttl,
                             store_retry_cap=self.heartbeat_interval, codec=codec, span_id=span_id)
        assert self._heartbeat is not None
        self._heartbeat.add(context)
        self._heartbeat.start()
        return context

    def _skip_refused(self, broker: dramatiq.Broker, message: Any, refusal: ClaimRefused) -> NoReturn:
        """Handle a refused claim, then skip this delivery (always raises SkipMessage)."""
        if refusal.reason == delivery.MISMATCH:  # not the job's message: dead-lettered, never run
            delivery.refuse(self.store, message, refusal, worker_id=self.worker_id)
        self._refused(broker, message, refusal)
        # This delivery never ran: Dramatiq's Results must not store None for it (its
        # after_skip_message would, over a real result or while the job runs elsewhere).
        message.options["store_results"] = False
        raise SkipMessage(refusal.reason) from None

    def _refused(self, broker: dramatiq.Broker, message: Any, refusal: ClaimRefused) -> None:
        redelivered = getattr(message, "redelivered", None)
        if refusal.reason == "not_due" and refusal.retry_in is not None:
            # The delayed message came early (clock skew between worker and database): wait again.
            broker.enqueue(message_for(self.store.get(message.message_id)),
                           delay=int(refusal.retry_in * 1000) + 50)
            return
        try:
            self.store.record_event(message.message_id, "claim_refused", worker_id=self.worker_id,
                                    detail={"reason": refusal.reason, "redelivered": redelivered})
        except Exception:
            logger.warning("could not record the refused claim of %s", message.message_id, exc_info=True)
        logger.info("message %s skipped: claim refused (%s)", message.message_id, refusal.reason)

    def _fast_eligible(self, message: Any) -> bool:
        """Whether this delivery may run on the fast path: nothing follows its success (a pipeline
        step, on_success, a group's completion) that would have to be registered with it."""
        limited = self.limits.spec_for(self.broker, message.actor_name) if self.broker is not None else None
        if not fast_path_allowed(limited):
            return False  # a concurrency slot is tied to a claim's lease, whatever the policy says
        if message.options.get("group_completion_uuid") or message.options.get("workflow_node"):
            return False  # a group's barrier or a workflow node's result commits with the success
        if own_queue(message.queue_name, message.options) != message.queue_name.removesuffix(".DQ"):
            # On a routed retry's lane: the claim reads the job's own queue from the store, which
            # a message cannot misstate (a routed job is PENDING after a resume or a crash only).
            return False
        return not follows_success(message, self._actor_options(message.actor_name))

    def _fast_done(self, broker: dramatiq.Broker, message: Any, result: Any,
                   exception: BaseException | None) -> None:
        """A fast-path run ended: commit a success in one compare-and-set; claim a failure and
        let the durable path decide it (policy, retry, callbacks) as for any attempt."""
        job_id = message.message_id
        # One for every try: a retry after a lost reply finds its commit.
        attempt_id: str = getattr(self._delivery, "fast_attempt", None) or uuid.uuid4().hex
        if exception is None:
            # Nothing is written before a fast-path run, so a run cut short by a crash leaves no
            # trace; the broker's redelivered flag says an earlier run may have happened.
            detail = {"redelivered": True} if getattr(message, "redelivered", False) else None
            job = self._with_store_retry("fast_succeed", lambda: self.store.fast_succeed(
                job_id, worker_id=self.worker_id, attempt_id=attempt_id, detail=detail))
            if job is None:
                logger.warning("job %s: fast-path result discarded, the job left PENDING during the run", job_id)
                message.options["store_results"] = False
            return
        context = self._claim_after_run(message, attempt_id, "failure")
        if context is None:
            return
        try:
            self._complete(broker, message, context, None, exception)
        finally:
            assert self._heartbeat is not None
            self._heartbeat.remove(context)

    def _claim_after_run(self, message: Any, attempt_id: str, what: str) -> JobContext | None:
        """Claim a fast-path job whose run ended without a success, so the durable path decides
        what follows (held in the heartbeat while it does). Only from PENDING: a job that moved on
        meanwhile (a duplicate's outcome, an operator) is left alone."""
        job_id = message.message_id
        try:
            claim = self._with_store_retry("claim", lambda: self.store.claim(
                job_id, worker_id=self.worker_id, lease_ttl=self.lease_ttl, attempt_id=attempt_id,
                from_states=(JobStatus.PENDING,)))
        except ClaimRefused as refusal:
            logger.warning("job %s: fast-path %s not recorded, the job left PENDING during the run (%s)",
                           job_id, what, refusal.reason)
            return None
        active = self.tracing.current() if self.tracing is not None else None  # the run's span, still current
        return self._hold(message, claim, span_id=active.span_id if active else None)

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        """Commit the attempt's outcome, fenced by its lease; then end the attempt's span."""
        try:
            if self._take_fast(message):
                self._fast_done(broker, message, result, exception)
                return
            context = self._take(message)
            if context is None:
                return
            try:
                context.leave()
                self._note_unrecorded_effects(context)
                self._complete(broker, message, context, result, exception)
            finally:
                # Only now: the lease is renewed while the final write may still be retried (a slow or
                # blipping store must not let recovery reclaim a job that already finished).
                assert self._heartbeat is not None
                self._heartbeat.remove(context)
        finally:
            self._delivery.limits = None  # its slot frees itself: the attempt ended (reliable.limits)
            self._end_span(exception)

    def _note_unrecorded_effects(self, context: JobContext) -> None:
        """Units the attempt applied but could not record: a later first record is a possible duplicate."""
        for key in context.unrecorded_effects:
            self._with_store_retry("effect_unrecorded", functools.partial(
                self.store.effect_unrecorded, context.job_id, key, lease_id=context.fencing_token,
                worker_id=self.worker_id))

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        """A middleware after ours skipped a message we had claimed: give the job back, retry it now."""
        try:
            self._skipped(message)
        finally:
            self._limits_release()
            self._end_span(None, outcome="skipped")

    def _skipped(self, message: Any) -> None:
        context: JobContext | None
        if self._take_fast(message):  # nothing was claimed yet: claim it now, as the durable path had
            context = self._claim_after_run(message, uuid.uuid4().hex, "skip")
        else:
            context = self._take(message)
            if context is not None:
                context.leave()
        if context is None:
            return
        try:
            logger.warning("job %s: skipped by another middleware after its claim; released for a retry",
                           context.job_id)
            self._finish(context, Event.RETRY, retry_delay=0.0, detail={"skipped_by_middleware": True})
        finally:
            assert self._heartbeat is not None
            self._heartbeat.remove(context)

    def _message_trace(self, message: Any) -> TraceParent:
        """The trace context a delivered message carries (see `TraceParent.for_message`)."""
        return TraceParent.for_message(message.options, job_id=message.message_id)

    def _start_span(self, message: Any, *, attempt: int | None, attempt_id: str | None,
                    parent: TraceParent | None = None) -> str | None:
        """Start the attempt's span (a child of `parent`, default: the message's trace context)
        when tracing is on; its span id (None: no span)."""
        if self.tracing is None:
            return None
        return self.tracing.start(parent or self._message_trace(message), job_id=message.message_id,
                                  actor=message.actor_name, queue=message.queue_name.removesuffix(".DQ"),
                                  attempt=attempt, attempt_id=attempt_id)

    def _end_span(self, exception: BaseException | None, *, outcome: str | None = None) -> None:
        if self.tracing is not None:
            self.tracing.end(exception, outcome=outcome)

    def _take_fast(self, message: Any) -> bool:
        fast: str | None = getattr(self._delivery, "fast", None)
        self._delivery.fast = None
        _fast_run.set(None)
        return fast is not None and fast == message.message_id

    def _take(self, message: Any) -> JobContext | None:
        context: JobContext | None = getattr(self._delivery, "context", None)
        self._delivery.context = None
        if context is None or context.job_id != message.message_id:
            return None
        return context

    def _complete(self, broker: dramatiq.Broker, message: Any, context: JobContext, result: Any,
                  exception: BaseException | None) -> None:
        if exception is None:
            planned = self._plan(broker, message, context, result=result)
            fan_in = self._fan_in(broker, message, context)
            stored_result = node_result(context.job_id, result) if message.options.get("workflow_node") else None
            job = self._finish(context, Event.SUCCEED, planned=planned, fan_in=fan_in[0] if fan_in else None,
                               node_result=stored_result)
            if job is None:  # discarded (lease reassigned): Dramatiq's Results must not keep this value
                message.options["store_results"] = False
            self._conclude(broker, message, context, job, None, planned)
            if fan_in is not None and job is not None and job.status is JobStatus.SUCCEEDED:
                self._group_arrived(broker, message, context, *fan_in)
            return
        if isinstance(exception, LeaseLostInterrupt):
            logger.warning("job %s: lease lost, attempt %s abandoned", context.job_id, context.attempt_id)
            return
        observed = _OBSERVED.get(type(exception)) if isinstance(exception, JobInterrupted) else None
        if observed is not None:
            # An operator's pause, stop or cancel, not a failure: no on_failure callback follows.
            # The store turns a stop into a cancel when one was requested since (honour_requests).
            job = self._finish(context, observed, detail={"interrupt": type(exception).__name__})
            self._conclude(broker, message, context, job, None, [])
            return
        # A failure (or an interrupt we do not own, e.g. Dramatiq's TimeLimit): the policy decides;
        # the store then honours any stop, cancel or pause requested meanwhile.
        texts = failure_texts(exception)
        retries = _count_failure(message, texts.message)
        actor_options = self._actor_options(context.claim.job.actor)
        decision = self.policy.decide(Failure(
            exception=exception, actor=context.claim.job.actor, queue=context.claim.job.home_queue,
            attempt=context.attempt, retry_count=context.claim.job.retry_count, contract=context.contract,
            now=time.time(), recent_retries=self._recent_retries(context),
            rate_limited_retries=self._rate_limited_retries(context),
            throws=message.options.get("throws") or actor_options.get("throws"),
            retry_when=actor_options.get("retry_when") or getattr(self.dramatiq_retries, "retry_when", None),
        ))
        event = _ACTIONS.get(decision.action)
        if event is None:
            raise ValueError(f"policy decision {decision.action!r} is not valid for a failed attempt")
        if decision.rate_limited:
            self._limits_rate_limited(context)
        exhausted = {"retries": retries - 1, "max_retries": context.contract.max_attempts - 1} \
            if decision.retries_exhausted else None
        planned = self._plan(broker, message, context, exception=exception, exhausted=exhausted)
        error = ErrorInfo(decision.error_class, decision.exception_type,
                          None if decision.message is None else redact_secrets(decision.message),
                          traceback=texts.stored)
        delay = decision.delay if decision.action == "retry" else None
        lane = _retry_queue(decision, context.claim.job)
        job = self._finish(context, event, error=error, retry_delay=delay, detail=decision.as_detail(),
                           planned=planned, queue=lane)
        self._conclude(broker, message, context, job, decision, planned)

    def _plan(self, broker: dramatiq.Broker, message: Any, context: JobContext, *, result: Any = None,
              exception: BaseException | None = None,
              exhausted: dict[str, Any] | None = None) -> list[tuple[FollowUp, NewJob | None]]:
        """The messages that follow this attempt, each with the job to register for it (None: untracked)."""
        if not self.continuation_kinds:
            return []
        try:
            found = follow_ups(broker, message, kinds=self.continuation_kinds, result=result, exception=exception,
                               exhausted=exhausted)
        except Exception:
            logger.exception("job %s: could not build the messages that follow it; they are not sent",
                             context.job_id)
            return []
        planned: list[tuple[FollowUp, NewJob | None]] = []
        job = context.claim.job
        for follow_up in found:
            options = follow_up.message.options
            options.update(context.traceparent.as_options())
            options["parent_job_id"] = job.job_id
            if job.workflow_id:
                options.setdefault("workflow_id", job.workflow_id)
            try:
                follow_up.message.encode()  # what the broker will do: fail here, not inside the commit
                prepared = self._new_job(broker, follow_up.message, follow_up.delay)
            except Exception:
                logger.exception("job %s: the %s message that follows it cannot be sent; dropped",
                                 context.job_id, follow_up.message.actor_name)
                continue
            if prepared is not None:
                self._untrusted_ignored(*prepared)
            planned.append((follow_up, None if prepared is None else prepared[0]))
        return planned

    def _fan_in(self, broker: dramatiq.Broker, message: Any, context: JobContext
                ) -> tuple[FanIn, list[dramatiq.Message[Any]]] | None:
        """A group member's arrival at its completion barrier, with the group's callbacks to register."""
        return self._group_completion(broker, message, trace=context.traceparent.as_options(),
                                      parent_job_id=context.job_id)

    def _group_completion(self, broker: dramatiq.Broker, message: Any, *, trace: dict[str, Any],
                          parent_job_id: str) -> tuple[FanIn, list[dramatiq.Message[Any]]] | None:
        barrier_id = message.options.get("group_completion_uuid")
        callbacks = message.options.get("group_completion_callbacks")
        if not barrier_id or not callbacks or self.group_callbacks is None:
            return None
        messages: list[dramatiq.Message[Any]] = []
        new_jobs: list[NewJob] = []
        for data in callbacks:
            # A copy: the member's message (and Dramatiq's barrier, if it decides) keep theirs as sent.
            callback: dramatiq.Message[Any] = dramatiq.Message(**{**data, "options": dict(data.get("options") or {})})
            callback.options.update(trace, parent_job_id=parent_job_id, workflow_id=barrier_id)
            prepared = self._new_job(broker, callback, None)
            messages.append(callback)
            if prepared is not None:
                new_jobs.append(prepared[0])
        return FanIn(barrier_id, new_jobs), messages

    def untracked_member_succeeded(self, broker: dramatiq.Broker, message: Any) -> bool:
        """An untracked group member's success arrives at its group's barrier in the store (so a
        group mixing tracked and untracked members completes); False when the store does not know
        the barrier, and Dramatiq's barrier decides."""
        trace = {key: message.options[key] for key in TRACE_OPTIONS if message.options.get(key)}
        built = self._group_completion(broker, message, trace=trace, parent_job_id=message.message_id)
        if built is None:
            return False
        fan_in, callbacks = built
        self._with_store_retry("arrive_at_barrier", lambda: self.store.arrive_at_barrier(fan_in))
        if not fan_in.known:
            return False
        if fan_in.cleared:
            _publish_group_callbacks(broker, message.message_id, callbacks)
        return True

    def _group_arrived(self, broker: dramatiq.Broker, message: Any, context: JobContext, fan_in: FanIn,
                       callbacks: list[dramatiq.Message[Any]]) -> None:
        """Publish the group's completion callbacks if this member cleared its barrier (registered
        with its success), or let Dramatiq's barrier decide for a group the store does not know."""
        if not fan_in.known:
            from dramatiq.rate_limits import Barrier

            assert self.group_callbacks is not None
            inner = self.group_callbacks.inner
            barrier = Barrier(inner.rate_limiter_backend, fan_in.barrier_id, ttl=inner.barrier_ttl)  # type: ignore[no-untyped-call]
            if not barrier.wait(block=False):  # type: ignore[no-untyped-call]
                return
            # Not registered with the success (the store has no barrier to clear): register now,
            # before publishing, as a producer's enqueue would.
            self._with_store_retry("register", lambda: self.store.register_many(fan_in.jobs))
        elif not fan_in.cleared:
            return
        _publish_group_callbacks(broker, context.job_id, callbacks)

    def _conclude(self, broker: dramatiq.Broker, message: Any, context: JobContext, job: Any,
                  decision: Decision | None, planned: list[tuple[FollowUp, NewJob | None]]) -> None:
        """Act on where the attempt's outcome left the job (the store may have changed it)."""
        if job is None:
            return
        if job.workflow_id and message.options.get("workflow_node") and job.status.value not in WORKFLOW_ACTIVE:
            self._advance_workflow(broker, job.workflow_id)
        if decision is not None and (decision.alert or (decision.action == "halt" and job.status is JobStatus.STOPPED)):
            self._alert(context, decision)
        for follow_up, _registered in planned:
            if follow_up.applies(job.status):
                try:
                    broker.enqueue(follow_up.message, delay=follow_up.delay)
                except Exception:  # registered with the outcome: the sweeper publishes it
                    logger.warning("job %s: publishing the %s message that follows it failed; the recovery "
                                   "loop will", context.job_id, follow_up.message.actor_name, exc_info=True)
        if job.status is JobStatus.CANCELLED:
            warning = compensate(self.store, broker, job, context.contract.compensation, worker_id=self.worker_id)
            if warning:
                logger.warning("job %s: %s", job.job_id, warning)
        elif job.status is JobStatus.RETRY_WAIT and job.retry_at is not None:
            delay = max(0.0, job.retry_at - job.updated_at)
            if delay <= MAX_BROKER_DELAY:
                try:
                    declare_queue(broker, job.queue)  # a routed retry's queue may be new to this broker
                    broker.enqueue(message_for(job, traceback=message.options.get("traceback")),
                                   delay=int(delay * 1000))
                except Exception:
                    logger.warning("job %s: publishing the retry failed; the recovery loop will re-dispatch it",
                                   context.job_id, exc_info=True)
        elif job.status in _FAILED_FOR_GOOD and decision is not None:
            if decision.rule == THROWS_RULE:
                logger.info("Aborting message %r.", message.message_id)  # Retries' line, which apps may watch for
            message.fail()  # as Dramatiq's Retries: nacked, Results stores the exception

    def _finish(self, context: JobContext, event: Event, *, error: ErrorInfo | None = None,
                retry_delay: float | None = None, detail: dict[str, Any] | None = None,
                planned: Sequence[tuple[FollowUp, NewJob | None]] = (), fan_in: FanIn | None = None,
                node_result: NodeResult | None = None, queue: str | None = None) -> Any:
        def registered(status: JobStatus) -> list[NewJob]:
            return [job for follow_up, job in planned if job is not None and follow_up.applies(status)]

        try:
            return self._with_store_retry(event.value, lambda: self.store.finish(
                context.job_id, context.fencing_token, event, worker_id=self.worker_id, error=error,
                retry_delay=retry_delay, detail=detail, follow_ups=registered if planned else None,
                fan_in=fan_in, node_result=node_result, queue=queue))
        except LeaseLost:
            logger.warning("job %s: result of attempt %s discarded, its lease %d was reassigned",
                           context.job_id, context.attempt_id, context.fencing_token)
        except TransitionRefused as exc:
            logger.warning("job %s: %s", context.job_id, exc)
        return None

    def _advance_workflow(self, broker: dramatiq.Broker, workflow_id: str) -> None:
        """Start what this node's outcome allows in its workflow (after the commit: should this
        process die first, the recovery loop's sweep of running workflows does it)."""
        try:
            listener = self.metrics.workflow_transition if self.metrics is not None else None
            engine = WorkflowEngine(self.store, broker, on_transition=listener)
            self._with_store_retry("advance workflow", lambda: engine.advance(workflow_id))
        except ReliableError as exc:
            logger.warning("workflow %s: advancing it failed (%s); the recovery loop will", workflow_id, exc)

    def _alert(self, context: JobContext, decision: Decision) -> None:
        try:
            self.store.record_event(context.job_id, "alert", worker_id=self.worker_id,
                                    error_class=decision.error_class, reason=decision.reason,
                                    detail={"owner": context.contract.owner, **decision.as_detail()})
        except StoreError:
            logger.error("job %s: could not record alert: %s", context.job_id, decision.reason)

    def _escalate(self, context: JobContext, overdue: float) -> None:
        try:
            self.store.record_event(context.job_id, "escalation", worker_id=self.worker_id,
                                    detail={"overdue_seconds": round(overdue, 3),
                                            "stop_grace": context.contract.stop_grace,
                                            "action": "terminate_thread"})
        except StoreError:
            logger.error("job %s: could not record the escalation", context.job_id)

    # -- limits (reliable.limits: the logic lives there) ---------------------------------------

    def _limits_admit(self, broker: dramatiq.Broker, message: Any, digest: str | None = None) -> None:
        """Take the actor's slot and token for this delivery, or publish it again later and skip it."""
        self._delivery.limits = None
        spec = self.limits.spec_for(broker, message.actor_name)
        if spec is None:
            return
        # Only a delivery whose claim can win spends a slot or a token (not a duplicate of a
        # finished or running job, nor an early retry): look first, handle a refusal as the claim would.
        refusal = self._with_store_retry("claimable", lambda: self.store.claim_refusal(
            message.message_id, delivery_digest=digest))
        if refusal is not None:
            self._skip_refused(broker, message, refusal)
        try:
            outcome = self._with_store_retry("limits", lambda: self.limits.admit(
                self.store, spec, message, lease_ttl=self.lease_ttl, worker_id=self.worker_id))
        except LimitKeyError as exc:
            self._limits_key_failed(message, exc)
            message.options["store_results"] = False
            raise SkipMessage("limits key") from None
        if isinstance(outcome, Admission):
            self._delivery.limits = outcome
            return
        self._limits_defer(broker, message, outcome)

    def _limits_defer(self, broker: dramatiq.Broker, message: Any, denial: Denial) -> NoReturn:
        """Publish the delivery again later and skip it (always raises SkipMessage)."""
        try:
            delay = self.limits.defer(broker, self.store, message, denial, worker_id=self.worker_id)
        except Exception:  # the job stays PENDING in the store: the recovery loop's sweeper re-publishes it
            logger.warning("job %s: publishing its deferral failed; the recovery loop will re-dispatch it",
                           message.message_id, exc_info=True)
        else:
            logger.debug("job %s deferred %.2fs: %s limit of %s", message.message_id, delay, denial.limit,
                         denial.spec.actor)
        message.options["store_results"] = False  # never ran: Results must not store None for it
        raise SkipMessage(f"{denial.limit} limit")

    def _limits_key_failed(self, message: Any, exc: LimitKeyError) -> None:
        """Fail the job whose limits key cannot be computed from its arguments: it can never run.
        The claim decides as for any attempt (a duplicate of a finished job changes nothing)."""
        job_id = message.message_id
        logger.error("job %s: %s; the job fails", job_id, exc)
        try:
            claim = self._with_store_retry("claim", lambda: self.store.claim(
                job_id, worker_id=self.worker_id, lease_ttl=self.lease_ttl))
        except ClaimRefused as refusal:
            logger.info("message %s skipped: claim refused (%s)", job_id, refusal.reason)
            return
        cause = exc.__cause__ or exc
        error = ErrorInfo("limits_key", type(cause).__name__, redact_secrets(str(exc)))
        try:
            self._with_store_retry("fail", lambda: self.store.finish(
                job_id, claim.job.lease_id, Event.FAIL, worker_id=self.worker_id, error=error))
        except (LeaseLost, TransitionRefused) as refused:
            logger.warning("job %s: %s", job_id, refused)

    def _limits_bind(self, broker: dramatiq.Broker, message: Any, claim: Any) -> None:
        """Tie the admission's slot to the claim's lease; when the slot was lost and none is free,
        give the job back (PENDING is not reachable from a claim: a retry now, no attempt of the
        actor's code) and defer this delivery: it never runs without its slot."""
        admission: Admission | None = getattr(self._delivery, "limits", None)
        if admission is None or self.limits.bind(self.store, admission, claim.job.lease_id,
                                                 lease_ttl=self.lease_ttl, worker_id=self.worker_id):
            return
        self._delivery.limits = None
        job_id = message.message_id
        logger.warning("job %s: its %s slot was taken by another job before its claim; deferred", job_id,
                       admission.spec.actor)
        try:
            self._with_store_retry("retry_scheduled", lambda: self.store.finish(
                job_id, claim.job.lease_id, Event.RETRY, worker_id=self.worker_id, retry_delay=0.0,
                detail={"limit_slot_lost": admission.spec.actor}))
        except (LeaseLost, TransitionRefused) as refused:
            logger.warning("job %s: %s", job_id, refused)
        self._limits_defer(broker, message, Denial(admission.spec, admission.key, "concurrency", 0.0))

    def _limits_release(self) -> None:
        admission: Admission | None = getattr(self._delivery, "limits", None)
        self._delivery.limits = None
        if admission is not None:
            self.limits.release(self.store, admission)

    def _limits_rate_limited(self, context: JobContext) -> None:
        job = context.claim.job
        spec = self.limits.spec_for(self.broker, job.actor) if self.broker is not None else None
        if spec is None:
            return
        try:
            self.limits.rate_limited(self.store, spec, job.home_queue, job.job_id, worker_id=self.worker_id)
        except ReliableError as exc:
            logger.warning("job %s: could not record the rate-limited failure for %s's limits: %s",
                           job.job_id, job.actor, exc)

    def _rate_limited_retries(self, context: JobContext) -> int:
        if context.claim.job.retry_count == 0:
            return 0
        try:
            return self.store.count_job_events(context.job_id, "retry_scheduled",
                                               detail_contains=RATE_LIMITED_MARK, since_fresh_budget=True)
        except StoreError:
            return 0

    def _recent_retries(self, context: JobContext) -> int:
        try:
            return self.store.count_recent_events("retry_scheduled", actor=context.claim.job.actor,
                                                  window=RETRY_BUDGET_WINDOW)
        except StoreError:
            return 0

    def _with_store_retry(self, what: str, call: Callable[[], Any]) -> Any:
        """Run a store call; while the database is unreachable or unmigrated, wait and retry (unacked).

        The wait between tries is capped by the heartbeat interval, so a write lands within about
        one interval of the store's return: before recovery may expire any lease (a full TTL).
        """
        return retry_while_unavailable(call, what=what, max_delay=self.heartbeat_interval,
                                       note=" (message kept unacked)")


def _retry_queue(decision: Decision, job: Any) -> str | None:
    """The queue a retry moves the job to (docs/policies.md, "Retry routing"): the decision's, else
    the job's own; None when it waits there already (the common case keeps its single write)."""
    if decision.action != "retry":
        return None
    lane = decision.queue or job.home_queue
    return None if lane == job.queue else str(lane)


def _count_failure(message: Any, formatted_traceback: str) -> int:
    """Set Dramatiq's `retries`, `traceback` (`FailureTexts.message`) and `requeue_timestamp` on a failed
    attempt's message, as its Retries middleware does (callbacks and the retry see them); the new `retries`."""
    options = message.options
    options["retries"] = int(options.get("retries") or 0) + 1
    options["traceback"] = formatted_traceback
    options["requeue_timestamp"] = int(time.time() * 1000)
    return int(options["retries"])


def _publish_group_callbacks(broker: dramatiq.Broker, member_id: str, callbacks: list[dramatiq.Message[Any]]) -> None:
    """Publish a group's completion callbacks, already registered: one that fails is left to the sweeper."""
    for callback in callbacks:
        try:
            broker.enqueue(callback)
        except Exception:
            logger.warning("job %s: publishing the group's completion callback %s failed; the recovery loop "
                           "will", member_id, callback.actor_name, exc_info=True)


def _group_at_end(options: dict[str, Any]) -> str | None:
    """The group a pipeline belongs to: a group of pipelines marks only each pipeline's last step."""
    step = options.get("pipe_target")
    while isinstance(step, dict):
        step_options = step.get("options") or {}
        if step_options.get("group_completion_uuid"):
            return str(step_options["group_completion_uuid"])
        step = step_options.get("pipe_target")
    return None


def _link_workflow(message: dramatiq.Message[Any], actor_options: dict[str, Any]) -> None:
    """Give a message the workflow it belongs to: a declared or inherited `workflow_id`, its
    group's completion id (for a pipeline in a group: the id on its last step), or, for the first
    step of a pipeline, its own id; every later step (the nested `pipe_target`s) carries the same id."""
    options = message.options
    workflow_id = (options.get("workflow_id") or actor_options.get("workflow_id")
                   or options.get("group_completion_uuid") or _group_at_end(options)
                   or (message.message_id if options.get("pipe_target") is not None else None))
    if not workflow_id:
        return
    options["workflow_id"] = workflow_id
    step = options.get("pipe_target")
    while isinstance(step, dict):
        step_options = step.setdefault("options", {})
        step_options.setdefault("workflow_id", workflow_id)
        step = step_options.get("pipe_target")
