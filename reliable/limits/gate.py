"""The middleware's side of limits: admit a delivery (a slot, a token) or defer it, release the
slot of a delivery whose claim did not happen (an attempt's slot frees itself when it ends), and
adapt the actor's concurrency to rate-limited failures.

A delivery that finds no slot or no token never blocks a worker thread: its message is published
again with a short jittered delay and this delivery is skipped (acknowledged). The job stays where
it was (PENDING) and no attempt is counted. A deferral is counted in
``reliable_limit_deferrals_total``; the job's event table gets a ``limit_deferred`` row only at its
1st, 2nd, 4th, 8th... deferral, so a long wait writes a handful of rows, not one per bounce.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import dramatiq

from ..errors import ReliableError
from ..options import LIMITS, own_queue
from ..store import StateStore
from .adaptive import Adaptation, LimitState, after_quiet, after_rate_limited, restore_due
from .model import LimitSpec, limit_error, limit_spec
from .storage import LimitStore, settings_for

__all__ = ["DEFERRALS_OPTION", "Admission", "Denial", "LimitGate", "deferral_delay", "deferrals",
           "fast_path_allowed", "records_deferral"]

logger = logging.getLogger("reliable.limits")

#: The message option counting a job's deferrals (travels with the re-published message).
DEFERRALS_OPTION = "reliable_deferrals"
#: The longest a deferral waits, whatever the rate says: the delivery re-checks then.
MAX_DEFERRAL = 60.0


@dataclass(frozen=True)
class Admission:
    """A delivery let through: the slot it holds (None: a rate limit only) for `job_id`."""

    spec: LimitSpec
    key: str
    job_id: str
    slot: int | None
    lease_id: int | None
    #: A step back up this delivery took, recorded on its job once claimed (the job row exists then).
    restored: Adaptation | None = None


@dataclass(frozen=True)
class Denial:
    """A delivery deferred: which limit, and the wait it suggests (seconds)."""

    spec: LimitSpec
    key: str
    limit: Literal["concurrency", "rate"]
    wait: float
    restored: Adaptation | None = None


def deferral_delay(base: float, wait: float, rand: float) -> float:
    """How long a deferred delivery waits: the longer of `base` and the suggested `wait`, spread
    over [0.5, 1.5) of it by `rand` in [0, 1) (deliveries deferred together come back apart); at
    most MAX_DEFERRAL. Pure."""
    return min(MAX_DEFERRAL, max(base, wait) * (0.5 + rand))


def fast_path_allowed(spec: LimitSpec | None) -> bool:
    """Whether an actor with these limits may run on the fast path, whatever its options or the
    policy say: not with a concurrency limit (a slot is tied to the claim's lease). Pure."""
    return spec is None or spec.concurrency is None


def deferrals(message: Any) -> int:
    """How many times this delivery's job was deferred before (limits or a paused queue)."""
    return int(message.options.get(DEFERRALS_OPTION) or 0)


def records_deferral(count: int) -> bool:
    """Whether a job's `count`-th deferral gets an event row: the 1st, 2nd, 4th, 8th... Pure."""
    return count >= 1 and count & (count - 1) == 0


class LimitGate:
    """Limits of a broker's actors in one store, for one middleware (per process: see `_limits`)."""

    def __init__(self, *, alert_after: Callable[[str, str], int], on_deferral: Callable[[str, str, str], None]
                 | None = None, rand: Callable[[], float] = random.random) -> None:
        self._alert_after = alert_after
        self._on_deferral = on_deferral
        self._rand = rand
        self._specs: dict[str, LimitSpec | None] = {}
        self._stores: tuple[int, StateStore, LimitStore] | None = None
        self._lock = threading.Lock()

    # -- declarations ----------------------------------------------------------------------------

    def declare(self, actor: Any) -> LimitSpec | None:
        """Validate a declared actor's limits (ConfigError naming actor and field); remember them."""
        spec = limit_spec(actor.actor_name, actor.options.get(LIMITS), getattr(actor, "fn", None))
        if not fast_path_allowed(spec) and actor.options.get("fast_path"):
            raise limit_error(actor.actor_name, "concurrency",
                              "cannot be combined with fast_path=True (a slot is tied to the claim's lease)")
        self._specs[actor.actor_name] = spec
        return spec

    def spec_for(self, broker: dramatiq.Broker, actor_name: str) -> LimitSpec | None:
        """The limits of `actor_name` (None: it declares none)."""
        if actor_name not in self._specs:
            try:
                self.declare(broker.get_actor(actor_name))
            except dramatiq.errors.ActorNotFound:
                self._specs[actor_name] = None
        return self._specs[actor_name]

    def limits(self, store: StateStore) -> LimitStore:
        """The LimitStore of this process (a new one after a fork)."""
        found = self._stores
        if found is None or found[0] != os.getpid() or found[1] is not store:
            with self._lock:
                found = self._stores = (os.getpid(), store, LimitStore(store, rand=self._rand))
        return found[2]

    # -- a delivery ------------------------------------------------------------------------------

    def admit(self, store: StateStore, spec: LimitSpec, message: Any, *, lease_ttl: float,
              worker_id: str) -> Admission | Denial:
        """A slot (concurrency) then a token (rate) for this delivery, or the limit that refused it.
        LimitKeyError when the key cannot be computed from the message's arguments."""
        key = spec.key_of(tuple(message.args), dict(message.kwargs))
        limits = self.limits(store)
        job_id = str(message.message_id)
        slot = lease = None
        restored = None
        if spec.concurrency is not None:
            taken = limits.acquire(spec, key, job_id, ttl=lease_ttl)
            if taken.state is None:  # the rows this process ensured are gone (deleted by hand): again
                limits.forget(spec.actor, key)
                taken = limits.acquire(spec, key, job_id, ttl=lease_ttl)
            restored = self._restore(limits, spec, taken.state, taken.now)
            if taken.slot is None and restored is not None:
                taken = limits.acquire(spec, key, job_id, ttl=lease_ttl)
            if taken.slot is None:
                return Denial(spec, key, "concurrency", 0.0, restored)
            slot, lease = taken.slot, taken.lease_id
        if spec.rate_count is not None:
            token = limits.take_token(spec, key)
            if not token.taken:
                if slot is not None:
                    limits.release(spec, key, slot, job_id)
                return Denial(spec, key, "rate", token.wait, restored)
        return Admission(spec, key, job_id, slot, lease, restored)

    def bind(self, store: StateStore, admission: Admission, lease_id: int, *, lease_ttl: float,
             worker_id: str) -> bool:
        """The claim won with `lease_id`: tie the slot to it if it expected another; record a
        step back up this delivery took. False when the slot was lost meanwhile (another job took
        it) and no other is free: the attempt must not run (the caller gives the job back)."""
        self._record(store, admission.spec, admission.restored, admission.job_id, worker_id)
        if admission.slot is None or admission.lease_id == lease_id:
            return True
        limits = self.limits(store)
        spec, key, job_id = admission.spec, admission.key, admission.job_id
        try:
            if limits.bind(spec, key, admission.slot, job_id, lease_id):
                return True
            taken = limits.acquire(spec, key, job_id, ttl=lease_ttl)  # another slot, if one is free
            return taken.slot is not None and limits.bind(spec, key, taken.slot, job_id, lease_id)
        except ReliableError as exc:  # the attempt runs; its slot is held for the ttl it was taken with
            logger.warning("job %s: could not tie its %s slot to lease %d (%s)", job_id, spec.actor, lease_id, exc)
            return True

    def release(self, store: StateStore, admission: Admission) -> None:
        """Free the admission's slot now (its claim did not happen). If the store cannot be
        reached, the slot frees itself after the ttl it was taken with."""
        if admission.slot is None:
            return
        try:
            self.limits(store).release(admission.spec, admission.key, admission.slot, admission.job_id)
        except ReliableError as exc:
            logger.warning("job %s: could not free its %s slot now (%s); it frees itself with the lease",
                           admission.job_id, admission.spec.actor, exc)

    def defer(self, broker: dramatiq.Broker, store: StateStore, message: Any, denial: Denial, *,
              worker_id: str) -> float:
        """Publish the message again after a jittered delay (this delivery is then skipped); the delay."""
        delay = deferral_delay(denial.spec.delay, denial.wait, self._rand())
        count = self.publish_again(broker, store, message, delay)
        if self._on_deferral is not None:
            self._on_deferral(denial.spec.actor, own_queue(str(message.queue_name), message.options),
                              denial.limit)
        self._record(store, denial.spec, denial.restored, str(message.message_id), worker_id)
        if records_deferral(count):
            try:
                store.record_event(str(message.message_id), "limit_deferred", worker_id=worker_id,
                                   reason=f"{denial.limit} limit of {denial.spec.actor} reached",
                                   detail={"limit": denial.limit, "key": denial.key, "delay": round(delay, 3),
                                           "deferrals": count})
            except ReliableError:
                logger.warning("job %s: could not record its deferral", message.message_id, exc_info=True)
        return delay

    def publish_again(self, broker: dramatiq.Broker, store: StateStore, message: Any, delay: float) -> int:
        """Publish `message` again in `delay` seconds and note it on its PENDING job (the sweeper
        then waits for it); how many times it was deferred, this one included. The one way a
        delivery is put off without a claim: limits, and a paused queue (reliable.worker.paused)."""
        count = deferrals(message) + 1
        # Back on the queue that delivered it (a routed retry's lane stays its lane); counted
        # under the job's own queue.
        again = message.copy(queue_name=str(message.queue_name).removesuffix(".DQ"),
                             options={DEFERRALS_OPTION: count})
        again.options.pop("eta", None)
        broker.enqueue(again, delay=int(delay * 1000))
        try:
            self.limits(store).mark_deferred(str(message.message_id), delay)
        except ReliableError:  # the sweeper may publish one more copy; the claim keeps it from running twice
            logger.warning("job %s: could not note its deferral", message.message_id, exc_info=True)
        return count

    # -- adaptation ------------------------------------------------------------------------------

    def rate_limited(self, store: StateStore, spec: LimitSpec, queue: str, job_id: str, *, worker_id: str) -> None:
        """A rate-limited failure of the actor: lengthen its streak, maybe lower its concurrency."""
        if spec.concurrency is None or not spec.adaptive:
            return
        settings = settings_for(spec, self._alert_after(spec.actor, queue))
        adaptation = self.limits(store).adapt(spec.actor, lambda state, now: after_rate_limited(state, now, settings))
        self._record(store, spec, adaptation, job_id, worker_id)

    @staticmethod
    def _restore(limits: LimitStore, spec: LimitSpec, state: LimitState | None, now: float) -> Adaptation | None:
        """One step back up when due (checked without a lock first, decided under it); the step
        taken, or None."""
        if state is None or not spec.adaptive:
            return None
        settings = settings_for(spec, 1)
        if not restore_due(state, now, settings):
            return None
        adaptation = limits.adapt(spec.actor, lambda current, at: after_quiet(current, at, settings))
        return adaptation if adaptation is not None and adaptation.change is not None else None

    @staticmethod
    def _record(store: StateStore, spec: LimitSpec, adaptation: Adaptation | None, job_id: str,
                worker_id: str) -> None:
        change = adaptation.change if adaptation is not None else None
        if change is None:
            return
        assert adaptation is not None
        verb = "lowered" if change.kind == "concurrency_reduced" else "raised"
        reason = (f"concurrency of {spec.actor} {verb} from {change.before} to {change.after} "
                  f"(declared {adaptation.state.declared})")
        logger.warning("%s", reason)
        try:
            store.record_event(job_id, change.kind, worker_id=worker_id, reason=reason,
                               detail={"actor": spec.actor, "from": change.before, "to": change.after,
                                       "declared": adaptation.state.declared})
        except ReliableError:
            logger.warning("could not record the event: %s", reason, exc_info=True)

