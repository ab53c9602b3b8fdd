"""The limits' named queries, typed: slots, token buckets and the adaptive state's row.

reliable.limits.storage decides what to take and when; these functions only run the store's SQL
(reliable/store/sql/<dialect>.sql, the `limit_*` queries) and return its rows by name. Some queries
exist on one dialect only: PostgreSQL takes a slot or a token in one statement (`acquire_slot`,
`take_token`), SQLite in a few under its writer lock (`state`, `pick_slot`, `hold_slot`;
`pick_bucket`, `spend_token`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..states import ACTIVE_STATES
from .named_rows import Executor, Query, Statement

__all__ = ["AcquiredSlot", "BoundSlot", "HeldSlot", "LimitRow", "PickedBucket", "PickedSlot", "SlotHolder", "TokenRow",
           "acquire_slot", "bind_slot", "ensure", "ensure_buckets", "ensure_slots", "hold_slot", "holders",
           "lock", "mark_deferred", "pick_bucket", "pick_slot", "release_slot", "spend_token", "state",
           "take_token", "update"]

#: The states in which a slot's holder still holds it (its attempt is live).
_ACTIVE = sorted(s.value for s in ACTIVE_STATES)


@dataclass(frozen=True, slots=True)
class LimitRow:
    """An actor's limit row (declared None: no row) and the statement's time."""

    declared: int | None
    effective: int | None
    streak: int | None
    last_rate_limited_at: float | None
    changed_at: float | None
    now: float


@dataclass(frozen=True, slots=True)
class AcquiredSlot:
    """PostgreSQL's one-statement slot: the slot taken (None: none free) with the lease its claim
    will have, the actor's limit row (declared None: no row) and the statement's time."""

    slot: int | None
    holder_lease: int | None
    declared: int | None
    effective: int | None
    streak: int | None
    last_rate_limited_at: float | None
    changed_at: float | None
    now: float


@dataclass(frozen=True, slots=True)
class PickedSlot:
    """A free slot below the effective limit (SQLite)."""

    slot: int


@dataclass(frozen=True, slots=True)
class HeldSlot:
    """A slot just taken, with the lease id its claim will have (None: the job has no row)."""

    slot: int
    holder_lease: int | None


@dataclass(frozen=True, slots=True)
class BoundSlot:
    """A slot tied to its claim's lease."""

    slot: int


@dataclass(frozen=True, slots=True)
class SlotHolder:
    """A slot held now: its key, number and job."""

    key: str
    slot: int
    holder_job: str


@dataclass(frozen=True, slots=True)
class TokenRow:
    """PostgreSQL's one-statement token: the bucket it came from (None: no token), the most any
    bucket holds (None: the key has no bucket) and the statement's time."""

    bucket: int | None
    best: float | None
    now: float


@dataclass(frozen=True, slots=True)
class PickedBucket:
    """The fullest bucket and what it holds now (SQLite)."""

    bucket: int
    have: float


_ENSURE = Statement("limit_ensure")
_ENSURE_SLOTS = Statement("limit_ensure_slots")
_ENSURE_BUCKETS = Statement("limit_ensure_buckets")
_ACQUIRE_SLOT = Query("limit_acquire_slot", AcquiredSlot)
_STATE = Query("limit_state", LimitRow)
_PICK_SLOT = Query("limit_pick_slot", PickedSlot)
_HOLD_SLOT = Query("limit_hold_slot", HeldSlot)
_BIND_SLOT = Query("limit_bind_slot", BoundSlot)
_RELEASE_SLOT = Statement("limit_release_slot")
_HOLDERS = Query("limit_holders", SlotHolder)
_TAKE_TOKEN = Query("limit_take_token", TokenRow)
_PICK_BUCKET = Query("limit_pick_bucket", PickedBucket)
_SPEND_TOKEN = Statement("limit_spend_token")
_LOCK = Query("limit_lock", LimitRow)
_UPDATE = Statement("limit_update")
_MARK_DEFERRED = Statement("limit_mark_deferred")


def ensure(executor: Executor, name: str, declared: int) -> None:
    """Create the actor's limit row, or write its new declared concurrency (0: a rate limit only)."""
    _ENSURE.run(executor, {"name": name, "declared": declared})


def ensure_slots(executor: Executor, name: str, key: str, count: int) -> None:
    """Create the key's `count` slot rows that are missing."""
    _ENSURE_SLOTS.run(executor, {"name": name, "key": key, "count": count})


