"""The job state machine: states, events and the transition table, as data. Pure: no I/O.

Who moves jobs in and out of each state:

- PENDING     in: producer (enqueue), recovery (lease expired, retry due), operator (resume,
              restart, retry). out: worker (claim, another middleware's skip, its own message
              unrunnable), operator (pause, stop, cancel).
- RUNNING     in: worker (claim). out: worker (success, failure, pause observed, another
              middleware's skip or abort, a claim ahead handed back unused), operator
              (stop/cancel request), recovery (lease expired).
- RETRY_WAIT  in: worker (retryable failure), recovery (lease expired, backoff).
              out: worker (claim of the delayed message once due, another middleware's skip
              of it, the message unrunnable), recovery (retry due), operator (pause, stop, cancel).
- PAUSED      in: operator (pause a PENDING/RETRY_WAIT job), worker or recovery (pause observed
              on a RUNNING job). out: operator (resume, cancel).
- STOPPING    in: operator (stop or cancel a RUNNING job). out: worker (unit done), recovery
              (grace passed or lease expired).
- STOPPED     in: worker (stop observed, authorization failure), recovery (forced stop),
              operator (stop a job that was not running). out: operator (resume, restart, cancel).
- REVIEW      in: worker (ambiguous side effect), recovery (crash of a non-idempotent job).
              out: operator (reconcile, restart).
- SUCCEEDED, FAILED, CANCELLED, DEAD are terminal for workers; an operator may retry or restart
  FAILED and DEAD jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from .errors import TransitionRefused

__all__ = [
    "ACTIVE_STATES",
    "ATTEMPT_ENDS",
    "ATTEMPT_ENDS_IF_ACTIVE",
    "AT_REST_STATES",
    "CANCEL_UPGRADES",
    "FAILED_FOR_GOOD",
    "FAILURE_OUTCOMES",
    "FAILURE_STATES",
    "FORCED_ENDS",
    "LATE_COMPLETION_FROM",
    "LEASE_EXPIRIES",
    "ONE_WRITE_RUNS",
    "OPERATOR_EVENTS",
    "RECOVERY_EVENTS",
    "RERUN_EVENTS",
    "RETURNED_CLAIMS",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "UNFINISHED_STATES",
    "WORKER_OUTCOMES",
    "Event",
    "JobStatus",
    "allowed_events",
    "honour_requests",
    "late_target",
    "next_state",
    "sources",
    "target",
]


class JobStatus(StrEnum):
    """The state of a job in the store's projection."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    RETRY_WAIT = "RETRY_WAIT"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REVIEW = "REVIEW"
    DEAD = "DEAD"


class Event(StrEnum):
    """Everything that can move a job from one state to another."""

    # worker
    CLAIM = "claim"
    SUCCEED = "succeed"
    #: A fast-path actor's run committed without a claim before it (see ONE_WRITE_RUNS).
    FAST_SUCCEED = "fast_succeed"
    RETRY = "retry_scheduled"
    FAIL = "fail"
    NEED_REVIEW = "need_review"
    DEAD_LETTER = "dead_letter"
    HALT = "halt"  # authorization / policy failure: stop and alert
    PAUSE_OBSERVED = "pause_observed"
    STOP_OBSERVED = "stop_observed"
    CANCEL_OBSERVED = "cancel_observed"
    #: Another middleware skipped the delivery (Dramatiq's SkipMessage: dramatiq-abort's cancel, an
    #: app's de-duplication): acknowledged, never run, as without reliable. Final, like Dramatiq's.
    SKIPPED = "skipped"
    #: Another middleware failed the message, then skipped it (Dramatiq's AgeLimit).
    SKIPPED_FAILED = "skipped_failed"
    #: Another middleware interrupted the running actor to end it (dramatiq-abort's abort).
    ABORTED = "aborted"
    #: The job's own message can never run: an option breaks its rule (reliable.options), or its
    #: claim fails the same way at every try. Dead-lettered, the job DEAD (reliable.worker.delivery).
    UNRUNNABLE = "unrunnable"
    #: A claim taken ahead for a message waiting in the worker's own queue, handed back unused
    #: (its message was not taken in time, or the worker shut down): no attempt was spent.
    CLAIM_RETURNED = "claim_returned"
    # operator
    PAUSE = "pause"
    PAUSE_REQUEST = "pause_requested"
    STOP = "stop"
    STOP_REQUEST = "stop_requested"
    CANCEL = "cancel"
    CANCEL_REQUEST = "cancel_requested"
    RESUME = "resume"
    RESTART = "restart"
    REQUEUE = "requeue"  # retry a FAILED or DEAD job from its last checkpoint
    RECONCILE_SUCCEEDED = "reconcile_succeeded"
    RECONCILE_CANCELLED = "reconcile_cancelled"
    # recovery
    LEASE_EXPIRED = "lease_expired"  # -> PENDING, re-dispatched at once
    LEASE_EXPIRED_BACKOFF = "lease_expired_backoff"  # -> RETRY_WAIT
    LEASE_EXPIRED_REVIEW = "lease_expired_review"  # crash of a non-idempotent job
    LEASE_EXPIRED_DEAD = "lease_expired_dead"  # crashed once too often
    RETRY_DUE = "retry_due"
    FORCE_STOP = "force_stop"
    FORCE_CANCEL = "force_cancel"


