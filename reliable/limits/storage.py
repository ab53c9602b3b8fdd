"""Limits in the state store: slots and token buckets taken in one statement, the adaptive state
changed under its row's lock. Decisions are reliable.limits.adaptive's; this module reads and writes.

Every time is the database's clock (or the store's injected one). Rows are created on first use
and re-asserted every ENSURE_EVERY seconds by each process (`ensure`): rows deleted by hand come
back, and the declared concurrency of the code a process runs is written again (a rolling deploy).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store import StateStore, limit_queries
from ..store.limit_queries import AcquiredSlot, LimitRow
from .adaptive import Adaptation, AdaptiveSettings, LimitState
from .model import LimitSpec

__all__ = ["LimitStore", "SlotTaken", "TokenTaken", "settings_for"]

#: (actor, key) pairs whose rows this process has ensured; more are ensured on every use.
_ENSURED_MAX = 10_000
#: How often (seconds) a process ensures the rows of an (actor, key) it uses again.
ENSURE_EVERY = 60.0


@dataclass(frozen=True)
class SlotTaken:
    """The outcome of asking for a slot: `slot` (None: none free), the actor's stored state, the time."""

    slot: int | None
    lease_id: int | None
    state: LimitState | None
    now: float


@dataclass(frozen=True)
class TokenTaken:
    """The outcome of asking for a token: taken or not, and how long until the next one (seconds)."""

    taken: bool
    wait: float
    now: float


def _state(row: LimitRow | AcquiredSlot | None) -> LimitState | None:
    if row is None or row.declared is None:
        return None
    limited, changed = row.last_rate_limited_at, row.changed_at
    return LimitState(declared=int(row.declared), effective=int(row.effective or 0), streak=int(row.streak or 0),
                      last_rate_limited_at=None if limited is None else float(limited),
                      changed_at=None if changed is None else float(changed))


