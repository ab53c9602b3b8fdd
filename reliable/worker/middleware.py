"""The Dramatiq middleware: Dramatiq's hooks, each handing over to the module that owns the step.

- before_enqueue, enqueue_many (producer thread): the job row is written PENDING before the message
  is published (`registration`).
- before_process_message (worker thread): admission by the actor's limits (`admission`), then the
  claim, a compare-and-set; refused -> SkipMessage, the store already holds the truth (`claim`).
- after_process_message (worker thread): the attempt's outcome (`outcome`, pure) written fenced by
  its lease with what follows it (`completion`), then acted on (`after_commit`). Retries are new
  (delayed) publishes decided there, never Dramatiq's Retries middleware (see `install`). A job
  that ends FAILED or DEAD has its message failed (nacked), as Dramatiq's Retries would; any other
  outcome is acknowledged.
- after_skip_message: a claimed job another middleware skipped is given back (`claim.skipped`).
- worker boot and shutdown: the per-process heartbeat and recovery threads (`runtime`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from ..errors import ActorContractError, ConfigError, PolicyError
from ..metrics import Metrics
from ..options import ACTOR_OPTIONS
from ..policy import JobContract, Policy
from ..schedules import Schedule
from ..store import StateStore
from . import after_commit, claim, completion, runtime, spans
from .admission import Limits
from .context import Delivery
from .groups import TrackedGroupCallbacks, adopt_group_callbacks
from .heartbeat import Heartbeat
from .plans import Plans
from .registration import Registration
from .settings import Settings

__all__ = ["ReliableMiddleware"]

logger = logging.getLogger("reliable.middleware")


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
        self.settings = s = Settings.resolve(
            store, policy=policy, lease_ttl=lease_ttl, heartbeat_interval=heartbeat_interval, recovery=recovery,
            recovery_interval=recovery_interval, sweep_after=sweep_after, listeners=listeners, metrics=metrics,
            json_logs=json_logs, max_connections=max_connections, group_commit=group_commit, tracing=tracing,
            schedules=schedules, replication=replication)
        self.policy, self.lease_ttl, self.heartbeat_interval = s.policy, s.lease_ttl, s.heartbeat_interval
        self.recovery_enabled, self.recovery_interval, self.sweep_after = s.recovery, s.recovery_interval, s.sweep_after
        self.replication, self.group_commit, self.max_connections = s.replication, s.group_commit, s.max_connections
        self.metrics, self.tracing, self.schedules = s.metrics, s.tracing, s.schedules
        self.runtime = runtime.Runtime(s, on_escalation=lambda job, overdue: after_commit.escalate(self, job, overdue))
        self.plans = Plans(s.policy)
        self.registration = Registration(self.plans, self.runtime, s.tracing)
        #: What this worker thread's delivery holds between the hooks.
        self.delivery = Delivery()
        #: The continuation kinds reliable sends for tracked actors (set by `install` from the
        #: Dramatiq middleware it found: see `reliable.worker.continuations`).
        self.continuation_kinds: frozenset[str] = frozenset()
        #: Dramatiq's Retries middleware of the broker, if any: its `retry_when` applies to tracked actors.
        self.dramatiq_retries: Any = None
        #: The broker's GroupCallbacks, replaced so group barriers live in the store (reliable.worker.groups).
        self.group_callbacks: TrackedGroupCallbacks | None = None
        #: Concurrency and rate limits declared with `limits=` (reliable.limits).
        self.admission = Limits(self)

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
        self.runtime.ensure_process()
        return self.runtime.worker_id

    def contract_for(self, actor_name: str, queue: str, message_options: dict[str, Any] | None = None) -> JobContract:
        """The job contract of an actor's job on `queue` (see `Plans.contract`)."""
        return self.plans.contract(actor_name, queue, message_options)

    def tracked(self, broker: dramatiq.Broker, actor_name: str) -> bool:
        """Whether reliable tracks this actor (all do, unless declared with `reliable=False`)."""
        return self.registration.tracked(broker, actor_name)

    def adopt_group_callbacks(self, broker: dramatiq.Broker) -> None:
        """Keep group barriers in the store from now on, if the broker has GroupCallbacks (reliable.worker.groups)."""
        if self.group_callbacks is None:
            self.group_callbacks = adopt_group_callbacks(broker, self)

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
        """Start this process's heartbeat and recovery loop (see `runtime.boot`)."""
        runtime.boot(self, broker, worker)

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Stop the recovery loop and wait for its pass to end; the heartbeat keeps running until
        the worker threads finish."""
        self.runtime.stop_recovery()

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        """Stop the heartbeat once every worker thread has finished its message."""
        self.runtime.shutdown()

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        """Register the job (PENDING) before its message is published; no-op for a known job_id."""
        if self.registration.registered_in_bulk(message):
            return
        if self.group_callbacks is None and "group_completion_uuid" in message.options:
            self.adopt_group_callbacks(broker)  # GroupCallbacks added after install: the next groups
        self.registration.register(broker, message, delay)

    def enqueue_many(self, broker: dramatiq.Broker, messages: list[dramatiq.Message[Any]]) -> int:
        """Register many messages in one transaction (one store round trip per 500 jobs), then publish
        them; how many were new jobs."""
        return self.registration.register_many(broker, messages)

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        """Claim the job; refuse to run it (skip + ack) unless the claim wins."""
        self.broker = broker
        if not self.tracked(broker, message.actor_name):
            return
        try:
            claim.claim(self, broker, message)
        except SkipMessage:
            self.admission.release()
            raise
        except BaseException:
            self.admission.release()
            # Dramatiq swallows any other exception of a before-hook and would run the actor
            # without a claim: never let that happen. A PENDING job is re-dispatched by the sweeper.
            logger.exception("claim of message %s failed; skipping it", message.message_id)
            message.options["store_results"] = False  # never ran: Results must not store None for it
            raise SkipMessage("claim failed") from None

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        """Commit the attempt's outcome, fenced by its lease; then end the attempt's span."""
        try:
            if claim.take_fast(self, message):
                claim.fast_done(self, broker, message, exception)
            elif (context := claim.take(self, message)) is not None:
                try:
                    context.leave()
                    completion.note_unrecorded_effects(self, context)
                    completion.complete(self, broker, message, context, result, exception)
                finally:
                    # Only now: the lease is renewed while the final write may still be retried (a slow
                    # or blipping store must not let recovery reclaim a job that already finished).
                    claim.release_lease(self, context)
        finally:
            self.delivery.limits = None  # its slot frees itself: the attempt ended (reliable.limits)
            spans.end(self.tracing, exception)

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        """A middleware after ours skipped a message we had claimed: give the job back, retry it now."""
        try:
            claim.skipped(self, message)
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
