"""The store's contract: every transition of the table, on both databases, checked column by column.

Each (state, event) pair is run through the one write definition (`reliable.store.writes`) and
the dialect's `write_job` query, on a job put into that state through the store's own API, with
an injected clock so every time is exact. The expectations below are written from the rules in
docs/concepts.md, independently of writes.py: a rule changed in one place and not the other fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from reliable.errors import LeaseLost
from reliable.states import ACTIVE_STATES, TRANSITIONS, Event, JobStatus
from reliable.store import ErrorInfo, Job, NewJob, StateStore
from reliable.store.sqlrunner import SqlRunner
from reliable.store.writes import transition_write

from support import Clock

S, E = JobStatus, Event
TTL = 30.0
DELAY = 7.5
AT_REST = {S.PAUSED, S.STOPPED, S.REVIEW, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.DEAD}
CRASH = {E.LEASE_EXPIRED, E.LEASE_EXPIRED_BACKOFF, E.LEASE_EXPIRED_REVIEW, E.LEASE_EXPIRED_DEAD,
         E.FORCE_STOP, E.FORCE_CANCEL}
WORKER = {E.SUCCEED, E.RETRY, E.FAIL, E.NEED_REVIEW, E.DEAD_LETTER, E.HALT, E.PAUSE_OBSERVED,
          E.STOP_OBSERVED, E.CANCEL_OBSERVED}




def put_in(store: StateStore, clock: Clock, job_id: str, state: JobStatus) -> Job:
    """A job in `state`, reached through the store's own API, with a checkpoint where it ran."""
    store.register(NewJob(job_id, queue="q", actor="a", message={"args": []}, owner="team"))
    if state is S.PENDING:
        return store.get(job_id)
    if state in (S.PAUSED, S.STOPPED, S.CANCELLED):
        event = {S.PAUSED: E.PAUSE, S.STOPPED: E.STOP, S.CANCELLED: E.CANCEL}[state]
        return store.transition(job_id, event, operator="op")
    claim = store.claim(job_id, worker_id="w1", lease_ttl=TTL)
    store.save_checkpoint(job_id, claim.lease_id, {"page": 3}, lease_ttl=TTL)
    clock.now += 1
    if state is S.RUNNING:
        return store.get(job_id)
    if state is S.STOPPING:
        return store.transition(job_id, E.STOP_REQUEST, operator="op")
    event = {S.RETRY_WAIT: E.RETRY, S.SUCCEEDED: E.SUCCEED, S.FAILED: E.FAIL, S.REVIEW: E.NEED_REVIEW,
             S.DEAD: E.DEAD_LETTER}[state]
    error = ErrorInfo("transient", "OSError", "boom")
    job = store.finish(job_id, claim.lease_id, event, error=error, retry_delay=DELAY if event is E.RETRY else None)
    assert job.status is state
    return job


def write_for(before: Job, event: Event) -> Any:
    """The write each caller would make: workers fence on the lease, operators and recovery on the version."""
    kwargs: dict[str, Any] = {"delay": DELAY if TRANSITIONS.get((before.status, event)) is S.RETRY_WAIT else None}
    if event is E.CLAIM:
        kwargs.update(worker_id="w2", attempt_id="att-2", lease_ttl=TTL)
    elif event is E.FAST_SUCCEED:  # a lease taken and released in one write, no TTL
        kwargs.update(worker_id="w2", attempt_id="att-2")
    elif event is E.CLAIM_RETURNED:  # a claim ahead handed back: fenced by its lease, no error
        kwargs.update(lease_id=before.lease_id, worker_id="w1")
    elif event in WORKER:
        kwargs.update(lease_id=before.lease_id, worker_id="w1",
                      error={"error_class": "transient", "error_type": "E", "message": "m"})
    elif event in CRASH:
        kwargs.update(lease_id=before.lease_id, version=before.version, expired_only=True)
    else:
        kwargs.update(version=before.version, operator="alice", reason="because", host="h",
                      dispatch=True if TRANSITIONS.get((before.status, event)) is S.PENDING else None)
    return transition_write(before.job_id, event, **kwargs)


def expected_row(before: Job, event: Event, now: float) -> dict[str, Any]:
    to = TRANSITIONS[(before.status, event)]
    row: dict[str, Any] = {
        "status": to, "previous_status": before.status, "version": before.version + 1, "updated_at": now,
        "lease_id": before.lease_id, "attempt": before.attempt, "worker_id": before.worker_id,
        "started_at": before.started_at, "lease_expires_at": before.lease_expires_at,
        "finished_at": now if to in AT_REST else None,
        "retry_at": now + DELAY if to is S.RETRY_WAIT else None,
        "scheduled_at": now + DELAY if to is S.RETRY_WAIT else now if to is S.PENDING else before.scheduled_at,
        "retry_count": before.retry_count + 1 if to is S.RETRY_WAIT
        else 0 if event in (E.RESTART, E.REQUEUE) else before.retry_count,
        "checkpoint": None if event is E.RESTART else before.checkpoint,
        "checkpoint_version": before.checkpoint_version,
        "pause_requested": before.pause_requested or event is E.PAUSE_REQUEST,
        "stop_requested": before.stop_requested or event is E.STOP_REQUEST,
        "cancel_requested": before.cancel_requested or event is E.CANCEL_REQUEST,
        "last_error_class": "transient" if event in WORKER else before.last_error_class,
    }
    if event is E.CLAIM_RETURNED:  # no attempt spent; its message is still on its way
        row.update(attempt=before.attempt - 1, dispatched_at=before.dispatched_at)
    elif to is S.PENDING:
        row["dispatched_at"] = now if event not in CRASH else None
    elif to is S.RETRY_WAIT:
        row["dispatched_at"] = now if event is E.RETRY else None
    else:
        row["dispatched_at"] = before.dispatched_at
    if event is E.CLAIM:
        row.update(lease_id=before.lease_id + 1, attempt=before.attempt + 1, worker_id="w2", started_at=now,
                   lease_expires_at=now + TTL, retry_at=None)
    elif event is E.FAST_SUCCEED:
        row.update(lease_id=before.lease_id + 1, attempt=before.attempt + 1, worker_id="w2", started_at=now)
    if to not in ACTIVE_STATES:
        row.update(lease_expires_at=None, pause_requested=False, stop_requested=False, cancel_requested=False)
    if event in (E.STOP_REQUEST, E.CANCEL_REQUEST):
        row["stop_requested_at"] = before.stop_requested_at or now
    elif to not in ACTIVE_STATES:
        row["stop_requested_at"] = None
    return row


