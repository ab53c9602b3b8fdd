"""`reliable.install(broker, store=..., policies=...)`: adoption in one line."""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware, Retries

from .middleware import ReliableMiddleware
from .policy import Policy
from .store import StateStore

__all__ = ["GuardedRetries", "install"]


class GuardedRetries(Middleware):
    """Dramatiq's Retries, but only for actors reliable does not track (`reliable=False`).

    For tracked actors the policy decides retries and the store records them; letting Retries act
    too would retry twice, and its re-enqueue-then-ack can lose a message (Dramatiq PR #545).
    """

    def __init__(self, retries: Retries, reliable: ReliableMiddleware) -> None:
        self.retries = retries
        self.reliable = reliable

    @property
    def actor_options(self) -> set[str]:
        """Retries' own options (max_retries, min_backoff, ...) stay valid on every actor."""
        return set(self.retries.actor_options)

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        """Delegate to Retries for untracked actors only."""
        if not self.reliable.tracked(broker, message.actor_name):
            self.retries.after_process_message(  # type: ignore[no-untyped-call]
                broker, message, result=result, exception=exception)


def install(broker: dramatiq.Broker, *, store: StateStore | str,
            policies: Policy | str | os.PathLike[str] | None = None, **options: Any) -> ReliableMiddleware:
    """Add reliable to `broker`: call it before your actors are declared.

    Parameters:
      broker: the application's Dramatiq broker (RabbitmqBroker, StubBroker, ...).
      store: the state store URL (``sqlite:///reliable.db``, ``postgresql+psycopg://...``) or a StateStore.
      policies: a policy file or directory (see docs/policies.md), a loaded Policy, or None for defaults.
      options: passed to ReliableMiddleware (lease_ttl, heartbeat_interval, recovery, listeners,
        max_connections, ...).

    Dramatiq's Retries middleware is kept for actors declared with ``reliable=False`` and disabled
    for every tracked actor: reliable's policy owns retries.
    """
    policy = policies if isinstance(policies, Policy) else Policy.load(policies)
    middleware = ReliableMiddleware(store, policy=policy, **options)
    for index, existing in enumerate(broker.middleware):
        if isinstance(existing, Retries):
            broker.middleware[index] = GuardedRetries(existing, middleware)
    broker.add_middleware(middleware)
    middleware.broker = broker
    return middleware