S = JobStatus
E = Event

#: (from state, event) -> to state. Every pair not listed here is refused.
TRANSITIONS: Mapping[tuple[JobStatus, Event], JobStatus] = {
    # worker
    (S.PENDING, E.CLAIM): S.RUNNING,
    (S.RETRY_WAIT, E.CLAIM): S.RUNNING,  # the delayed message arrived at retry_at
    (S.RUNNING, E.SUCCEED): S.SUCCEEDED,
    # The fast path (an actor declared `fast_path=True`): no claim before the run, one
    # compare-and-set after it. It takes and releases a lease in the same write (lease_id and
    # attempt + 1), so any older lease is fenced; a duplicate delivery's second commit is refused.
    (S.PENDING, E.FAST_SUCCEED): S.SUCCEEDED,
    (S.RUNNING, E.RETRY): S.RETRY_WAIT,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.RUNNING, E.NEED_REVIEW): S.REVIEW,
    (S.RUNNING, E.DEAD_LETTER): S.DEAD,
    (S.RUNNING, E.HALT): S.STOPPED,
    (S.RUNNING, E.PAUSE_OBSERVED): S.PAUSED,
    # A job asked to stop may still finish, or leave an ambiguous side effect, before its next
    # checkpoint. Any other outcome becomes the stop or cancel (see honour_requests).
    (S.STOPPING, E.STOP_OBSERVED): S.STOPPED,
    (S.STOPPING, E.CANCEL_OBSERVED): S.CANCELLED,
    (S.STOPPING, E.SUCCEED): S.SUCCEEDED,
    (S.STOPPING, E.NEED_REVIEW): S.REVIEW,
    # Another middleware's skip ends the job as Dramatiq ends the message: before reliable's claim
    # (the job is PENDING, or RETRY_WAIT for a retry's delivery; version-checked) or after it
    # (RUNNING; fenced by the lease).
    (S.PENDING, E.SKIPPED): S.CANCELLED,
    (S.RETRY_WAIT, E.SKIPPED): S.CANCELLED,
    (S.RUNNING, E.SKIPPED): S.CANCELLED,
    (S.PENDING, E.SKIPPED_FAILED): S.FAILED,
    (S.RETRY_WAIT, E.SKIPPED_FAILED): S.FAILED,
    (S.RUNNING, E.SKIPPED_FAILED): S.FAILED,
    (S.RUNNING, E.ABORTED): S.CANCELLED,
    # The job's own message cannot run, ever (before any claim: version-checked).
    (S.PENDING, E.UNRUNNABLE): S.DEAD,
    (S.RETRY_WAIT, E.UNRUNNABLE): S.DEAD,
    # A claim ahead handed back (see RETURNED_CLAIMS): fenced by its lease like any worker write.
    (S.RUNNING, E.CLAIM_RETURNED): S.PENDING,
    # operator
    (S.PENDING, E.PAUSE): S.PAUSED,
    (S.RETRY_WAIT, E.PAUSE): S.PAUSED,
    (S.PENDING, E.STOP): S.STOPPED,
    (S.RETRY_WAIT, E.STOP): S.STOPPED,
    (S.PAUSED, E.STOP): S.STOPPED,
    (S.RUNNING, E.PAUSE_REQUEST): S.RUNNING,  # observed at the next checkpoint or heartbeat
    (S.RUNNING, E.STOP_REQUEST): S.STOPPING,
    (S.RUNNING, E.CANCEL_REQUEST): S.STOPPING,
    (S.STOPPING, E.CANCEL_REQUEST): S.STOPPING,  # upgrade a stop to a cancel
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
    # recovery
    (S.RUNNING, E.LEASE_EXPIRED): S.PENDING,
    (S.RUNNING, E.LEASE_EXPIRED_BACKOFF): S.RETRY_WAIT,
    (S.RUNNING, E.LEASE_EXPIRED_REVIEW): S.REVIEW,
    (S.RUNNING, E.LEASE_EXPIRED_DEAD): S.DEAD,
    (S.RETRY_WAIT, E.RETRY_DUE): S.PENDING,
    (S.STOPPING, E.FORCE_STOP): S.STOPPED,
    (S.STOPPING, E.FORCE_CANCEL): S.CANCELLED,
}

