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

Membership: every member of a group whose barrier the store holds was registered by the producer
that ran the group, before its publication (`group.run()` creates the barrier, then enqueues the
members through reliable's registration). A delivery of a job the store does not know that names
such a group (its own `group_completion_uuid`, or a pipeline's last step's) is therefore no member:
`forged_member` says so and the claim refuses it as a delivery mismatch (recorded, dead-lettered,
never run, never counted at the barrier). A message claiming an existing job's id with group options
its job was not registered with differs in its delivery digest and is refused by the claim itself.
Untracked members are never in the store: their arrivals are counted as Dramatiq counts them.

`Groups` is the step: `adopt` replaces the broker's GroupCallbacks, `completion` builds a member's
arrival (`FanIn`) with the jobs of the group's callbacks, `arrived` publishes them once the commit
cleared the barrier, and `untracked_member_succeeded` brings an untracked member's success to the
store's barrier.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import dramatiq
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits import RateLimiterBackend

from ..store import FanIn, NewJob
from ..tracecontext import TRACE_OPTIONS
from . import after_commit
from .context import JobContext
from .registration import group_of

if TYPE_CHECKING:
    from .registration import Registration
    from .runtime import Runtime

__all__ = ["Groups", "StoreBarrierBackend", "TrackedGroupCallbacks"]


class StoreBarrierBackend(RateLimiterBackend):
    """A rate-limiter backend whose barrier creation (`add`) also creates the barrier in the store.

    Every call goes to the wrapped backend too (Dramatiq's barrier keeps working for untracked members).
    """

    def __init__(self, backend: RateLimiterBackend, runtime: Runtime) -> None:
        self.backend: Any = backend  # Dramatiq's backends are untyped
        self.runtime = runtime

    def add(self, key: str, value: int, ttl: int) -> bool:
        """Create the barrier `key` for `value` parties in the backend and in the store."""
        added = bool(self.backend.add(key, value, ttl))
        runtime = self.runtime  # waits while the store is unreachable, up to the send_timeout
        runtime.send("create_barrier", lambda: runtime.store.create_barrier(key, value))
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

    def __init__(self, inner: GroupCallbacks, groups: Groups) -> None:
        super().__init__(StoreBarrierBackend(inner.rate_limiter_backend, groups.runtime), barrier_ttl=inner.barrier_ttl)
        self.inner = inner
        self.groups = groups

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        """An untracked member's success arrives at the store's barrier (Dramatiq's, for a group the
        store does not know); a tracked member's is counted by reliable's middleware, with its commit."""
        if self.groups.registration.tracked(broker, message.actor_name):
            return
        if exception is None and self.groups.untracked_member_succeeded(broker, message):
            return
        self.inner.after_process_message(  # type: ignore[no-untyped-call]
            broker, message, result=result, exception=exception)


class Groups:
    """Group barriers in the store, for one middleware: its store (through `runtime`), how a
    callback becomes a job (`registration`) and the broker's GroupCallbacks once adopted."""

    __slots__ = ("callbacks", "registration", "runtime")

    def __init__(self, runtime: Runtime, registration: Registration) -> None:
        self.runtime, self.registration = runtime, registration
        #: The broker's GroupCallbacks, once replaced by a TrackedGroupCallbacks (`adopt`).
        self.callbacks: TrackedGroupCallbacks | None = None

    def adopt(self, broker: dramatiq.Broker) -> TrackedGroupCallbacks | None:
        """Replace the broker's GroupCallbacks by a TrackedGroupCallbacks (once); the one in place, or None."""
        if self.callbacks is None:
            self.callbacks = self._adopt(broker)
        return self.callbacks

    def _adopt(self, broker: dramatiq.Broker) -> TrackedGroupCallbacks | None:
        for index, middleware in enumerate(broker.middleware):
            if isinstance(middleware, TrackedGroupCallbacks):
                return middleware
            if isinstance(middleware, GroupCallbacks):
                tracked = TrackedGroupCallbacks(middleware, self)
                broker.middleware[index] = tracked
                return tracked
        return None

    def completion(self, broker: dramatiq.Broker, message: Any, *, trace: Callable[[], Mapping[str, Any]],
                   parent_job_id: str) -> tuple[FanIn, list[dramatiq.Message[Any]]] | None:
        """A group member's arrival at its completion barrier, with the group's callbacks to register
        (`trace()`: the trace options they carry, asked only for a group member)."""
        barrier_id = message.options.get("group_completion_uuid")
        callbacks = message.options.get("group_completion_callbacks")
        if not barrier_id or not callbacks or self.callbacks is None:
            return None
        messages: list[dramatiq.Message[Any]] = []
        new_jobs: list[NewJob] = []
        carried = trace()
        for data in callbacks:
            # A copy: the member's message (and Dramatiq's barrier, if it decides) keep theirs as sent.
            callback: dramatiq.Message[Any] = dramatiq.Message(**{**data, "options": dict(data.get("options") or {})})
            callback.options.update(carried, parent_job_id=parent_job_id, workflow_id=barrier_id)
            prepared = self.registration.new_job(broker, callback, None)
            messages.append(callback)
            if prepared is not None:
                new_jobs.append(prepared[0])
        return FanIn(barrier_id, new_jobs), messages

    def forged_member(self, message: Any) -> str | None:
        """Why a delivery of a job the store does not know may not join the group it names (see the
        module doc), or None: it names no group, or one whose barrier the store does not hold (a
        producer without reliable ran it: Dramatiq's barrier decides, as without reliable)."""
        group = group_of(message.options)
        if group is None:
            return None
        runtime = self.runtime
        if not runtime.with_store_retry("barrier_known", lambda: runtime.store.barrier_known(group)):
            return None
        return f"it names group {group[:100]!r}, whose members were all registered when the group ran"

    def untracked_member_succeeded(self, broker: dramatiq.Broker, message: Any) -> bool:
        """An untracked group member's success arrives at its group's barrier in the store (so a group
        mixing tracked and untracked members completes); False when the store does not know the
        barrier, and Dramatiq's barrier decides."""
        trace = {key: message.options[key] for key in TRACE_OPTIONS if message.options.get(key)}
        built = self.completion(broker, message, trace=lambda: trace, parent_job_id=message.message_id)
        if built is None:
            return False
        fan_in, callbacks = built
        runtime = self.runtime
        runtime.with_store_retry("arrive_at_barrier", lambda: runtime.store.arrive_at_barrier(fan_in))
        if not fan_in.known:
            return False
        if fan_in.cleared:
            after_commit.publish_group_callbacks(broker, message.message_id, callbacks)
        return True

    def arrived(self, broker: dramatiq.Broker, context: JobContext, fan_in: FanIn,
                callbacks: list[dramatiq.Message[Any]]) -> None:
        """Publish the group's completion callbacks if this member cleared its barrier (registered
        with its success), or let Dramatiq's barrier decide for a group the store does not know."""
        if not fan_in.known:
            from dramatiq.rate_limits import Barrier

            adopted = self.callbacks
            assert adopted is not None
            inner = adopted.inner
            barrier = Barrier(inner.rate_limiter_backend, fan_in.barrier_id, ttl=inner.barrier_ttl)  # type: ignore[no-untyped-call]
            if not barrier.wait(block=False):  # type: ignore[no-untyped-call]
                return
            # Not registered with the success (the store has no barrier to clear): register now,
            # before publishing, as a producer's enqueue would.
            runtime = self.runtime
            runtime.with_store_retry("register", lambda: runtime.store.register_many(fan_in.jobs))
        elif not fan_in.cleared:
            return
        after_commit.publish_group_callbacks(broker, context.job_id, callbacks)
