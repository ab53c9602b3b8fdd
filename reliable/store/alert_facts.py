"""What the alert evaluator (`reliable.alerts`) knows of the store: fact requests and the rows answering them.

A rule asks for facts with hashable requests (so rules that need the same facts share one query);
`reliable.store.alert_queries` answers them from the store, tests answer them from memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ATTEMPT_FAILURE_EVENTS",
    "DEAD_EVENTS",
    "FAILURE_EVENTS",
    "LEASE_EXPIRY_EVENTS",
    "SUCCESS_EVENTS",
    "UNCOUNTED_EVENTS",
    "EventCount",
    "EventCounts",
    "Facts",
    "GroupAge",
    "GroupAges",
    "JobFact",
    "JobSample",
    "ScheduleFact",
    "ScheduleSlots",
    "StaleJobs",
    "check_counted",
]

#: The event kinds no query counts by kind over a window: every job writes them (a claim per attempt,
#: a registration, each checkpoint save), and a job's own events are read through (job_id, id).
#: On PostgreSQL the (event, at) index leaves them out (migration 0019): one entry fewer per claim.
UNCOUNTED_EVENTS: tuple[str, ...] = ("checkpoint", "claim", "enqueued")


def check_counted(events: Sequence[str]) -> None:
    """Refuse a count or sample of events over a window that no index serves: one that names no
    kind (there is no index on the time alone) or names an uncounted kind (UNCOUNTED_EVENTS)."""
    if not events:
        raise ValueError("name the event kinds to count: no index serves every kind over a window")
    uncounted = sorted(set(events) & set(UNCOUNTED_EVENTS))
    if uncounted:
        raise ValueError(f"{', '.join(uncounted)} events are not indexed by kind (UNCOUNTED_EVENTS)")


SUCCESS_EVENTS = ("succeed", "fast_succeed")
#: A job that ended badly (the error-budget "bad events").
FAILURE_EVENTS = ("fail", "dead_letter", "need_review")
#: An attempt that did not succeed, retried or not.
ATTEMPT_FAILURE_EVENTS = ("retry_scheduled", "fail", "dead_letter", "need_review")
DEAD_EVENTS = ("dead_letter", "lease_expired_dead")
LEASE_EXPIRY_EVENTS = ("lease_expired", "lease_expired_backoff", "lease_expired_review", "lease_expired_dead")


@dataclass(frozen=True)
class StaleJobs:
    """Jobs in `states` whose clock (`basis`) is older than `older_than` seconds.

    basis "state": time in the state (RUNNING: started_at; STOPPING: stop_requested_at; PAUSED:
    updated_at). basis "checkpoint": the last checkpoint (or the start when there is none).
    """

    states: tuple[str, ...]
    older_than: float
    basis: str = "state"
    limit: int = 50


@dataclass(frozen=True)
class GroupAges:
    """Per queue: how many jobs in `state` are older than `older_than`, and the oldest one's time.

    The clock per state: PENDING: scheduled_at (or created_at); REVIEW: updated_at; RETRY_WAIT: retry_at.
    """

    state: str
    older_than: float


@dataclass(frozen=True)
class EventCounts:
    """Events of the given kinds within the last `window` seconds, per (queue, actor, event).

    `events` names at least one kind, none of UNCOUNTED_EVENTS (check_counted); `detail_contains`
    keeps events whose detail has that text, `detail_lacks` those whose detail does not (or that
    have none); a non-empty `still_in` keeps events of jobs whose status is one of those states now
    (so an alert on jobs that went DEAD resolves once they are requeued, not when the window has
    passed).
    """

    events: tuple[str, ...]
    window: float
    detail_contains: str | None = None
    still_in: tuple[str, ...] = ()
    detail_lacks: str | None = None

    def __post_init__(self) -> None:
        check_counted(self.events)


@dataclass(frozen=True)
class JobFact:
    """One job, as much as alerts need."""

    job_id: str
    queue: str
    actor: str
    status: str
    since: float  # when the clock the rule measures started (see StaleJobs)
    owner: str | None = None
    attempt: int = 0
    attempt_id: str | None = None
    checkpoint: str | None = None  # JSON text, truncated
    checkpoint_at: float | None = None
    last_error_class: str | None = None
    last_error_message: str | None = None
    trace_id: str | None = None


@dataclass(frozen=True)
class GroupAge:
    """The answer to GroupAges for one queue."""

    queue: str
    count: int
    oldest: float
    owner: str | None = None


@dataclass(frozen=True)
class EventCount:
    """The answer to EventCounts for one (queue, actor, event)."""

    queue: str
    actor: str
    event: str
    count: int
    owner: str | None = None


@dataclass(frozen=True)
class JobSample:
    """How to find a few jobs behind a grouped alert (for its runbook): by state or by recent events."""

    queue: str | None
    actor: str | None = None
    states: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    since: float | None = None
    detail_contains: str | None = None
    still_in: tuple[str, ...] = ()  # with events: only jobs in these states now
    owner: str | None = None  # with states: only jobs of this owner ("unowned": jobs without one)

    def __post_init__(self) -> None:
        if not self.states:
            check_counted(self.events)


@dataclass(frozen=True)
class ScheduleSlots:
    """Schedules (not paused) whose next slot is more than `late_by` past due (the facts carry each
    one's misfire grace, which the evaluator adds), and the slots fired within the last `window`
    seconds whose job ended FAILED or DEAD (reliable.schedules)."""

    late_by: float
    window: float


@dataclass(frozen=True)
class ScheduleFact:
    """The answer to ScheduleSlots for one schedule: its overdue next slot, and its failed slots' jobs."""

    schedule: str
    actor: str
    queue: str
    grace: float
    overdue_slot: float | None = None
    failed: tuple[JobFact, ...] = ()
    owner: str | None = None


@dataclass
class Facts:
    """Answers to fact requests, and the evaluation time."""

    now: float
    answers: dict[Any, Sequence[Any]] = field(default_factory=dict)

    def stale(self, request: StaleJobs) -> Sequence[JobFact]:
        """The answer to a StaleJobs request (empty when not asked)."""
        return self.answers.get(request, ())

    def ages(self, request: GroupAges) -> Sequence[GroupAge]:
        """The answer to a GroupAges request."""
        return self.answers.get(request, ())

    def counts(self, request: EventCounts) -> Sequence[EventCount]:
        """The answer to an EventCounts request."""
        return self.answers.get(request, ())

    def schedules(self, request: ScheduleSlots) -> Sequence[ScheduleFact]:
        """The answer to a ScheduleSlots request."""
        return self.answers.get(request, ())

    @classmethod
    def of(cls, now: float, answers: Mapping[Any, Sequence[Any]]) -> Facts:
        """Facts from a mapping of request -> rows."""
        return cls(now, dict(answers))
