"""reliable.worker.outcome: how an attempt ended -> the event written, exhaustively, without a broker or a store.

The tables below are written out by hand (not read from the module): the product of exception kind x
the job's control flags x the policy's action is checked against them, through the store's own rule
for requests standing on the job (`states.honour_requests`).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from dramatiq.middleware.time_limit import TimeLimitExceeded

from reliable.errors import JobCancelled, JobForceStopped, JobPaused, JobStopped, LeaseLostInterrupt
from reliable.policy import Decision
from reliable.recovery import crash_event
from reliable.states import Event, JobStatus, honour_requests
from reliable.worker import outcome
from reliable.worker.skips import Skip

E = Event


class CustomPause(JobPaused):
    """Not one of reliable's own interrupts: the policy decides, as for any exception."""


#: Exception kinds; None is a success.
KINDS: dict[str, BaseException | None] = {
    "success": None,
    "lease_lost": LeaseLostInterrupt(),
    "paused": JobPaused(),
    "stopped": JobStopped(),
    "cancelled": JobCancelled(),
    "force_stopped": JobForceStopped(),
    "error": ValueError("bad input"),
    "time_limit": TimeLimitExceeded(),  # Dramatiq's interrupt, not reliable's: a failure
    "subclassed_pause": CustomPause(),
}
ACTIONS = ("retry", "fail", "review", "dead", "halt")
#: (kind, action) -> the event the attempt's end writes (None: nothing, the lease is lost).
WRITTEN: dict[str, Any] = {
    "success": E.SUCCEED, "lease_lost": None, "paused": E.PAUSE_OBSERVED, "stopped": E.STOP_OBSERVED,
    "cancelled": E.CANCEL_OBSERVED, "force_stopped": E.FORCE_STOP,
}
FAILED = {"retry": E.RETRY, "fail": E.FAIL, "review": E.NEED_REVIEW, "dead": E.DEAD_LETTER, "halt": E.HALT}
#: The job's control flags when the outcome is written: (status, pause_requested, cancel_requested).
FLAGS = {
    "none": (JobStatus.RUNNING, False, False),
    "pause_requested": (JobStatus.RUNNING, True, False),
    "stop_requested": (JobStatus.STOPPING, False, False),
    "cancel_requested": (JobStatus.STOPPING, False, True),
}
#: event -> what the store writes under each flag (none, pause, stop, cancel).
STORED = {
    E.SUCCEED: (E.SUCCEED, E.SUCCEED, E.SUCCEED, E.SUCCEED),
    E.PAUSE_OBSERVED: (E.PAUSE_OBSERVED, E.PAUSE_OBSERVED, E.STOP_OBSERVED, E.CANCEL_OBSERVED),
    E.STOP_OBSERVED: (E.STOP_OBSERVED, E.STOP_OBSERVED, E.STOP_OBSERVED, E.CANCEL_OBSERVED),
    E.CANCEL_OBSERVED: (E.CANCEL_OBSERVED,) * 4,
    E.FORCE_STOP: (E.FORCE_STOP, E.FORCE_STOP, E.FORCE_STOP, E.FORCE_CANCEL),
    E.RETRY: (E.RETRY, E.PAUSE_OBSERVED, E.STOP_OBSERVED, E.CANCEL_OBSERVED),
    E.FAIL: (E.FAIL, E.FAIL, E.STOP_OBSERVED, E.CANCEL_OBSERVED),
    E.NEED_REVIEW: (E.NEED_REVIEW,) * 4,
    E.DEAD_LETTER: (E.DEAD_LETTER, E.DEAD_LETTER, E.STOP_OBSERVED, E.CANCEL_OBSERVED),
    E.HALT: (E.HALT, E.HALT, E.STOP_OBSERVED, E.CANCEL_OBSERVED),
}


def decision(action: str, **changes: Any) -> Decision:
    fields: dict[str, Any] = {"action": action, "error_class": "invalid_input", "rule": "r1",
                              "delay": 30.0 if action == "retry" else None, "reason": "because", "alert": False,
                              "exception_type": "ValueError", "message": "bad input"}
    return Decision(**{**fields, **changes})


def written(exception: BaseException | None, action: str) -> outcome.Outcome | None:
    """What the worker writes: `attempt_ended`, or the policy's decision when it must decide."""
    if outcome.needs_decision(exception):
        return outcome.failed(decision(action), traceback="tb", retries=1, max_attempts=3, home_queue="q", queue="q")
    return outcome.attempt_ended(exception)


@pytest.mark.parametrize(("kind", "flags", "action"), list(itertools.product(KINDS, FLAGS, ACTIONS)))
def test_exception_kind_control_flags_and_action_give_the_event_written(kind: str, flags: str, action: str) -> None:
    ended = written(KINDS[kind], action)
    expected = WRITTEN[kind] if kind in WRITTEN else FAILED[action]
    assert (ended.event if ended is not None else None) is expected
    if ended is None:
        return
    status, pause, cancel = FLAGS[flags]
    stored = honour_requests(ended.event, status, pause_requested=pause, cancel_requested=cancel)
    assert stored is STORED[ended.event][list(FLAGS).index(flags)]


