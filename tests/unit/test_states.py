"""The state machine: every allowed pair, and every other pair refused (exhaustive)."""

from __future__ import annotations

import itertools

import pytest

from reliable.errors import TransitionRefused
from reliable.states import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Event,
    JobStatus,
    allowed_events,
    next_state,
    sources,
    target,
)

S, E = JobStatus, Event

# The design's table, written out again by hand so a change to TRANSITIONS must be deliberate.
EXPECTED = {
    (S.PENDING, E.CLAIM): S.RUNNING,
    (S.RETRY_WAIT, E.CLAIM): S.RUNNING,
    (S.RUNNING, E.SUCCEED): S.SUCCEEDED,
    (S.PENDING, E.FAST_SUCCEED): S.SUCCEEDED,
    (S.RUNNING, E.RETRY): S.RETRY_WAIT,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.RUNNING, E.NEED_REVIEW): S.REVIEW,
    (S.RUNNING, E.DEAD_LETTER): S.DEAD,
    (S.RUNNING, E.HALT): S.STOPPED,
    (S.RUNNING, E.PAUSE_OBSERVED): S.PAUSED,
    (S.STOPPING, E.STOP_OBSERVED): S.STOPPED,
    (S.STOPPING, E.CANCEL_OBSERVED): S.CANCELLED,
    (S.STOPPING, E.SUCCEED): S.SUCCEEDED,
    (S.STOPPING, E.NEED_REVIEW): S.REVIEW,
    (S.PENDING, E.SKIPPED): S.CANCELLED,
    (S.RETRY_WAIT, E.SKIPPED): S.CANCELLED,
    (S.RUNNING, E.SKIPPED): S.CANCELLED,
    (S.PENDING, E.SKIPPED_FAILED): S.FAILED,
    (S.RETRY_WAIT, E.SKIPPED_FAILED): S.FAILED,
    (S.RUNNING, E.SKIPPED_FAILED): S.FAILED,
    (S.RUNNING, E.ABORTED): S.CANCELLED,
    (S.PENDING, E.UNRUNNABLE): S.DEAD,
    (S.RETRY_WAIT, E.UNRUNNABLE): S.DEAD,
    (S.RUNNING, E.CLAIM_RETURNED): S.PENDING,  # a claim ahead handed back unused
    (S.PENDING, E.PAUSE): S.PAUSED,
    (S.RETRY_WAIT, E.PAUSE): S.PAUSED,
    (S.RUNNING, E.PAUSE_REQUEST): S.RUNNING,
    (S.PENDING, E.STOP): S.STOPPED,
    (S.RETRY_WAIT, E.STOP): S.STOPPED,
    (S.PAUSED, E.STOP): S.STOPPED,
    (S.RUNNING, E.STOP_REQUEST): S.STOPPING,
    (S.RUNNING, E.CANCEL_REQUEST): S.STOPPING,
    (S.STOPPING, E.CANCEL_REQUEST): S.STOPPING,
    (S.PENDING, E.CANCEL): S.CANCELLED,
    (S.RETRY_WAIT, E.CANCEL): S.CANCELLED,
    (S.PAUSED, E.CANCEL): S.CANCELLED,
    (S.STOPPED, E.CANCEL): S.CANCELLED,
    (S.PAUSED, E.RESUME): S.PENDING,
    (S.STOPPED, E.RESUME): S.PENDING,
    (S.FAILED, E.RESTART): S.PENDING,
    (S.DEAD, E.RESTART): S.PENDING,
    (S.REVIEW, E.RESTART): S.PENDING,
    (S.STOPPED, E.RESTART): S.PENDING,
    (S.CANCELLED, E.RESTART): S.PENDING,
    (S.FAILED, E.REQUEUE): S.PENDING,
    (S.DEAD, E.REQUEUE): S.PENDING,
    (S.REVIEW, E.RECONCILE_SUCCEEDED): S.SUCCEEDED,
    (S.REVIEW, E.RECONCILE_CANCELLED): S.CANCELLED,
    (S.RUNNING, E.LEASE_EXPIRED): S.PENDING,
    (S.RUNNING, E.LEASE_EXPIRED_BACKOFF): S.RETRY_WAIT,
    (S.RUNNING, E.LEASE_EXPIRED_REVIEW): S.REVIEW,
    (S.RUNNING, E.LEASE_EXPIRED_DEAD): S.DEAD,
    (S.RETRY_WAIT, E.RETRY_DUE): S.PENDING,
    (S.STOPPING, E.FORCE_STOP): S.STOPPED,
    (S.STOPPING, E.FORCE_CANCEL): S.CANCELLED,
}

