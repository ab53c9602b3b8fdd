"""Slots, token buckets and the adaptive state in the store: the same suite on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from reliable.limits import Limits, limit_spec
from reliable.limits.adaptive import after_quiet, after_rate_limited
from reliable.limits.gate import Admission, LimitGate
from reliable.limits.storage import ENSURE_EVERY, LimitStore, settings_for
from reliable.states import Event
from reliable.store import NewJob, StateStore

from support import Clock

TTL = 30.0


def _jobs(store: StateStore, *ids: str) -> None:
    store.register_many([NewJob(job_id, queue="q", actor="call_api", message={"args": []}) for job_id in ids])


def _limits(store: StateStore) -> LimitStore:
    return LimitStore(store, rand=lambda: 0.0)


def test_a_concurrency_limit_of_two_admits_two_holders(clocked: tuple[StateStore, Clock]) -> None:
    store, _clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=2))
    assert spec is not None
    _jobs(store, "a", "b", "c")
    limits = _limits(store)
    first, second = limits.acquire(spec, "", "a", ttl=TTL), limits.acquire(spec, "", "b", ttl=TTL)
    assert {first.slot, second.slot} == {0, 1}
    assert first.lease_id == 1  # the lease id the job's next claim gets
    assert first.state is not None and (first.state.declared, first.state.effective) == (2, 2)
    assert limits.acquire(spec, "", "c", ttl=TTL).slot is None
    assert sorted(j for _, _, j in limits.holders("call_api")) == ["a", "b"]
    assert first.slot is not None
    limits.release(spec, "", first.slot, "a")
    assert limits.acquire(spec, "", "c", ttl=TTL).slot == first.slot


def test_slots_are_per_key(clocked: tuple[StateStore, Clock]) -> None:
    store, _clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1, key="account"), lambda account: None)
    assert spec is not None and spec.key_of(("acme",), {}) == "acme" and spec.key_of((), {"account": "x"}) == "x"
    _jobs(store, "a", "b", "c")
    limits = _limits(store)
    assert limits.acquire(spec, "acme", "a", ttl=TTL).slot == 0
    assert limits.acquire(spec, "acme", "b", ttl=TTL).slot is None
    assert limits.acquire(spec, "globex", "c", ttl=TTL).slot == 0


def test_a_slot_taken_but_never_claimed_frees_itself_after_its_ttl(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1))
    assert spec is not None
    _jobs(store, "a", "b")
    limits = _limits(store)
    assert limits.acquire(spec, "", "a", ttl=TTL).slot == 0
    clock.now += TTL - 1
    assert limits.acquire(spec, "", "b", ttl=TTL).slot is None
    clock.now += 2
    assert limits.acquire(spec, "", "b", ttl=TTL).slot == 0


def test_a_claimed_slot_lives_with_the_lease_and_dies_with_it(clocked: tuple[StateStore, Clock]) -> None:
    """The slot of a worker killed mid-attempt frees itself when the attempt's lease expires
    (database clock); a heartbeat-renewed lease keeps it held past the slot's own ttl."""
    store, clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1))
    assert spec is not None
    _jobs(store, "a", "b")
    limits = _limits(store)
    taken = limits.acquire(spec, "", "a", ttl=5)
    claim = store.claim("a", worker_id="w1", lease_ttl=TTL)
    assert claim.lease_id == taken.lease_id
    clock.now += 20  # past the slot's ttl, within the lease
    assert limits.acquire(spec, "", "b", ttl=5).slot is None
    clock.now += TTL + 1  # the worker died: nobody renews
    assert limits.acquire(spec, "", "b", ttl=5).slot == 0


def test_a_finished_attempt_frees_its_slot_without_a_release(clocked: tuple[StateStore, Clock]) -> None:
    store, _clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1))
    assert spec is not None
    _jobs(store, "a", "b")
    limits = _limits(store)
    limits.acquire(spec, "", "a", ttl=5)
    claim = store.claim("a", worker_id="w1", lease_ttl=TTL)
    assert limits.acquire(spec, "", "b", ttl=5).slot is None
    store.finish("a", claim.lease_id, Event.SUCCEED, worker_id="w1")
    assert limits.acquire(spec, "", "b", ttl=5).slot == 0  # at once: the attempt ended


