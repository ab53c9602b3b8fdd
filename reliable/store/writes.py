"""What each write to a job row does: derived once from `reliable.states`, pure (no I/O).

Every change to a job row (a transition of any caller, a checkpoint, a plain event) is ONE
`JobWrite`, executed by the single `write_job` query of each dialect (reliable/store/sql/*.sql)
together with its event row. The worker's hot path, operator commands and recovery all build their
writes here, so what a transition sets cannot differ between callers:

- guard: the job is in one of `states.sources(event)`; plus the caller's fences (lease_id for a
  worker, version for whoever read the row first, "lease expired by the database's clock" for
  recovery, the delivery's digest for a worker's claim); an outcome in RERUN_EVENTS also requires
  that no pause is requested, and a stop outcome that a cancel upgrades (CANCEL_UPGRADES) that no
  cancel is requested.
- lease: a claim takes a new lease (lease_id + 1, attempt + 1, worker, expiry); on PostgreSQL
  the new lease_id is at least the floor of the server's WAL timeline, so a promoted standby never
  reissues a token (docs/postgresql-failover.md); any target outside ACTIVE_STATES releases it
  (expiry, control flags and stop time cleared).
- finished_at: set entering AT_REST_STATES, cleared by any other transition.
- retry_at: set (now + delay) entering RETRY_WAIT, cleared by any other transition;
  scheduled_at: when the job is due, set entering PENDING or RETRY_WAIT;
  dispatched_at: entering PENDING, "now" when the caller publishes, otherwise cleared so the
  sweeper publishes (the worker's retry publishes its delayed message itself).
- retry_count: counted entering RETRY_WAIT, reset by restart and requeue (a fresh budget).
- a returned claim (RETURNED_CLAIMS): the attempt counter goes back by one (no attempt was
  spent), the lease is released, dispatched_at is kept (the message is still in the broker).
- attempts: no row of their own. The claim's event row (entering an active state) starts one and
  the event of the transition out of an active state ends it; reliable/store/job_history.py
  derives a job's attempts from those rows. A fast-path commit (FAST_SUCCEED: a lease taken and
  released in the same write) is no attempt there: its event row carries the attempt, its worker
  and its outcome.
- text: every free text a write carries (`FREE_TEXT`: an error's class, type and message, a
  traceback, a reason, an operator's and a host's name) passes `reliable.inputs.storable`, so a
  text either database refuses (a lone surrogate from a file name in an exception message, a NUL)
  is stored escaped and bounded instead of making the write raise.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..inputs import storable
from ..states import (
    ACTIVE_STATES,
    AT_REST_STATES,
    CANCEL_UPGRADES,
    ONE_WRITE_RUNS,
    RERUN_EVENTS,
    RETURNED_CLAIMS,
    Event,
    JobStatus,
    sources,
    target,
)
from .frozen import field_names

__all__ = ["FREE_TEXT", "FRESH_BUDGET", "NOT_FREE_TEXT", "RULE_FIELDS", "JobWrite", "event_write", "transition_write"]

S = JobStatus
E = Event

#: Operator requests: the flag each one raises on a running job.
_REQUESTS: Mapping[Event, str] = {E.PAUSE_REQUEST: "pause", E.STOP_REQUEST: "stop", E.CANCEL_REQUEST: "cancel"}
#: Operator commands that give the job a fresh retry budget.
FRESH_BUDGET: frozenset[Event] = frozenset({E.RESTART, E.REQUEUE})
#: Operator commands that run the job from the beginning.
_FROM_SCRATCH: frozenset[Event] = frozenset({E.RESTART})


@dataclass(frozen=True)
class JobWrite:
    """The parameters of one `write_job` execution (names match the SQL's parameters)."""

    job_id: str
    event: str
    # guard
    sources: list[str] | None
    lease_id: int | None
    version: int | None
    expired_only: bool
    due_only: bool
    unpaused_only: bool
    uncancelled_only: bool
    # row
    to_status: str | None
    transition: bool
    claim: bool
    release: bool
    unclaim: bool  # a claim handed back unused: the attempt counter goes back by one
    lease_ttl: float | None
    at_rest: bool
    delay: float | None
    schedule: bool
    dispatch: str  # keep | now | clear
    retries: str  # keep | count | reset
    request_pause: bool
    request_stop: bool
    request_cancel: bool
    checkpoint_op: str  # keep | save | clear
    checkpoint: str | None
    checkpoint_schema: int | None
    worker_id: str | None
    attempt_id: str | None
    has_error: bool
    error_class: str | None
    error_type: str | None
    error_message: str | None
    # the event row's own fields
    event_worker_id: str | None
    event_lease_id: int | None
    operator: str | None
    reason: str | None
    host: str | None
    detail: str | None
    traceback: str | None = None  # a failed attempt's, bounded and masked (error["traceback"])
    route_queue: str | None = None  # the queue the job waits on from now (a routed retry), None: unchanged
    # guard: the claiming delivery's digest must equal the job's (a job without one is not checked)
    delivery_digest: str | None = None
    # what the caller uses of the written row: True, the event record alone (StoreCore._record: a
    # submitted success's listeners); the row leaves out the job's other columns (PostgreSQL)
    slim: bool = False

    def params(self, now: float | None) -> dict[str, Any]:
        """The query parameters, with `now` (None: the database's clock)."""
        values = dict(self.__dict__)  # the fields (a plain dataclass keeps them there): one copy, no lookups
        values["now"] = now
        return values


_FIELDS = field_names(JobWrite)

#: The text fields of a JobWrite whose value comes from outside reliable's own vocabulary (an
#: exception, a person, a host): each passes `reliable.inputs.storable` in the constructors below.
FREE_TEXT: tuple[str, ...] = ("error_class", "error_type", "error_message", "traceback", "operator", "reason", "host")
#: The other text fields, and why they need no escaping (tests/store/test_storable_text.py checks
#: that every text field is in exactly one of the two lists, so a new one cannot be forgotten).
NOT_FREE_TEXT: Mapping[str, str] = {
    "job_id": "the job id rule (reliable.inputs.job_id_problem) holds at registration and delivery",
    "event": "an event name of reliable's own",
    "dispatch": "keep, now or clear", "retries": "keep, count or reset", "checkpoint_op": "keep, save or clear",
    "to_status": "a JobStatus", "worker_id": "this process's own id", "event_worker_id": "this process's own id",
    "attempt_id": "hex digits", "delivery_digest": "hex digits",
    "detail": "JSON text with ASCII escapes", "checkpoint": "JSON text with ASCII escapes",
    "route_queue": "a queue name the broker declared",
}


def _texts(**texts: str | None) -> dict[str, str | None]:
    """The free texts of a write, each as the store can hold it (`storable`)."""
    return {name: storable(value) for name, value in texts.items()}
_NO_ERROR: Mapping[str, str | None] = {}


def transition_write(
    job_id: str, event: Event, *, lease_id: int | None = None, version: int | None = None,
    expired_only: bool = False, worker_id: str | None = None, attempt_id: str | None = None,
    lease_ttl: float | None = None, delay: float | None = None, dispatch: bool | None = None,
    error: Mapping[str, str | None] | None = None, checkpoint_schema: int | None = None,
    from_states: Iterable[JobStatus] | None = None, operator: str | None = None, reason: str | None = None,
    host: str | None = None, detail: str | None = None, delivery_digest: str | None = None, slim: bool = False,
) -> JobWrite:
    """The write of `event` on a job: everything it sets follows from the transition table.

    `from_states` narrows the guard (a late completion names the one state it found); the default
    is every state the table allows `event` from. `dispatch` says whether the caller publishes the
    job's message right after (True), or leaves it to the sweeper (False); None keeps the rule's
    default. `delay` is required entering RETRY_WAIT. `delivery_digest` (a claim): the write
    matches only a job registered with that digest, or with none (reliable.delivery_digest). `slim`:
    the caller uses only the event record of the row written (`JobWrite.slim`).
    """
    event = Event(event)
    base = _base(event, None if from_states is None else frozenset(from_states), dispatch)
    claim, release = base["claim"], base["release"]
    if claim and (worker_id is None or attempt_id is None or (lease_ttl is None and not release)):
        raise ValueError(f"{event.value}: a claim needs worker_id, attempt_id and lease_ttl")
    entering_retry_wait = base["to_status"] == S.RETRY_WAIT.value
    if entering_retry_wait and delay is None:
        raise ValueError(f"{event.value}: entering RETRY_WAIT needs a delay")
    values = dict(base)  # the rule and every field no caller sets here: built once per rule
    values.update(job_id=job_id, lease_id=lease_id, version=version, expired_only=expired_only,
                  checkpoint_schema=checkpoint_schema, has_error=error is not None, event_worker_id=worker_id,
                  detail=detail, delivery_digest=delivery_digest, slim=slim)
    if claim:
        values.update(lease_ttl=None if release else lease_ttl, worker_id=worker_id, attempt_id=attempt_id)
    if entering_retry_wait:
        values["delay"] = delay
    # The worker's own writes carry no free text (no error, operator, reason or host): the base's Nones stand.
    if error is not None or operator is not None or reason is not None or host is not None:
        err = error or _NO_ERROR
        values.update(_texts(error_class=err.get("error_class"), error_type=err.get("error_type"),
                             error_message=err.get("message"), traceback=err.get("traceback"), operator=operator,
                             reason=reason, host=host))
    made: JobWrite = object.__new__(JobWrite)  # `built` without its check: `_base` names every field, once
    made.__dict__.update(values)
    return made


#: The fields `transition_write` sets from its arguments, None (or False) unless it is given them.
_PER_WRITE: Mapping[str, Any] = {
    "job_id": None, "lease_id": None, "version": None, "expired_only": False, "lease_ttl": None, "delay": None,
    "checkpoint": None, "checkpoint_schema": None, "worker_id": None, "attempt_id": None, "has_error": False,
    "event_worker_id": None, "event_lease_id": None, "detail": None, "route_queue": None, "delivery_digest": None,
    "slim": False,
    **dict.fromkeys(FREE_TEXT),
}


@functools.cache
def _base(event: Event, from_states: frozenset[JobStatus] | None, dispatch: bool | None) -> Mapping[str, Any]:
    """Every field of a `transition_write` of `event`: its rule's, the others None or False (the
    function overlays what it is given). Derived once per (event, guard, dispatch): a worker builds
    two writes per job, and the dict of 44 fields plus seven text checks was most of their cost."""
    base = {**_rule(event, from_states, dispatch), **_PER_WRITE}
    if base.keys() != _FIELDS:
        raise RuntimeError(f"transition_write's base misses or adds fields: {sorted(base.keys() ^ _FIELDS)}")
    return base


@functools.cache
def _rule(event: Event, from_states: frozenset[JobStatus] | None, dispatch: bool | None) -> dict[str, Any]:
    """What `event` writes whatever the job and caller: derived once per (event, guard, dispatch)."""
    to = target(event)
    allowed = sources(event) if from_states is None else from_states
    claim = (to in ACTIVE_STATES and not (sources(event) & ACTIVE_STATES)) or event in ONE_WRITE_RUNS
    release = to not in ACTIVE_STATES
    if event in RETURNED_CLAIMS:
        dispatch_mode = "keep"  # its message is still in the broker (requeued, or on its way to us)
    elif to is S.PENDING:
        dispatch_mode = "now" if dispatch else "clear"
    elif to is S.RETRY_WAIT:
        dispatch_mode = "now" if dispatch or (dispatch is None and event is E.RETRY) else "clear"
    else:
        dispatch_mode = "keep"
    if to is S.RETRY_WAIT:
        retries = "count"
    elif event in FRESH_BUDGET:
        retries = "reset"
    else:
        retries = "keep"
    request = _REQUESTS.get(event)
    return {
        "event": event.value, "sources": sorted(s.value for s in allowed), "due_only": claim,
        "unpaused_only": event in RERUN_EVENTS, "uncancelled_only": event in CANCEL_UPGRADES,
        "to_status": to.value, "transition": True, "claim": claim,
        "release": release, "unclaim": event in RETURNED_CLAIMS, "at_rest": to in AT_REST_STATES,
        "schedule": to in (S.PENDING, S.RETRY_WAIT),
        "dispatch": dispatch_mode, "retries": retries, "request_pause": request == "pause",
        "request_stop": request == "stop", "request_cancel": request == "cancel",
        "checkpoint_op": "clear" if event in _FROM_SCRATCH else "keep",
    }


#: The fields of a JobWrite its rule sets (`_rule`, and `event_write` for a write that changes no
#: state): the same for every write of one event with one guard, so a batch sends each rule once.
RULE_FIELDS: tuple[str, ...] = tuple(_rule(E.CLAIM, None, None))


def event_write(
    job_id: str, event: str, *, lease_id: int | None = None, active_only: bool = False,
    checkpoint: str | None = None, lease_ttl: float | None = None, worker_id: str | None = None,
    error: Mapping[str, str | None] | None = None, operator: str | None = None, reason: str | None = None,
    host: str | None = None, detail: str | None = None,
) -> JobWrite:
    """A write that changes no state: an event on the job, or a checkpoint (with `checkpoint`).

    A checkpoint is fenced (`lease_id`, `active_only`), renews the lease by `lease_ttl` and does
    not bump the version: an operator's compare-and-set never races a checkpoint.
    """
    saving = event == "checkpoint"
    return JobWrite(
        job_id=job_id, event=event,
        sources=sorted(s.value for s in ACTIVE_STATES) if active_only else None,
        lease_id=lease_id if saving or active_only else None, version=None, expired_only=False,
        due_only=False, unpaused_only=False, uncancelled_only=False, to_status=None, transition=False,
        claim=False, release=False, unclaim=False,
        lease_ttl=lease_ttl, at_rest=False, delay=None, schedule=False, dispatch="keep", retries="keep",
        request_pause=False, request_stop=False, request_cancel=False,
        checkpoint_op="save" if saving else "keep", checkpoint=checkpoint, checkpoint_schema=None,
        worker_id=None, attempt_id=None, has_error=False,  # the row keeps its last error
        event_worker_id=worker_id, event_lease_id=lease_id, detail=detail, slim=False,
        **_texts(error_class=(error or {}).get("error_class"), error_type=(error or {}).get("error_type"),
                 error_message=(error or {}).get("message"), traceback=(error or {}).get("traceback"),
                 operator=operator, reason=reason, host=host),
    )