ALL_PAIRS = list(itertools.product(JobStatus, Event))


def test_table_is_exactly_the_design() -> None:
    assert dict(TRANSITIONS) == EXPECTED


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=lambda v: str(v))
def test_every_pair(state: JobStatus, event: Event) -> None:
    if (state, event) in EXPECTED:
        assert next_state(state, event) is EXPECTED[(state, event)]
        assert next_state(state.value, event.value) is EXPECTED[(state, event)]
    else:
        with pytest.raises(TransitionRefused) as info:
            next_state(state, event)
        assert state.value in str(info.value) and event.value in str(info.value)
        assert info.value.status == state.value and info.value.event == event.value


def test_pair_count_is_exhaustive() -> None:
    assert len(ALL_PAIRS) == len(JobStatus) * len(Event) == 11 * len(Event)
    refused = sum(1 for pair in ALL_PAIRS if pair not in EXPECTED)
    assert refused == len(ALL_PAIRS) - len(EXPECTED)


def test_every_event_has_one_target_and_is_used() -> None:
    for event in Event:
        srcs = sources(event)
        assert srcs, f"{event} is never allowed"
        assert {EXPECTED[(s, event)] for s in srcs} == {target(event)}


def test_terminal_states_only_leave_by_operator() -> None:
    worker_or_recovery = {E.CLAIM, E.SUCCEED, E.FAST_SUCCEED, E.RETRY, E.FAIL, E.NEED_REVIEW, E.DEAD_LETTER, E.HALT,
                          E.LEASE_EXPIRED, E.RETRY_DUE, E.FORCE_STOP}
    for state in TERMINAL_STATES:
        assert not (allowed_events(state) & worker_or_recovery)
        assert allowed_events(state) <= {E.RESTART, E.REQUEUE}


def test_only_claim_enters_active_states_from_outside() -> None:
    for (state, event), to in EXPECTED.items():
        if to in ACTIVE_STATES and state not in ACTIVE_STATES:
            assert event is E.CLAIM


def test_unknown_names_are_refused() -> None:
    with pytest.raises(TransitionRefused):
        next_state("NOPE", "claim")
    with pytest.raises(TransitionRefused):
        next_state("PENDING", "nope")


def test_failed_for_good_is_what_a_retry_takes_and_failure_states_add_review() -> None:
    from reliable.states import FAILED_FOR_GOOD, FAILURE_STATES

    assert FAILED_FOR_GOOD == {S.FAILED, S.DEAD} == sources(E.REQUEUE)
    assert FAILED_FOR_GOOD | {S.REVIEW} == FAILURE_STATES


def test_who_sends_each_event_and_what_ends_an_attempt() -> None:
    from reliable.states import (
        ATTEMPT_ENDS,
        ATTEMPT_ENDS_IF_ACTIVE,
        FORCED_ENDS,
        LEASE_EXPIRIES,
        OPERATOR_EVENTS,
        RECOVERY_EVENTS,
        WORKER_OUTCOMES,
    )

    assert not OPERATOR_EVENTS & RECOVERY_EVENTS
    assert {E.LEASE_EXPIRED, E.LEASE_EXPIRED_BACKOFF, E.LEASE_EXPIRED_REVIEW, E.LEASE_EXPIRED_DEAD} == LEASE_EXPIRIES
    assert {E.FORCE_STOP, E.FORCE_CANCEL} == FORCED_ENDS
    assert LEASE_EXPIRIES | FORCED_ENDS | {E.RETRY_DUE} == RECOVERY_EVENTS
    # An operator's events never end an attempt by themselves: a stop or cancel is a request.
    assert not OPERATOR_EVENTS & (ATTEMPT_ENDS | ATTEMPT_ENDS_IF_ACTIVE)
    assert (WORKER_OUTCOMES - ATTEMPT_ENDS_IF_ACTIVE) | LEASE_EXPIRIES | {E.FAST_SUCCEED} == ATTEMPT_ENDS
    assert {E.SKIPPED, E.SKIPPED_FAILED} == ATTEMPT_ENDS_IF_ACTIVE
    assert E.CLAIM_RETURNED not in ATTEMPT_ENDS | ATTEMPT_ENDS_IF_ACTIVE  # no attempt had started