_TARGETS: Mapping[Event, JobStatus] = {ev: to for (_, ev), to in TRANSITIONS.items()}
_SOURCES: Mapping[Event, frozenset[JobStatus]] = {
    ev: frozenset(state for (state, e) in TRANSITIONS if e is ev) for ev in Event
}
assert all(TRANSITIONS[k] is _TARGETS[k[1]] for k in TRANSITIONS), "an event must have one target"

#: States no worker moves a job out of.
TERMINAL_STATES: frozenset[JobStatus] = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.DEAD})

#: Every state but the final outcomes nobody acts on (SUCCEEDED, FAILED, CANCELLED): what the
#: metrics collector counts by default and what the store's partial indexes hold (schema.py).
UNFINISHED_STATES: frozenset[JobStatus] = frozenset(JobStatus) - {S.SUCCEEDED, S.FAILED, S.CANCELLED}

#: States in which a worker holds a lease on the job.
ACTIVE_STATES: frozenset[JobStatus] = frozenset({S.RUNNING, S.STOPPING})

#: States in which nothing moves the job on its own: `finished_at` is set on entering them and
#: cleared on leaving them (an operator's resume, restart or retry).
AT_REST_STATES: frozenset[JobStatus] = TERMINAL_STATES | {S.PAUSED, S.STOPPED, S.REVIEW}

#: Events whose write takes and releases a lease at once: a run committed with no claim before it.
ONE_WRITE_RUNS: frozenset[Event] = frozenset({E.FAST_SUCCEED})

#: Events that give back a claim whose attempt never started (reliable.worker.ahead): the job's
#: attempt counter reads as before the claim, its lease_id stays spent (fencing is monotonic), its
#: message is still on its way (dispatched_at kept), and job_history counts no attempt for it.
RETURNED_CLAIMS: frozenset[Event] = frozenset({E.CLAIM_RETURNED})

#: The events an operator's commands send (reliable.control); the metrics count each under its command
#: (a request under the command it requests: `pause_requested` is a `pause`).
OPERATOR_EVENTS: frozenset[Event] = frozenset({
    E.PAUSE, E.PAUSE_REQUEST, E.STOP, E.STOP_REQUEST, E.CANCEL, E.CANCEL_REQUEST, E.RESUME, E.RESTART, E.REQUEUE,
    E.RECONCILE_SUCCEEDED, E.RECONCILE_CANCELLED,
})

#: The events recovery sends (reliable.recovery), for a worker that is gone or a retry that is due.
RECOVERY_EVENTS: frozenset[Event] = frozenset({
    E.LEASE_EXPIRED, E.LEASE_EXPIRED_BACKOFF, E.LEASE_EXPIRED_REVIEW, E.LEASE_EXPIRED_DEAD, E.RETRY_DUE,
    E.FORCE_STOP, E.FORCE_CANCEL,
})

