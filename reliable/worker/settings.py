"""The middleware's constructor options, resolved against the policy and validated once, at install.

Owns every check of a constructor option (a mistake fails in the producer, not later in each
worker's log), among them the one rule between two of them (`reliable.policy.check_heartbeat`: the
heartbeat renews the leases, so its interval must be below the lease TTL). Nothing here opens the
store: that happens per process (`runtime`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, HeartbeatTooSlow
from ..events import JsonLogSink, check_log_events
from ..metrics import Metrics
from ..policy import Policy, check_heartbeat
from ..schedules import Schedule, load_schedules
from ..store import StateStore
from ..store.db import DEFAULT_MAX_CONNECTIONS, check_max_connections, check_store_url
from ..store.replication import ReplicationMode
from ..store.replication import check_mode as check_replication_mode
from ..tracing import Tracing

__all__ = ["DEFAULT_SEND_TIMEOUT", "SEND_COMMITS", "HeartbeatTooSlow", "Settings", "check_send_commit",
           "check_send_timeout"]


#: Seconds a send waits for a store it cannot reach (install's send_timeout, docs/operations.md):
#: long enough for a PostgreSQL restart or failover, short enough for a web request.
DEFAULT_SEND_TIMEOUT = 30.0
#: install's send_commit: whether a send's registration waits for its commit's WAL flush.
SEND_COMMITS = ("synchronous", "asynchronous")


@dataclass(frozen=True)
class Settings:
    """What `ReliableMiddleware(...)` was given, every default taken from the policy.

    The options:
      store: a StateStore, or its URL (the store is opened lazily in each worker process).
      max_connections: the most store connections each process opens (default 10, see
        `reliable docs operations`); with a StateStore, pass it to the StateStore instead.
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
      log_events: which events those lines are at INFO (reliable.events.LOG_EVENT_MODES):
        "transitions" (default: claims, checkpoints and claims handed back at DEBUG, every other
        event at INFO: about one line per state change), "all" (every event at INFO) or "none".
      interrupt_unrenewed: interrupt a job whose lease this process could not renew for a full
        lease_ttl (a silent network: other workers may reach the store and hand it on), with a log
        line and a `lease_unrenewed` event; default False: a warning, the job goes on (a store down
        for every worker hands nothing on, and an outage longer than the lease runs no body twice).
      tracing: one OpenTelemetry span per attempt (`reliable.tracing`; needs the ``otel`` extra):
        True for the global TracerProvider, or a TracerProvider. Off (False) by default.
      group_commit: on PostgreSQL, commit the claims and finishes of all this process's worker
        threads in batches, one statement each (same guards, same durability; see
        reliable/store/batching.py). Taken from the StateStore when one is passed.
      claims_ahead: on PostgreSQL with group commit, a thread's claim also claims the durable
        messages already waiting in the process (reliable/worker/ahead.py; `reliable docs concepts`,
        "Claims ahead"): fewer statements per job when threads are few. Off by default: a job claimed
        ahead is RUNNING before its run starts (a pause or cancel requested then is as one requested
        during the run), and a worker killed with claims held ahead spends an attempt of each.
      schedules: recurring jobs (`reliable.Schedule` objects, or a YAML file of them: `reliable docs schedules`),
        stored with their job templates at each worker's boot. Every worker's recovery thread runs
        the scheduler of all stored schedules, declared here or not.
      replication: what a worker does at boot when a failover of the store's PostgreSQL could lose
        commits (asynchronous standbys; reliable/store/replication.py): "warn" (default) logs why,
        "require_sync" refuses to boot, "off" does not check. See `reliable docs postgresql-failover`.
      recovery_interval, sweep_after: the policy's lease settings unless given (seconds).
      send_timeout: how long a send (`actor.send()`, `send_with_options`, a group, `enqueue_many`)
        waits for a store it cannot reach before it raises SendTimedOut, a StoreUnavailable
        (seconds, default DEFAULT_SEND_TIMEOUT); one send may set its own with the message option
        ``send_timeout`` (`actor.send_with_options(args=..., send_timeout=5)`). A configuration
        error (wrong database, credentials, rights, schema missing) raises at once.
      send_commit: "synchronous" (default): a send returns once its job's row is durable (flushed
        to the WAL, shared with the sends waiting with it: one commit per batch on PostgreSQL).
        "asynchronous" (PostgreSQL): the registration commits with `synchronous_commit=off` for its
        own transaction only, so a send does not wait for the flush; a crash of the database (not of
        the producer) may lose the last such rows, and a worker re-registers a job it finds
        missing from its delivered message (`reliable docs performance`, "Producer"). SQLite
        ignores it.
      strict_names: refuse to boot a worker whose policy has an `actors:` or `queues:` section naming
        no actor or queue the app declares (a typo there gives the real actor the defaults); by
        default each such section is a WARNING at the worker's boot (`reliable.policy.names`).
    """

    store: StateStore | str
    policy: Policy
    lease_ttl: float
    heartbeat_interval: float
    recovery: bool
    recovery_interval: float
    sweep_after: float
    replication: ReplicationMode
    group_commit: bool
    max_connections: int
    metrics: Metrics | None
    json_logs: bool
    tracing: Tracing | None
    #: The store's event listeners: the JSON log sink and the metrics (if on), then the app's.
    listeners: tuple[Callable[[dict[str, Any]], None], ...]
    schedules: tuple[Schedule, ...]
    send_timeout: float = DEFAULT_SEND_TIMEOUT
    claims_ahead: bool = False
    strict_names: bool = False
    log_events: str = "transitions"
    interrupt_unrenewed: bool = False
    send_commit: str = "synchronous"

    @classmethod
    def resolve(cls, store: StateStore | str, *, policy: Policy | None, lease_ttl: float | None,
                heartbeat_interval: float | None, recovery: bool, recovery_interval: float | None,
                sweep_after: float | None, listeners: tuple[Callable[[dict[str, Any]], None], ...],
                metrics: Metrics | bool, json_logs: bool, max_connections: int | None, group_commit: bool,
                tracing: object, schedules: Sequence[Schedule] | str | os.PathLike[str] | None,
                replication: str, send_timeout: float = DEFAULT_SEND_TIMEOUT, claims_ahead: bool = False,
                strict_names: bool = False, log_events: str = "transitions", interrupt_unrenewed: bool = False,
                send_commit: str = "synchronous") -> Settings:
        """The settings of `ReliableMiddleware.__init__`'s arguments (see its docstring); ConfigError
        naming the fix for a contradiction."""
        if max_connections is not None and isinstance(store, StateStore):
            raise ConfigError("max_connections applies to a store URL: pass it to the StateStore instead")
        policy = policy or Policy.load(None)
        lease = policy.lease
        ttl = lease_ttl if lease_ttl is not None else lease.ttl
        interval = heartbeat_interval if heartbeat_interval is not None else lease.heartbeat_interval
        check_heartbeat(interval, ttl, names=("heartbeat_interval", "lease_ttl"),
                        fix="lower heartbeat_interval or raise lease_ttl (arguments, or the policy's lease section)")
        checked_replication = check_replication_mode(replication)
        if isinstance(store, str):
            check_store_url(store)  # a bad URL fails here, not later in every worker's log
        if isinstance(store, StateStore):
            group_commit, connections = store.group_commit, store.max_connections
        else:
            connections = check_max_connections(DEFAULT_MAX_CONNECTIONS if max_connections is None
                                                else max_connections)
        resolved_metrics = Metrics() if metrics is True else (metrics or None)
        sinks: list[Callable[[dict[str, Any]], None]] = [JsonLogSink(events=log_events)] if json_logs else []
        if resolved_metrics is not None:
            sinks.append(resolved_metrics)
        return cls(
            store=store, policy=policy, lease_ttl=ttl, heartbeat_interval=interval, recovery=recovery,
            recovery_interval=recovery_interval if recovery_interval is not None else lease.recovery_interval,
            sweep_after=sweep_after if sweep_after is not None else lease.sweep_after,
            replication=checked_replication, group_commit=group_commit, max_connections=connections,
            metrics=resolved_metrics, json_logs=json_logs,
            tracing=Tracing(None if tracing is True else tracing) if tracing else None,
            listeners=(*sinks, *listeners), schedules=load_schedules(schedules),
            send_timeout=check_send_timeout(send_timeout, "send_timeout"), claims_ahead=claims_ahead,
            strict_names=bool(strict_names), log_events=check_log_events(log_events),
            interrupt_unrenewed=bool(interrupt_unrenewed),
            send_commit=check_send_commit(send_commit),
        )



def check_send_commit(value: object) -> str:
    """`value` if it is one of SEND_COMMITS; ConfigError naming them otherwise."""
    if value not in SEND_COMMITS:
        raise ConfigError(f"send_commit must be one of {', '.join(map(repr, SEND_COMMITS))}, not {value!r}")
    return str(value)


def check_send_timeout(value: object, name: str) -> float:
    """`value` as a send timeout (a number of seconds >= 0); ConfigError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{name} must be a number of seconds (0 or more), not {value!r}")
    return float(value)