def test_a_slot_bound_to_the_lease_the_claim_gave_stays_held(clocked: tuple[StateStore, Clock]) -> None:
    """The slot expects the lease of the job's next claim; when another claim came between (here
    a first attempt that ended in a retry), `bind` ties it to the claim that won."""
    store, clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1))
    assert spec is not None
    _jobs(store, "a", "b")
    limits = _limits(store)
    taken = limits.acquire(spec, "", "a", ttl=5)
    first = store.claim("a", worker_id="w0", lease_ttl=TTL)
    store.finish("a", first.lease_id, Event.RETRY, worker_id="w0", retry_delay=0.0)
    claim = store.claim("a", worker_id="w1", lease_ttl=TTL)
    assert taken.slot is not None and claim.lease_id == (taken.lease_id or 0) + 1
    clock.now += 10  # past the slot's ttl: held only if tied to the live lease
    assert limits.acquire(spec, "", "b", ttl=5).slot == 0  # unbound: free
    limits.release(spec, "", 0, "b")
    assert limits.acquire(spec, "", "a", ttl=5).slot == 0
    limits.bind(spec, "", 0, "a", claim.lease_id)
    clock.now += 10
    assert limits.acquire(spec, "", "b", ttl=5).slot is None


def test_a_rate_limit_spends_tokens_across_its_buckets_then_says_how_long_to_wait(
        clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    spec = limit_spec("call_api", Limits(rate="4/10s", shards=2))
    assert spec is not None and spec.bucket_capacity == 2 and spec.bucket_refill == pytest.approx(0.2)
    limits = _limits(store)
    assert all(limits.take_token(spec, "").taken for _ in range(4))
    denied = limits.take_token(spec, "")
    assert not denied.taken and denied.wait == pytest.approx(5.0)
    clock.now += 5  # each bucket gained one token
    assert limits.take_token(spec, "").taken and limits.take_token(spec, "").taken
    assert not limits.take_token(spec, "").taken
    clock.now += 100  # refilled, but never past each bucket's share of the burst
    assert sum(limits.take_token(spec, "").taken for _ in range(6)) == 4


def test_a_lowered_effective_limit_bounds_the_slots_taken(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=4, quiet=10, step=1))
    assert spec is not None
    _jobs(store, *"abcdef")
    limits = _limits(store)
    limits.ensure(spec, "")
    settings = settings_for(spec, 2)
    for _ in range(2):
        adapted = limits.adapt("call_api", lambda s, now: after_rate_limited(s, now, settings))
    assert adapted is not None and adapted.change is not None and adapted.change.after == 2
    state = limits.state("call_api")
    assert state is not None and (state.declared, state.effective, state.streak) == (4, 2, 0)
    assert [limits.acquire(spec, "", j, ttl=TTL).slot for j in "abc"] == [0, 1, None]
    clock.now += 10
    restored = limits.adapt("call_api", lambda s, now: after_quiet(s, now, settings))
    assert restored is not None and restored.change is not None and restored.change.after == 3
    assert limits.acquire(spec, "", "c", ttl=TTL).slot == 2


def test_a_new_declaration_keeps_a_reduction_within_it(clocked: tuple[StateStore, Clock]) -> None:
    store, _clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=8))
    assert spec is not None
    limits = _limits(store)
    limits.ensure(spec, "")
    settings = settings_for(spec, 1)
    limits.adapt("call_api", lambda s, now: after_rate_limited(s, now, settings))  # 8 -> 4
    smaller = limit_spec("call_api", Limits(concurrency=2))
    assert smaller is not None
    _limits(store).ensure(smaller, "")
    state = limits.state("call_api")
    assert state is not None and (state.declared, state.effective) == (2, 2)


def test_rows_deleted_under_a_running_process_are_made_again(clocked: tuple[StateStore, Clock]) -> None:
    store, _clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1))
    assert spec is not None
    _jobs(store, "a")
    limits = _limits(store)
    limits.ensure(spec, "")
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM reliable_limit_slots"))
        conn.execute(text("DELETE FROM reliable_limits"))
    assert limits.acquire(spec, "", "a", ttl=TTL).state is None
    limits.forget("call_api", "")
    assert limits.acquire(spec, "", "a", ttl=TTL).slot == 0