#: Recovery's events for a RUNNING job whose lease expired (its worker is gone).
LEASE_EXPIRIES: frozenset[Event] = frozenset(ev for ev in RECOVERY_EVENTS if _SOURCES[ev] == {S.RUNNING})

#: Recovery's events for a STOPPING job still running past its grace period (forced termination).
FORCED_ENDS: frozenset[Event] = frozenset(ev for ev in RECOVERY_EVENTS if _SOURCES[ev] == {S.STOPPING})

#: What a worker's attempt can end with (the events of `StateStore.finish`).
WORKER_OUTCOMES: frozenset[Event] = frozenset({
    E.SUCCEED, E.RETRY, E.FAIL, E.NEED_REVIEW, E.DEAD_LETTER, E.HALT, E.PAUSE_OBSERVED,
    E.STOP_OBSERVED, E.CANCEL_OBSERVED, E.FORCE_STOP, E.FORCE_CANCEL, E.SKIPPED, E.SKIPPED_FAILED, E.ABORTED,
})

#: Worker outcomes of a failed attempt: each records the attempt's error and traceback.
FAILURE_OUTCOMES: frozenset[Event] = frozenset({E.RETRY, E.FAIL, E.NEED_REVIEW, E.DEAD_LETTER, E.HALT})

#: The states of a job that failed for good: where a failed attempt leaves it when no retry is left
#: (the terminal targets of FAILURE_OUTCOMES: FAILED, DEAD). What an operator's retry (REQUEUE) takes,
#: and what Dramatiq calls a failed message (its `after_skip_message`/dead letters; worker/outcome.py).
FAILED_FOR_GOOD: frozenset[JobStatus] = frozenset(_TARGETS[ev] for ev in FAILURE_OUTCOMES) & TERMINAL_STATES

#: The states whose job shows its last error to a person: failed for good, or in REVIEW (an
#: ambiguous failure waiting for someone to reconcile it). The console, the CLI and workflow drawings
#: mark these.
FAILURE_STATES: frozenset[JobStatus] = FAILED_FOR_GOOD | {S.REVIEW}

#: Events that end an attempt wherever they come from: each moves a job out of a state in which a
#: worker holds its lease (ACTIVE_STATES) and from nowhere else, or takes and releases a lease in
#: one write (ONE_WRITE_RUNS). A claim handed back unused (RETURNED_CLAIMS) started no attempt.
ATTEMPT_ENDS: frozenset[Event] = frozenset(
    ev for ev in _TARGETS
    if _SOURCES[ev] <= ACTIVE_STATES and _TARGETS[ev] not in ACTIVE_STATES and ev not in RETURNED_CLAIMS
) | ONE_WRITE_RUNS

#: Events that end an attempt only when they find the job in ACTIVE_STATES (another middleware's
#: skip: before reliable's claim it ends the job, but no attempt had started).
ATTEMPT_ENDS_IF_ACTIVE: frozenset[Event] = frozenset(
    ev for (state, ev), to in TRANSITIONS.items()
    if state in ACTIVE_STATES and to not in ACTIVE_STATES and not _SOURCES[ev] <= ACTIVE_STATES
)

#: Outcomes that would run the job again by themselves. They are refused while a pause is
#: requested (the pause wins: see `honour_requests`).
RERUN_EVENTS: frozenset[Event] = frozenset({E.RETRY, E.LEASE_EXPIRED, E.LEASE_EXPIRED_BACKOFF, E.CLAIM_RETURNED})

#: Stop outcomes that a standing cancel request upgrades (they are refused while one stands).
CANCEL_UPGRADES: Mapping[Event, Event] = {E.STOP_OBSERVED: E.CANCEL_OBSERVED, E.FORCE_STOP: E.FORCE_CANCEL}

