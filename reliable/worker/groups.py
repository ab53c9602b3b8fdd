"""Dramatiq groups with completion callbacks, counted in the store.

`group.run()` creates a barrier for its members in the GroupCallbacks middleware's rate-limiter
backend, and each member's success decrements it after the fact: a worker killed between
reliable's commit of that success and the decrement loses the group's completion callbacks for
good. reliable replaces the broker's GroupCallbacks by a TrackedGroupCallbacks whose backend also
creates the barrier in the store (`StateStore.create_barrier`); a tracked member's success then
arrives at it in the transaction that commits the success, and the arrival that clears it
registers the completion callbacks in that same transaction (`StateStore.finish(fan_in=...)`).

Untracked members keep Dramatiq's barrier. A group created before its broker's GroupCallbacks
was replaced (the middleware added after `install` in a producer that ran the group before any
other reliable hook) has no barrier in the store: its tracked members fall back to Dramatiq's
barrier after the commit, as without reliable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dramatiq
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits import RateLimiterBackend

from .completion import untracked_member_succeeded

if TYPE_CHECKING:
    from .middleware import ReliableMiddleware

__all__ = ["StoreBarrierBackend", "TrackedGroupCallbacks", "adopt_group_callbacks"]


class StoreBarrierBackend(RateLimiterBackend):
    """A rate-limiter backend whose barrier creation (`add`) also creates the barrier in the store.

    Every call goes to the wrapped backend too (Dramatiq's barrier keeps working for untracked members).
    """

    def __init__(self, backend: RateLimiterBackend, reliable: ReliableMiddleware) -> None:
        self.backend: Any = backend  # Dramatiq's backends are untyped
        self.reliable = reliable

    def add(self, key: str, value: int, ttl: int) -> bool:
        """Create the barrier `key` for `value` parties in the backend and in the store."""
        added = bool(self.backend.add(key, value, ttl))
        runtime = self.reliable.runtime  # waits while the store is unreachable
        runtime.with_store_retry("create_barrier", lambda: runtime.store.create_barrier(key, value))
        return added

    def incr(self, key: str, amount: int, maximum: int, ttl: int) -> bool:
        """The wrapped backend's incr."""
        return bool(self.backend.incr(key, amount, maximum, ttl))

    def decr(self, key: str, amount: int, minimum: int, ttl: int) -> bool:
        """The wrapped backend's decr."""
        return bool(self.backend.decr(key, amount, minimum, ttl))

    def incr_and_sum(self, key: str, keys: Any, amount: int, maximum: int, ttl: int) -> bool:
        """The wrapped backend's incr_and_sum."""
        return bool(self.backend.incr_and_sum(key, keys, amount, maximum, ttl))

    def wait(self, key: str, timeout: int) -> bool:
        """The wrapped backend's wait."""
        return bool(self.backend.wait(key, timeout))

    def wait_notify(self, key: str, ttl: int) -> None:
        """The wrapped backend's wait_notify."""
        self.backend.wait_notify(key, ttl)


class TrackedGroupCallbacks(GroupCallbacks):
    """Dramatiq's GroupCallbacks (still found by `group.run()`), with its barriers also in the store,
    where every member's success arrives (tracked members' with their commit); Dramatiq's barrier
    decides only for a group the store does not know."""

    def __init__(self, inner: GroupCallbacks, reliable: ReliableMiddleware) -> None:
        super().__init__(StoreBarrierBackend(inner.rate_limiter_backend, reliable), barrier_ttl=inner.barrier_ttl)
        self.inner = inner
        self.reliable = reliable

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        """An untracked member's success arrives at the store's barrier (Dramatiq's, for a group the
        store does not know); a tracked member's is counted by reliable's middleware, with its commit."""
        if self.reliable.tracked(broker, message.actor_name):
            return
        if exception is None and untracked_member_succeeded(self.reliable, broker, message):
            return
        self.inner.after_process_message(  # type: ignore[no-untyped-call]
            broker, message, result=result, exception=exception)


def adopt_group_callbacks(broker: dramatiq.Broker, reliable: ReliableMiddleware) -> TrackedGroupCallbacks | None:
    """Replace the broker's GroupCallbacks by a TrackedGroupCallbacks (once); the one in place, or None."""
    for index, middleware in enumerate(broker.middleware):
        if isinstance(middleware, TrackedGroupCallbacks):
            return middleware
        if isinstance(middleware, GroupCallbacks):
            tracked = TrackedGroupCallbacks(middleware, reliable)
            broker.middleware[index] = tracked
            return tracked
    return None