class LimitStore:
    """The limits' rows in one StateStore (SQLite or PostgreSQL)."""

    def __init__(self, store: StateStore, *, rand: Callable[[], float] = random.random,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self._postgres = store.dialect == "postgresql"
        self._rand = rand
        self._monotonic = monotonic
        self._ensured: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def _start(self, count: int) -> int:
        return int(self._rand() * count) % max(1, count)

    # -- rows ------------------------------------------------------------------------------------

    def ensure(self, spec: LimitSpec, key: str) -> None:
        """Create the actor's limit row and the key's slots and buckets if missing, and write the
        declared concurrency; once per ENSURE_EVERY seconds per process."""
        done = self._ensured.get((spec.actor, key))
        if done is not None and self._monotonic() - done < ENSURE_EVERY:
            return
        with self.store.transaction() as unit:
            limit_queries.ensure(unit, spec.actor, spec.concurrency or 0)
            if spec.concurrency:
                limit_queries.ensure_slots(unit, spec.actor, key, spec.concurrency)
            if spec.rate_count:
                limit_queries.ensure_buckets(unit, spec.actor, key, spec.shards, spec.bucket_capacity)
        with self._lock:
            if len(self._ensured) < _ENSURED_MAX or (spec.actor, key) in self._ensured:
                self._ensured[(spec.actor, key)] = self._monotonic()

    def forget(self, actor: str, key: str) -> None:
        """Ensure the rows of (actor, key) again at next use (they were found missing)."""
        with self._lock:
            self._ensured.pop((actor, key), None)

    # -- concurrency -----------------------------------------------------------------------------

    def acquire(self, spec: LimitSpec, key: str, job_id: str, *, ttl: float) -> SlotTaken:
        """Take a free slot below the actor's effective concurrency for `job_id`'s next attempt.

        The slot is held until the job's next claim (lease id + 1) or for `ttl` seconds, then for
        as long as that attempt's lease is live: it frees itself when the attempt ends. `release`
        frees a slot whose claim did not happen.
        """
        assert spec.concurrency is not None
        self.ensure(spec, key)
        if self._postgres:
            row = limit_queries.acquire_slot(self.store, spec.actor, key, job_id, ttl)
            slot, lease = row.slot, row.holder_lease
            return SlotTaken(None if slot is None else int(slot), None if lease is None else int(lease),
                             _state(row), float(row.now))
        with self.store.transaction() as unit:
            state = _state(limit_queries.state(unit, spec.actor))
            now = unit.now()  # SQLite: the transaction's time, read at its BEGIN (no statement)
            if state is None:
                return SlotTaken(None, None, None, now)
            picked = limit_queries.pick_slot(unit, spec.actor, key, state.effective)
            if picked is None:
                return SlotTaken(None, None, state, now)
            held = limit_queries.hold_slot(unit, spec.actor, key, picked.slot, job_id, ttl)
            assert held is not None  # the slot was picked under this transaction's write lock
            return SlotTaken(int(held.slot), None if held.holder_lease is None else int(held.holder_lease), state, now)

    def bind(self, spec: LimitSpec, key: str, slot: int, job_id: str, lease_id: int) -> bool:
        """Tie a taken slot to the lease the claim gave (when it is not the one the slot expected);
        False when `job_id` no longer holds it (it was free meanwhile and another job took it)."""
        return limit_queries.bind_slot(self.store, spec.actor, key, slot, job_id, lease_id)

    def release(self, spec: LimitSpec, key: str, slot: int, job_id: str) -> None:
        """Free the slot `job_id` holds (a no-op if it was taken over meanwhile)."""
        limit_queries.release_slot(self.store, spec.actor, key, slot, job_id)

    def holders(self, actor: str) -> list[tuple[str, int, str]]:
        """(key, slot, job id) of every slot of `actor` held now, by the store's clock."""
        return [(str(h.key), int(h.slot), str(h.holder_job)) for h in limit_queries.holders(self.store, actor)]

    # -- rate ------------------------------------------------------------------------------------

    def take_token(self, spec: LimitSpec, key: str) -> TokenTaken:
        """Take one token from one of the key's buckets; when none has one, the wait for the next.
        Buckets found missing (deleted by hand) are created again at once."""
        assert spec.rate_count is not None
        self.ensure(spec, key)
        taken = self._take_token(spec, key)
        if taken is None:
            self.forget(spec.actor, key)
            self.ensure(spec, key)
            taken = self._take_token(spec, key)
        return taken if taken is not None else TokenTaken(False, 0.0, self.store.now())

    def _take_token(self, spec: LimitSpec, key: str) -> TokenTaken | None:
        """A token taken or refused; None when the key has no bucket row."""
        start = self._start(spec.shards)
        if self._postgres:
            row = limit_queries.take_token(self.store, spec.actor, key, shards=spec.shards,
                                           capacity=spec.bucket_capacity, refill=spec.bucket_refill, start=start)
            if row.bucket is None and row.best is None:
                return None
            return TokenTaken(row.bucket is not None, self._wait(spec, row.best), float(row.now))
        with self.store.transaction() as unit:
            now = unit.now()  # SQLite: the transaction's time, read at its BEGIN (no statement)
            picked = limit_queries.pick_bucket(unit, spec.actor, key, shards=spec.shards,
                                               capacity=spec.bucket_capacity, refill=spec.bucket_refill,
                                               start=start)
            if picked is None:
                return None
            if picked.have < 1:
                return TokenTaken(False, self._wait(spec, picked.have), now)
            limit_queries.spend_token(unit, spec.actor, key, picked.bucket, picked.have)
            return TokenTaken(True, 0.0, now)

    @staticmethod
    def _wait(spec: LimitSpec, best: float | None) -> float:
        if best is None or best >= 1:
            return 0.0  # the buckets with a token were busy (locked): try again soon
        return (1.0 - float(best)) / spec.bucket_refill

    # -- adaptive --------------------------------------------------------------------------------

    def adapt(self, actor: str, decide: Callable[[LimitState, float], Adaptation]) -> Adaptation | None:
        """Apply `decide` to the actor's state under its row's lock; None when it has no row."""
        with self.store.transaction() as unit:
            row = limit_queries.lock(unit, actor)
            state = _state(row)
            if row is None or state is None or state.declared < 1:
                return None
            adaptation = decide(state, float(row.now))
            if adaptation.state != state:
                new = adaptation.state
                limit_queries.update(unit, actor, effective=new.effective, streak=new.streak,
                                     last_rate_limited_at=new.last_rate_limited_at, changed_at=new.changed_at)
            return adaptation

    def mark_deferred(self, job_id: str, delay: float) -> None:
        """A deferred delivery of the PENDING job `job_id` is published again in `delay` seconds:
        dispatched_at moves to then, so the sweeper counts `sweep_after` from its arrival and does
        not publish another copy meanwhile."""
        limit_queries.mark_deferred(self.store, job_id, delay)

    def state(self, actor: str) -> LimitState | None:
        """The actor's stored concurrency state (None: no concurrency limit stored)."""
        with self.store.transaction() as unit:
            return _state(limit_queries.lock(unit, actor))


def settings_for(spec: LimitSpec, streak_to_reduce: int) -> AdaptiveSettings:
    """The adaptive settings of an actor: its limits, and the policy's `rate_limit.alert_after`."""
    return AdaptiveSettings(streak_to_reduce=max(1, streak_to_reduce), quiet=spec.quiet, step=spec.step)