@pytest.mark.parametrize("kind", ["paused", "stopped", "cancelled", "force_stopped"])
def test_an_observed_interrupt_names_itself_and_carries_no_error(kind: str) -> None:
    exception = KINDS[kind]
    ended = outcome.attempt_ended(exception)
    assert ended is not None and ended.detail == {"interrupt": type(exception).__name__}
    assert ended.error is None and ended.retry_delay is None and ended.queue is None


@pytest.mark.parametrize("action", ACTIONS)
def test_a_failure_records_the_decisions_error_and_waits_only_on_a_retry(action: str) -> None:
    # The policy engine masks the message once, where it decides (tests/unit/test_disclosure.py): the
    # error and the event's detail carry that one text.
    masked = "login failed password=***"
    ended = outcome.failed(decision(action, message=masked), traceback="tb", retries=2,
                           max_attempts=3, home_queue="q", queue="q")
    assert ended.error is not None and ended.error.error_class == "invalid_input" and ended.error.traceback == "tb"
    assert ended.error.message == masked and ended.detail is not None and ended.detail["message"] == masked
    assert ended.retry_delay == (30.0 if action == "retry" else None)
    assert ended.detail == decision(action, message=masked).as_detail()
    assert ended.exhausted is None


def test_exhausted_retries_tell_the_continuation_how_many_ran() -> None:
    ended = outcome.failed(decision("dead", retries_exhausted=True), traceback=None, retries=3, max_attempts=3,
                           home_queue="q", queue="q")
    assert ended.exhausted == {"retries": 2, "max_retries": 2}


@pytest.mark.parametrize(("action", "routed", "home", "waits_on", "expected"), [
    ("retry", None, "q", "q", None),            # stays where it waits: one write
    ("retry", "slow", "q", "q", "slow"),        # routed to a lane
    ("retry", None, "q", "slow", "q"),          # back home from a lane
    ("retry", "slow", "q", "slow", None),       # on that lane already
    ("fail", "slow", "q", "q", None),           # only a retry moves
])
def test_a_retry_moves_to_the_decisions_queue_or_home(action: str, routed: str | None, home: str, waits_on: str,
                                                      expected: str | None) -> None:
    ended = outcome.failed(decision(action, queue=routed), traceback=None, retries=1, max_attempts=3,
                           home_queue=home, queue=waits_on)
    assert ended.queue == expected


def test_an_action_the_worker_cannot_write_is_a_policy_bug() -> None:
    with pytest.raises(ValueError, match="'requeue' is not valid for a failed attempt"):
        outcome.failed(decision("requeue"), traceback=None, retries=1, max_attempts=3, home_queue="q", queue="q")


@pytest.mark.parametrize(("status", "decided", "fails"), [
    (JobStatus.FAILED, True, True), (JobStatus.DEAD, True, True), (JobStatus.FAILED, False, False),
    (JobStatus.REVIEW, True, False), (JobStatus.RETRY_WAIT, True, False), (JobStatus.STOPPED, True, False),
])
def test_only_a_decided_failure_for_good_fails_the_message(status: JobStatus, decided: bool, fails: bool) -> None:
    assert outcome.fails_message(status, decision("fail") if decided else None) is fails


@pytest.mark.parametrize(("action", "event"), [
    ("requeue", E.LEASE_EXPIRED), ("retry", E.LEASE_EXPIRED_BACKOFF), ("review", E.LEASE_EXPIRED_REVIEW),
    ("dead", E.LEASE_EXPIRED_DEAD), ("fail", E.LEASE_EXPIRED_DEAD), ("halt", E.LEASE_EXPIRED_REVIEW),
    ("something new", E.LEASE_EXPIRED_REVIEW),
])
def test_a_crashed_attempt_gets_the_crash_event_of_the_decision(action: str, event: Event) -> None:
    assert crash_event(action) is event


@pytest.mark.parametrize(("failed", "event"), [(False, E.SKIPPED), (True, E.SKIPPED_FAILED)])
def test_a_claimed_job_another_middleware_skipped_ends(failed: bool, event: Event) -> None:
    ended = outcome.skipped(Skip("AgeLimit", "too old", failed, own=False))
    assert (ended.event, ended.retry_delay, ended.detail) == (event, None, {"middleware": "AgeLimit",
                                                                           "reason": "too old"})


def test_another_middlewares_abort_of_the_running_actor_ends_it_aborted() -> None:
    from dramatiq_abort import Abort

    ended = outcome.attempt_ended(Abort("aborted"))
    assert not outcome.needs_decision(Abort("aborted"))
    assert ended is not None
    assert (ended.event, ended.detail) == (E.ABORTED, {"interrupt": "Abort", "middleware": "Abortable"})
