"""`reliable.install(broker, store=..., policies=...)`: adoption in one line."""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, Retries

from ..policy import Policy
from ..store import StateStore
from .continuations import kind_of
from .delivery import fields
from .dramatiq_logs import quiet_rate_limited_retries
from .middleware import ReliableMiddleware

__all__ = ["ForUntrackedActors", "install"]


class ForUntrackedActors(Middleware):
    """A Dramatiq middleware (Retries, Pipelines, Callbacks) that acts only for actors reliable
    does not track (`reliable=False`).

    For tracked actors reliable does their work itself: the policy decides retries and the store
    records them (letting Retries act too would retry twice, and its re-enqueue-then-ack can lose a
    message: Dramatiq PR #545); the next pipeline step, callbacks and `on_retry_exhausted` are
    registered in the transaction that commits the job's outcome (`reliable.worker.continuations`).
    """

    def __init__(self, inner: Middleware, reliable: ReliableMiddleware) -> None:
        self.inner = inner
        self.reliable = reliable

    def __repr__(self) -> str:
        return f"ForUntrackedActors({self.inner!r})"

    @property
    def actor_options(self) -> set[str]:
        """The wrapped middleware's options (max_retries, on_success, pipe_target...) stay valid."""
        return set(self.inner.actor_options)

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        """Delegate for untracked actors only."""
        if not self.reliable.tracked(broker, fields(message).actor_name):
            self.inner.after_process_message(broker, message, result=result, exception=exception)


def install(broker: dramatiq.Broker, *, store: StateStore | str,
            policies: Policy | str | os.PathLike[str] | None = None, **options: Any) -> ReliableMiddleware:
    """Add reliable to `broker`: call it before your actors are declared.

    Parameters:
      broker: the application's Dramatiq broker (RabbitmqBroker, StubBroker, ...).
      store: the state store URL (``sqlite:///reliable.db``, ``postgresql+psycopg://...``) or a StateStore.
      policies: a policy file or directory (see `reliable docs policies`), a loaded Policy, or None for defaults.
      options: passed to ReliableMiddleware (lease_ttl, heartbeat_interval, recovery, listeners,
        max_connections, ...), among them ``schedules``: recurring jobs, a list of
        ``reliable.Schedule`` or the path of a YAML file of them (`reliable docs schedules`), and
        ``send_timeout``: how long a send waits for a store it cannot reach before it raises
        SendTimedOut, a StoreUnavailable (seconds, default 30; per send: the message option
        ``send_timeout``, e.g. ``actor.send_with_options(args=(1,), send_timeout=5)``).

    The store is checked once here when it can be reached: a configuration error (the database,
    user, password or rights in the URL are wrong, the schema is missing or older than this code)
    raises StoreMisconfigured / StoreNotMigrated at once, saying what to fix or run. A store that
    cannot be reached now is only logged: each send waits for it up to its send_timeout.

    Dramatiq's Retries, Pipelines and Callbacks middleware are kept for actors declared with
    ``reliable=False``; for every tracked actor reliable does their work (see ForUntrackedActors).
    GroupCallbacks is replaced so that group barriers are kept in the store (`reliable.worker.groups`).
    """
    policy = policies if isinstance(policies, Policy) else Policy.load(policies)
    middleware = ReliableMiddleware(store, policy=policy, **options)
    middleware.runtime.check_store(at="reliable.install")  # before the broker is changed
    kinds: set[str] = set()
    for index, existing in enumerate(broker.middleware):
        kind = kind_of(existing)
        if kind is None:
            continue
        kinds.add(kind)
        if isinstance(existing, Retries):
            middleware.dramatiq_retries = existing
        broker.middleware[index] = ForUntrackedActors(existing, middleware)
    middleware.continuation_kinds = frozenset(kinds)
    broker.add_middleware(middleware)
    middleware.broker = broker
    middleware.adopt_group_callbacks(broker)
    quiet_rate_limited_retries()
    return middleware