def test_a_slot_lost_before_its_bind_is_reported_and_another_taken_if_free(
        clocked: tuple[StateStore, Clock]) -> None:
    """A duplicate's claim and retry came between the slot and this delivery's claim: the slot was
    free (its expected lease ended) and job b took it. `bind` says so; the gate takes another slot
    if one is free, else refuses (the middleware then defers the delivery, it never runs unslotted)."""
    store, _clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1))
    assert spec is not None
    _jobs(store, "a", "b")
    limits = _limits(store)
    taken = limits.acquire(spec, "", "a", ttl=TTL)
    dup = store.claim("a", worker_id="w0", lease_ttl=TTL)
    store.finish("a", dup.lease_id, Event.RETRY, worker_id="w0", retry_delay=0.0)
    claim = store.claim("a", worker_id="w1", lease_ttl=TTL)
    assert taken.slot == 0 and claim.lease_id != taken.lease_id
    other = limits.acquire(spec, "", "b", ttl=TTL)
    assert other.slot == 0
    assert limits.bind(spec, "", 0, "a", claim.lease_id) is False
    gate = LimitGate(alert_after=lambda _actor, _queue: 1, rand=lambda: 0.0)
    admission = Admission(spec, "", "a", taken.slot, taken.lease_id)
    assert gate.bind(store, admission, claim.lease_id, lease_ttl=TTL, worker_id="w1") is False
    assert limits.holders("call_api") == [("", 0, "b")]
    limits.release(spec, "", 0, "b")  # b's claim did not happen: the slot is free again
    assert gate.bind(store, admission, claim.lease_id, lease_ttl=TTL, worker_id="w1") is True
    assert limits.holders("call_api") == [("", 0, "a")]


def test_buckets_deleted_by_hand_are_made_again_at_once(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    spec = limit_spec("call_api", Limits(rate="10/s"))
    assert spec is not None
    limits = _limits(store)
    assert limits.take_token(spec, "").taken
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM reliable_limit_buckets WHERE name = 'call_api'"))
        conn.execute(text("DELETE FROM reliable_limits WHERE name = 'call_api'"))
    clock.now += 1
    assert limits.take_token(spec, "").taken


def test_each_process_asserts_its_declaration_and_rows_again_periodically(
        clocked: tuple[StateStore, Clock]) -> None:
    """A rolling deploy: an old process wrote concurrency 2 after a new one wrote 4; the new one
    writes 4 again within ENSURE_EVERY, and recreates slot rows deleted meanwhile."""
    store, _clock = clocked
    ticks = [0.0]
    new = LimitStore(store, rand=lambda: 0.0, monotonic=lambda: ticks[0])
    four, two = limit_spec("call_api", Limits(concurrency=4)), limit_spec("call_api", Limits(concurrency=2))
    assert four is not None and two is not None
    _jobs(store, "a")
    new.ensure(four, "")
    _limits(store).ensure(two, "")  # the old code's process
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM reliable_limit_slots WHERE name = 'call_api'"))
    assert new.acquire(four, "", "a", ttl=TTL).slot is None  # ensured recently: not yet
    ticks[0] += ENSURE_EVERY
    assert new.acquire(four, "", "a", ttl=TTL).slot == 0
    state = new.state("call_api")
    assert state is not None and (state.declared, state.effective) == (4, 4)


def test_a_rate_is_n_per_period_after_a_burst_of_n(clocked: tuple[StateStore, Clock]) -> None:
    """What docs/limits.md promises: the buckets start full (a burst of N at once), then one token
    every period/N: at most 2N starts in the first period, and N in each later one under steady load."""
    store, clock = clocked
    spec = limit_spec("call_api", Limits(rate="10/1m", shards=1))
    assert spec is not None
    limits = _limits(store)
    per_minute = []
    for _minute in range(3):
        started = 0
        for _second in range(60):  # one start attempt every second, 20 at a time
            started += sum(limits.take_token(spec, "").taken for _ in range(20))
            clock.now += 1
        per_minute.append(started)
    assert per_minute[0] <= 20 and per_minute[0] >= 10
    assert per_minute[1:] == [10, 10]