@pytest.mark.parametrize("pair", sorted(TRANSITIONS, key=lambda p: (p[0].value, p[1].value)),
                         ids=lambda p: f"{p[0].value}-{p[1].value}")
def test_every_transition_writes_what_the_rules_say(clocked: tuple[StateStore, Clock],
                                                    pair: tuple[JobStatus, Event]) -> None:
    store, clock = clocked
    state, event = pair
    before = put_in(store, clock, "job", state)
    clock.now += 100.0  # past any lease (crash events) and any retry_at (a due claim)
    write = write_for(before, event)
    written = SqlRunner(store.engine, clock=clock).write(write)
    assert written is not None, f"{state.value} --{event.value}--> refused"
    job_row, event_row = written
    after = store.get("job")
    for column, value in expected_row(before, event, clock.now).items():
        got = getattr(after, column)
        assert got == value, f"{state.value} --{event.value}: {column} is {got!r}, expected {value!r}"
    assert Job.from_row(job_row) == after, "the row the write returned is the row stored"
    # The event row: one per transition, describing it.
    events = store.events("job")
    assert events[-1].id == event_row["id"]
    last = events[-1]
    assert (last.event, last.from_status, last.to_status) == (event.value, state.value, after.status.value)
    assert (last.version, last.attempt, last.lease_id, last.at) == (after.version, after.attempt, after.lease_id,
                                                                    clock.now)
    assert last.operator == ("alice" if write.operator else None)
    assert last.worker_id == ("w2" if event in (E.CLAIM, E.FAST_SUCCEED) else
                              "w1" if event in WORKER | {E.CLAIM_RETURNED} else
                              None if write.operator else after.worker_id)
    # The attempt row: a claim starts one; leaving an active state ends it, named by the event.
    attempts = store.attempts("job")
    if event is E.CLAIM:
        assert attempts[-1].attempt_id == "att-2" and attempts[-1].ended_at is None
    elif event is E.FAST_SUCCEED:
        assert attempts == [], "a fast-path commit writes no attempt row"
    elif event is E.CLAIM_RETURNED:
        assert attempts == [], "a claim handed back unused is no attempt"
    elif state in ACTIVE_STATES and after.status not in ACTIVE_STATES:
        assert (attempts[-1].outcome, attempts[-1].ended_at) == (event.value, clock.now)
    elif attempts:
        assert attempts[-1].outcome == (None if state in ACTIVE_STATES else attempts[-1].outcome)


@pytest.mark.parametrize("state", list(JobStatus), ids=lambda s: s.value)
def test_every_pair_outside_the_table_is_refused_and_writes_nothing(clocked: tuple[StateStore, Clock],
                                                                     state: JobStatus) -> None:
    store, clock = clocked
    runner = SqlRunner(store.engine, clock=clock)
    for index, event in enumerate(e for e in Event if (state, e) not in TRANSITIONS):
        job_id = f"job-{index}"
        before = put_in(store, clock, job_id, state)
        history = store.events(job_id)
        clock.now += 100.0
        write = transition_write(job_id, event, **_loose_kwargs(event))
        assert runner.write(write) is None, f"{state.value} --{event.value}--> was allowed"
        assert store.get(job_id) == before, f"{state.value} --{event.value}: the row changed"
        assert store.events(job_id) == history, f"{state.value} --{event.value}: an event was written"


def _loose_kwargs(event: Event) -> dict[str, Any]:
    """The most permissive fences for `event`: only the transition table can refuse it."""
    from reliable.states import target

    kwargs: dict[str, Any] = {"delay": DELAY if target(event) is S.RETRY_WAIT else None}
    if event is E.CLAIM:
        kwargs.update(worker_id="w2", attempt_id="att-x", lease_ttl=TTL)
    elif event is E.FAST_SUCCEED:
        kwargs.update(worker_id="w2", attempt_id="att-x")
    return kwargs


def test_a_stale_lease_is_refused_with_its_event(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    put_in(store, clock, "job", S.RUNNING)
    with pytest.raises(LeaseLost):
        store.finish("job", 99, E.SUCCEED, worker_id="stale")
    last = store.events("job")[-1]
    assert (last.event, last.lease_id, last.worker_id) == ("stale_commit_rejected", 99, "stale")
    assert store.get("job").status is S.RUNNING


def test_the_injected_clock_decides_lease_expiry_and_due_retries(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    put_in(store, clock, "held", S.RUNNING)
    put_in(store, clock, "waiting", S.RETRY_WAIT)
    assert store.expired_leases() == [] and store.due_retries(grace=0) == []
    clock.now += TTL + 1
    assert [j.job_id for j in store.expired_leases()] == ["held"]
    assert [j.job_id for j in store.due_retries(grace=0)] == ["waiting"]
