"""A job's attempts are read from its events (reliable.store.job_history, migration 0018): every
way an attempt starts and ends, on both databases, and the downgrade that rebuilds the old table
from the same events."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore, migrate, retention
from reliable.store.records import Attempt

from support import Clock

BOOM = ErrorInfo("transient", "ConnectionError", "reset by peer")


def _story(store: StateStore, clock: Clock) -> list[str]:
    """Three attempts: a retried failure, one recovery found expired, a success; a fast-path job."""
    store.register(NewJob("job", queue="default", actor="export", message={"args": [1]}))
    first = store.claim("job", worker_id="w1", lease_ttl=30, attempt_id="a1")
    store.save_checkpoint("job", first.lease_id, {"page": 1}, lease_ttl=30, worker_id="w1")
    store.save_checkpoint("job", first.lease_id, {"page": 2}, lease_ttl=30, worker_id="w1")
    store.record_event("job", "claim_refused", worker_id="w2", reason="held")  # changes no state
    store.finish("job", first.lease_id, Event.RETRY, worker_id="w1", error=BOOM, retry_delay=5)
    clock.now += 10
    second = store.claim("job", worker_id="w2", lease_ttl=30, attempt_id="a2")
    clock.now += 60
    store.transition("job", Event.LEASE_EXPIRED, lease_id=second.lease_id, lease_expired=True)
    third = store.claim("job", worker_id="w3", lease_ttl=30, attempt_id="a3")
    store.save_checkpoint("job", third.lease_id, {"page": 3}, lease_ttl=30, worker_id="w3")
    store.finish("job", third.lease_id, Event.SUCCEED, worker_id="w3")
    store.register(NewJob("fast", queue="default", actor="export", message={"args": [2]}))
    store.fast_succeed("fast", worker_id="w1", attempt_id="f1")
    return ["a1", "a2", "a3"]


def test_attempts_start_at_the_claim_and_end_at_the_first_event_leaving_the_active_states(
        clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    start = clock.now
    _story(store, clock)
    first, second, third = store.attempts("job")
    assert first == Attempt("a1", "job", 1, 1, "w1", start, start, "retry_scheduled", "transient",
                            "ConnectionError", "reset by peer", 0)
    assert second == Attempt("a2", "job", 2, 2, "w2", start + 10, start + 70, "lease_expired", None, None, None, 2)
    assert third == Attempt("a3", "job", 3, 3, "w3", start + 70, start + 70, "succeed", None, None, None, 2)
    assert store.attempts("fast") == []  # a fast-path commit never had an attempt row


def test_a_running_attempt_has_no_end_yet(clocked: tuple[StateStore, Clock]) -> None:
    store, _ = clocked
    store.register(NewJob("job", queue="default", actor="export", message={}))
    claim = store.claim("job", worker_id="w1", lease_ttl=30, attempt_id="a1")
    [attempt] = store.attempts("job")
    assert (attempt.attempt_id, attempt.lease_id, attempt.ended_at, attempt.outcome) == ("a1", claim.lease_id,
                                                                                          None, None)


def test_prune_counts_the_attempts_of_the_events_it_deletes(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    _story(store, clock)
    clock.now += 86400
    counted = retention.count_prunable(store, clock.now)
    assert (counted.jobs, counted.attempts) == (2, 3)



def test_the_downgrade_rebuilds_the_attempt_rows_from_the_events(fresh_url: str) -> None:
    clock = Clock()
    store = StateStore(fresh_url, clock=clock)
    store.upgrade()
    _story(store, clock)
    derived = store.attempts("job")
    store.close()
    engine = create_engine(fresh_url)
    config = migrate._config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0017")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT * FROM reliable_attempts ORDER BY job_id, attempt")).mappings().all()
        indexes = {ix["name"] for ix in inspect(conn).get_indexes("reliable_jobs")}
    engine.dispose()
    assert [Attempt(**row) for row in rows] == derived
    assert "ix_reliable_jobs_status_started_queue" in indexes
