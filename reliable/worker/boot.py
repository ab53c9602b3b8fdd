"""A worker process boots: what is checked, stored and started before its first message.

In order: the policy's `actors:` and `queues:` sections are checked against what the broker declares
(`reliable.policy.names`: a WARNING per section naming nothing, or, with strict_names, a refused
boot: ActorContractError); with json_logs, the events go to stderr; the broker's GroupCallbacks is adopted; its
consumers are watched (`consumed`: each delivery names the queue it came from); the process's
store is opened and checked (a configuration error, StoreMisconfigured or StoreNotMigrated, stops
the boot saying what to fix or run; a store that cannot be reached is only logged), then its
replication; the broker is checked (`reliable.rabbitmq`: delivery limit, queues,
consumer_timeout); every tracked actor's metrics start at 0; the app's schedules are stored (their
actors are imported by now: the job templates can be built; an unreachable store is waited for up
to the send_timeout); the policy's retry lanes are declared; the heartbeat starts; the process
goes on record and releases the leases of this host's dead processes (reliable.worker.processes);
if enabled, the recovery thread starts. A mistake stops the boot (ActorContractError, a
MiddlewareError: the worker does not start).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import dramatiq

from ..consumed import watch_consumers
from ..dispatch import declare_queue
from ..errors import ActorContractError, ConfigError
from ..events import log_events_to_stderr
from ..policy import Policy
from ..policy.names import undeclared_names
from ..rabbitmq.boot import check_broker
from ..schedules.boot import declare_schedules

if TYPE_CHECKING:
    from ..metrics import Metrics
    from ..registrar import Registrar
    from .acks import HeldAcks
    from .groups import Groups
    from .plans import Plans
    from .registration import Registration
    from .runtime import Runtime
    from .settings import Settings

__all__ = ["boot", "check_policy_names"]

logger = logging.getLogger("reliable.middleware")


def boot(broker: dramatiq.Broker, worker: Any, *, installed: Registrar, settings: Settings, runtime: Runtime,
         plans: Plans, registration: Registration, groups: Groups, acks: HeldAcks, metrics: Metrics | None) -> None:
    """Boot this worker process for `broker` (see the module doc). `installed`: the middleware, as
    `check_broker` and the schedules' templates see it (its public face)."""
    process = runtime
    plans.broker = broker
    check_policy_names(settings.policy, broker, strict=settings.strict_names)
    if settings.json_logs:
        log_events_to_stderr()
    groups.adopt(broker)
    # Before the worker starts its consumers: deliveries name their queue; a fast-path queue's
    # consumer may prefetch more (reliable.worker.acks).
    watch_consumers(broker, acks.prefetch)
    process.ensure_process()
    process.check_store(at="worker boot", worker=True)  # a configuration error stops the boot, saying what to fix
    process.check_replication()
    check_broker(broker, installed, worker)
    if metrics is not None:
        retried = [name for name, spec in settings.policy.classes.items() if spec.action == "retry"]
        for name in broker.get_declared_actors():
            if registration.tracked(broker, name):
                actor = broker.get_actor(name)
                owner = actor.options.get("owner")
                metrics.track(name, actor.queue_name, retried, owner=str(owner) if owner else None)
    assert process.heartbeat is not None
    if settings.schedules:
        for schedule in settings.schedules:
            if settings.recovery and schedule.grace < settings.recovery_interval:
                # The scheduler ticks once per recovery pass: a slot could be older than the
                # grace at every tick, and "skip" would drop every slot.
                raise ActorContractError(
                    f"schedule {schedule.name!r}: misfire_grace {schedule.grace:g}s is shorter than the "
                    f"recovery interval {settings.recovery_interval:g}s the scheduler ticks at")
        try:
            process.send("declare schedules", lambda: declare_schedules(process.store, installed, broker,
                                                                        settings.schedules))
        except ConfigError as exc:  # raised as a MiddlewareError, so that the worker does not boot
            raise ActorContractError(str(exc)) from None
    for lane in settings.policy.lanes:  # retries routed there: a worker started with `--queues <lane>` consumes it
        declare_queue(broker, lane)
    process.heartbeat.start()
    process.start_stats()
    whitelist = getattr(worker, "consumer_whitelist", None)
    process.go_on_record(broker, plans.options, threads=getattr(worker, "worker_threads", None),
                         queues=whitelist if whitelist else broker.get_declared_queues())
    if settings.recovery:
        process.start_recovery(broker)


def check_policy_names(policy: Policy, broker: dramatiq.Broker, *, strict: bool) -> None:
    """A WARNING for each policy section naming no actor or queue `broker` declares; with `strict`,
    ActorContractError for them all, so that the worker does not boot (`reliable.policy.names`)."""
    actors = [broker.get_actor(name) for name in sorted(broker.get_declared_actors())]
    queues = {actor.queue_name for actor in actors} | set(broker.get_declared_queues())
    names = undeclared_names(policy, [actor.actor_name for actor in actors], queues)
    if names and strict:
        raise ActorContractError("; ".join(map(str, names)) + " (strict_names=True)")
    for name in names:
        logger.warning("policy: %s", name)
