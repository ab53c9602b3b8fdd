"""The traceback a failed attempt hands the store lands on its event, also on a late completion."""

from __future__ import annotations

import pytest

from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore

from support import Clock

TTL = 10.0
TRACE = "Traceback (most recent call last):\n  ...\nValueError: bad input\n"


def running(store: StateStore, job_id: str) -> int:
    store.register(NewJob(job_id, queue="q", actor="a", message={}))
    return store.claim(job_id, worker_id="w", lease_ttl=TTL).lease_id


@pytest.mark.parametrize("event", [Event.FAIL, Event.RETRY, Event.DEAD_LETTER, Event.NEED_REVIEW])
def test_the_failure_event_carries_the_traceback(clocked: tuple[StateStore, Clock], event: Event) -> None:
    store, _ = clocked
    lease = running(store, "job")
    store.finish("job", lease, event, worker_id="w", error=ErrorInfo("invalid_input", "ValueError", "bad input", TRACE),
                 retry_delay=1.0 if event is Event.RETRY else None)
    history = {e.event: e for e in store.events("job")}
    assert history[event.value].traceback == TRACE
    assert history["claim"].traceback is None and history["enqueued"].traceback is None


def test_a_late_completion_keeps_the_traceback(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    recovery = Recovery(store, None, Policy.load(None), lease_ttl=TTL)
    lease = running(store, "job")
    clock.now += 2 * TTL
    assert recovery.run_once().expired == {"job": Event.LEASE_EXPIRED.value}
    done = store.finish("job", lease, Event.FAIL, worker_id="w",
                        error=ErrorInfo("invalid_input", "ValueError", "bad input", TRACE))
    assert done.status is JobStatus.FAILED
    last = store.events("job")[-1]
    assert last.detail["late_completion"] is True and last.traceback == TRACE