def ensure_buckets(executor: Executor, name: str, key: str, count: int, capacity: float) -> None:
    """Create the key's `count` token buckets that are missing, full."""
    _ENSURE_BUCKETS.run(executor, {"name": name, "key": key, "count": count, "capacity": capacity})


def acquire_slot(executor: Executor, name: str, key: str, job_id: str, ttl: float) -> AcquiredSlot:
    """PostgreSQL: take a free slot for `job_id` (held `ttl` seconds until its claim) and read the
    actor's limit row, in one statement."""
    row = _ACQUIRE_SLOT.one(executor, {"name": name, "key": key, "job_id": job_id, "ttl": ttl, "active": _ACTIVE})
    assert row is not None  # the statement always returns its one row
    return row


def state(executor: Executor, name: str) -> LimitRow | None:
    """SQLite: the actor's limit row, unlocked (None: no row)."""
    return _STATE.one(executor, {"name": name})


def pick_slot(executor: Executor, name: str, key: str, effective: int) -> PickedSlot | None:
    """SQLite: the first free slot below `effective` (None: all held)."""
    return _PICK_SLOT.one(executor, {"name": name, "key": key, "effective": effective, "active": _ACTIVE})


def hold_slot(executor: Executor, name: str, key: str, slot: int, job_id: str, ttl: float) -> HeldSlot | None:
    """SQLite: hold `slot` for `job_id`'s next claim, `ttl` seconds at most before it."""
    return _HOLD_SLOT.one(executor, {"name": name, "key": key, "slot": slot, "job_id": job_id, "ttl": ttl})


def bind_slot(executor: Executor, name: str, key: str, slot: int, job_id: str, lease_id: int) -> bool:
    """Tie the slot `job_id` holds to `lease_id`; False when `job_id` no longer holds it."""
    params = {"name": name, "key": key, "slot": slot, "job_id": job_id, "lease_id": lease_id}
    return _BIND_SLOT.one(executor, params) is not None


def release_slot(executor: Executor, name: str, key: str, slot: int, job_id: str) -> None:
    """Free the slot if `job_id` still holds it."""
    _RELEASE_SLOT.run(executor, {"name": name, "key": key, "slot": slot, "job_id": job_id})


def holders(executor: Executor, name: str) -> list[SlotHolder]:
    """Every slot of the actor held now, by key and slot."""
    return _HOLDERS.all(executor, {"name": name, "active": _ACTIVE})


def take_token(executor: Executor, name: str, key: str, *, shards: int, capacity: float, refill: float,
               start: int) -> TokenRow:
    """PostgreSQL: take a token from one of the key's `shards` buckets (from `start` on), in one statement."""
    row = _TAKE_TOKEN.one(executor, {"name": name, "key": key, "shards": shards, "capacity": capacity,
                                     "refill": refill, "start": start})
    assert row is not None  # the statement always returns its one row
    return row


def pick_bucket(executor: Executor, name: str, key: str, *, shards: int, capacity: float, refill: float,
                start: int) -> PickedBucket | None:
    """SQLite: the fullest of the key's buckets (None: the key has none)."""
    return _PICK_BUCKET.one(executor, {"name": name, "key": key, "shards": shards, "capacity": capacity,
                                       "refill": refill, "start": start})


def spend_token(executor: Executor, name: str, key: str, bucket: int, have: float) -> None:
    """SQLite: take one token from `bucket`, which holds `have` now."""
    _SPEND_TOKEN.run(executor, {"name": name, "key": key, "bucket": bucket, "have": have})


def lock(executor: Executor, name: str) -> LimitRow | None:
    """The actor's limit row, locked for the rest of the transaction on PostgreSQL (None: no row)."""
    return _LOCK.one(executor, {"name": name})


def update(executor: Executor, name: str, *, effective: int, streak: int, last_rate_limited_at: float | None,
           changed_at: float | None) -> None:
    """Write the actor's adaptive state."""
    _UPDATE.run(executor, {"name": name, "effective": effective, "streak": streak,
                           "last_rate_limited_at": last_rate_limited_at, "changed_at": changed_at})


def mark_deferred(executor: Executor, job_id: str, delay: float) -> None:
    """The PENDING job's delivery comes back in `delay` seconds: its dispatched_at moves to then."""
    _MARK_DEFERRED.run(executor, {"job_id": job_id, "delay": delay})
