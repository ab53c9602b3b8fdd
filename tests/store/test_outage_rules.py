"""Leases survive the store's own outage (docs/concepts.md, "Leases and store outages").

The outage is real: the test database stops accepting connections (ALLOW_CONNECTIONS false, its
backends terminated), so every store call fails as it would with the server down, while the other
tests' databases keep working. Time is an injected clock, so nothing here sleeps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, make_url, text

from reliable.errors import LeaseLost, StoreUnavailable
from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore

from support import PG_ADMIN_URL, Clock

TTL = 10.0



@contextlib.contextmanager
def database_outage(url: str) -> Iterator[None]:
    """The database refuses every connection (existing ones are cut) until the block exits."""
    name = make_url(url).database
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                         {"n": name})
        yield
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()


@pytest.fixture
def pg_clocked(pg_store: StateStore) -> Iterator[tuple[StateStore, Clock]]:
    clock = Clock()
    store = StateStore(pg_store.engine.url.render_as_string(hide_password=False), clock=clock)
    yield store, clock
    store.close()


def running(store: StateStore, job_id: str, *, idempotent: bool = True) -> int:
    store.register(NewJob(job_id, queue="q", actor="a",
                          message={"options": {"reliable_contract": {"idempotent": idempotent}}}))
    return store.claim(job_id, worker_id="w", lease_ttl=TTL).lease_id


def test_recovery_expires_no_lease_until_the_store_answered_for_a_ttl(pg_clocked: tuple[StateStore, Clock]) -> None:
    store, clock = pg_clocked
    recovery = Recovery(store, None, Policy.load(None), lease_ttl=TTL)
    lease = running(store, "job")
    assert recovery.run_once().expired == {}
    clock.now += 3 * TTL  # the outage outlasts the lease: no heartbeat could land
    with database_outage(store.engine.url.render_as_string(hide_password=False)), pytest.raises(StoreUnavailable):
        recovery.run_once()
    back = recovery.run_once()
    assert back.expiry_held and back.expired == {}, "expired a lease nobody could renew"
    assert store.get("job").status is JobStatus.RUNNING
    clock.now += TTL / 2
    store.renew("w", [("job", lease)], TTL)  # the worker's heartbeat lands after the outage
    clock.now += TTL / 2 + 0.1
    assert recovery.run_once().expired == {}, "the renewed lease is still valid"
    clock.now += TTL
    assert recovery.run_once().expired == {"job": Event.LEASE_EXPIRED.value}, "a dead worker is recovered"


def test_a_worker_commits_after_an_expiry_nobody_followed(pg_clocked: tuple[StateStore, Clock]) -> None:
    store, clock = pg_clocked
    recovery = Recovery(store, None, Policy.load(None), lease_ttl=TTL)
    recovery.run_once()
    lease = running(store, "job")
    other = running(store, "claimed-again")
    review = running(store, "not-idempotent", idempotent=False)
    clock.now += 2 * TTL
    report = recovery.run_once()  # this loop saw no outage: it expires the three leases
    assert set(report.expired) == {"job", "claimed-again", "not-idempotent"}
    assert store.get("not-idempotent").status is JobStatus.REVIEW
    store.claim("claimed-again", worker_id="w2", lease_ttl=TTL)  # the re-published message was claimed
    done = store.finish("job", lease, Event.SUCCEED, worker_id="w")
    assert done.status is JobStatus.SUCCEEDED
    assert store.events("job")[-1].detail["late_completion"] is True
    reviewed = store.finish("not-idempotent", review, Event.SUCCEED, worker_id="w")
    assert reviewed.status is JobStatus.SUCCEEDED, "the body ran once and succeeded: no person needed"
    with pytest.raises(LeaseLost):
        store.finish("claimed-again", other, Event.SUCCEED, worker_id="w")
    assert store.get("claimed-again").status is JobStatus.RUNNING, "the new holder keeps the job"


def test_no_late_completion_once_an_operator_moved_the_job(pg_clocked: tuple[StateStore, Clock]) -> None:
    store, clock = pg_clocked
    recovery = Recovery(store, None, Policy.load(None), lease_ttl=TTL)
    recovery.run_once()
    lease = running(store, "job", idempotent=False)
    clock.now += 2 * TTL
    recovery.run_once()
    store.transition("job", Event.RESTART, operator="alice", reason="rerun it")
    with pytest.raises(LeaseLost):
        store.finish("job", lease, Event.SUCCEED, worker_id="w")
    assert store.get("job").status is JobStatus.PENDING


def test_a_late_retry_never_undoes_a_pause_recovery_honoured(pg_clocked: tuple[StateStore, Clock]) -> None:
    store, clock = pg_clocked
    recovery = Recovery(store, None, Policy.load(None), lease_ttl=TTL)
    recovery.run_once()
    lease = running(store, "job")
    store.transition("job", Event.PAUSE_REQUEST, operator="alice", reason="maintenance")
    clock.now += 2 * TTL
    assert recovery.run_once().expired == {"job": Event.PAUSE_OBSERVED.value}
    with pytest.raises(LeaseLost):
        store.finish("job", lease, Event.RETRY, worker_id="w", retry_delay=1.0)
    assert store.get("job").status is JobStatus.PAUSED
    done = store.finish("job", lease, Event.SUCCEED, worker_id="w")
    assert done.status is JobStatus.SUCCEEDED, "the work did finish: a late success still counts"


def test_a_retry_after_a_lost_reply_finds_its_own_committed_write(pg_clocked: tuple[StateStore, Clock]) -> None:
    """The store committed, the reply was lost, the caller retried: the retry is not a stale commit."""
    store, _ = pg_clocked
    store.register(NewJob("job", queue="q", actor="a", message={}))
    first = store.claim("job", worker_id="w", lease_ttl=TTL, attempt_id="attempt-1")
    again = store.claim("job", worker_id="w", lease_ttl=TTL, attempt_id="attempt-1")
    assert again.lease_id == first.lease_id and again.attempt_id == "attempt-1"
    done = store.finish("job", first.lease_id, Event.SUCCEED, worker_id="w")
    retried = store.finish("job", first.lease_id, Event.SUCCEED, worker_id="w")
    assert retried.status is JobStatus.SUCCEEDED and retried.version == done.version
    events = [e.event for e in store.events("job")]
    assert events == ["enqueued", "claim", "succeed"], "no second claim, no stale commit recorded"
    with pytest.raises(LeaseLost):  # a different outcome from the same lease is still refused
        store.finish("job", first.lease_id, Event.FAIL, worker_id="w")


def test_a_recovery_loop_that_never_saw_the_outage_still_holds_expiry(store_url: str) -> None:
    """`reliable recover --once` from cron, or a worker started after the outage: the store remembers."""
    clock = Clock()
    store = StateStore(store_url, clock=clock)
    try:
        lease = running(store, "job")
        store.renew("w", [("job", lease)], TTL)  # heartbeats reach the store...
        clock.now += 3 * TTL  # ...then nobody can reach it for three TTLs
        store.renew("w", [("job", lease)], TTL)  # the first beat after it: the outage ended now
        ended = store.outage_ended_at()
        assert ended == clock.now
        running(store, "orphan")  # a job whose worker died during the outage
        clock.now += TTL + 1  # its lease is past, but the store answered for a TTL only just now
        clock.now -= 2
        fresh = Recovery(store, None, Policy.load(None), lease_ttl=TTL)  # remembers nothing itself
        assert fresh.run_once().expiry_held
        clock.now += 2
        assert "orphan" in fresh.run_once().expired
    finally:
        store.close()