#: Where recovery leaves a job whose lease it expired. A worker whose lease was expired while it
#: could not reach the store may still commit its outcome from these (a late completion), provided
#: nobody claimed the job since (its lease_id is unchanged) and the expiry was the job's last
#: transition. The body then ran once, and its real outcome replaces recovery's guess.
LATE_COMPLETION_FROM: frozenset[JobStatus] = frozenset({S.PENDING, S.RETRY_WAIT, S.REVIEW, S.DEAD, S.PAUSED})

#: Worker outcomes a late completion may commit (not the stop and cancel observations: recovery
#: only expires a lease into LATE_COMPLETION_FROM when no stop was requested).
_LATE_OUTCOMES: frozenset[Event] = frozenset({E.SUCCEED, E.RETRY, E.FAIL, E.NEED_REVIEW, E.DEAD_LETTER,
                                               E.HALT, E.PAUSE_OBSERVED})


def target(event: Event | str) -> JobStatus:
    """The single state `event` leads to, whatever state it starts from."""
    event = Event(event)
    return _TARGETS[event]


def next_state(state: JobStatus | str, event: Event | str) -> JobStatus:
    """Return the state `event` moves a job in `state` to, or raise TransitionRefused naming both."""
    try:
        state = JobStatus(state)
        event = Event(event)
    except ValueError as exc:
        raise TransitionRefused(f"unknown state or event: {exc}") from None
    target = TRANSITIONS.get((state, event))
    if target is None:
        raise TransitionRefused(
            f"event {event.value!r} is not allowed in state {state.value}", status=state.value,
            event=event.value,
        )
    return target


def sources(event: Event | str) -> frozenset[JobStatus]:
    """The states from which `event` is allowed (used as the guard of a compare-and-set)."""
    return _SOURCES[Event(event)]


def allowed_events(state: JobStatus | str) -> frozenset[Event]:
    """The events allowed in `state`."""
    state = JobStatus(state)
    return frozenset(ev for (st, ev) in TRANSITIONS if st is state)


def late_target(state: JobStatus | str, event: Event | str) -> JobStatus | None:
    """Where a late completion of `event` moves a job that recovery left in `state`, or None.

    See LATE_COMPLETION_FROM: the store also checks that the lease is unchanged and that the lease
    expiry was the job's last transition.
    """
    state, event = JobStatus(state), Event(event)
    if state not in LATE_COMPLETION_FROM or event not in _LATE_OUTCOMES:
        return None
    if state is S.PAUSED and event in RERUN_EVENTS:
        return None  # recovery honoured a pause: the attempt's retry must not undo it
    return target(event)


def honour_requests(event: Event | str, status: JobStatus | str, *, pause_requested: bool,
                    cancel_requested: bool) -> Event:
    """The event an attempt's outcome becomes, given the operator requests standing on the job.

    The one rule that keeps control requests from being lost (docs/concepts.md, "Control requests
    and outcomes"):
    - A stop or cancel (the job is STOPPING) ends the job as the operator asked, whatever the
      attempt did, except that a success still ends SUCCEEDED (the work is done) and an ambiguous
      side effect still goes to REVIEW (a person must look): the STOPPING rows of TRANSITIONS. A
      cancel requested after a stop upgrades the stop. Recovery (the worker is gone) force-stops
      or force-cancels.

    The store enforces the same rule in its guards (an outcome this function would change is
    refused, and the caller re-decides with the job's current requests), so a request that lands
    between the decision and the write is never lost.
    - A pause (RUNNING with pause_requested) wins over anything that would run the job again
      (a retry, a lease expiry that re-queues): the job is PAUSED instead, its checkpoint kept.
      A success, a permanent failure, review, dead letter or halt end the job as they say.
    """
    event, status = Event(event), JobStatus(status)
    if status is S.STOPPING:
        if (status, event) in TRANSITIONS:
            return CANCEL_UPGRADES.get(event, event) if cancel_requested else event
        if event in WORKER_OUTCOMES:
            return E.CANCEL_OBSERVED if cancel_requested else E.STOP_OBSERVED
        return E.FORCE_CANCEL if cancel_requested else E.FORCE_STOP
    if status is S.RUNNING and pause_requested and event in RERUN_EVENTS:
        return E.PAUSE_OBSERVED
    return event
