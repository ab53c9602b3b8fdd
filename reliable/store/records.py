"""Typed, immutable views of the store's rows, and the inputs the store takes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..options import own_queue
from ..states import JobStatus
from .frozen import built, field_names

__all__ = ["Attempt", "Claim", "Effect", "ErrorInfo", "FanIn", "Job", "JobEvent", "LeaseStatus", "NewJob", "NodeResult",
           "home_queue_of"]


def home_queue_of(queue: str, message: Any) -> str:
    """`Job.home_queue` from a job row's `queue` and its stored `message` (a dict, or its JSON text),
    for a reader that selects those columns only: the message's own queue (`options.own_queue`),
    else `queue` (a job the middleware did not register)."""
    if isinstance(message, str):
        message = _loads(message)
    registered = message.get("queue_name") if isinstance(message, dict) else None
    return own_queue(str(registered), message.get("options")) if registered else queue


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@dataclass(frozen=True)
class NewJob:
    """What a producer registers before the message is published."""

    job_id: str
    queue: str
    actor: str
    message: Mapping[str, Any]
    owner: str | None = None
    workflow_id: str | None = None
    trace_id: str | None = None
    parent_job_id: str | None = None
    checkpoint_schema: int | None = None
    delay: float | None = None  # seconds until the job is due (Dramatiq's eta)


@dataclass
class FanIn:
    """A group member's arrival at its group's completion barrier, committed with its success.

    When this arrival clears the barrier, `jobs` (the group's completion callbacks) are registered
    in the same transaction and `StateStore.finish` sets `cleared`; `known` is False when the
    store holds no such barrier (the group was created without it: Dramatiq's barrier decides).
    """

    barrier_id: str
    jobs: Sequence[NewJob]
    cleared: bool = False
    known: bool = True


@dataclass(frozen=True)
class NodeResult:
    """A workflow node's result, stored in the transaction that commits its job's success: JSON
    text, or None with a note saying why it could not be kept (too large, not JSON)."""

    job_id: str
    result: str | None
    note: str | None = None


@dataclass(frozen=True)
class ErrorInfo:
    """What a failed attempt records about its error."""

    error_class: str | None
    error_type: str | None
    message: str | None
    traceback: str | None = None  # formatted, masked and bounded by the caller (reliable.tracebacks)


@dataclass(frozen=True)
class Job:
    """The current projection of one job."""

    job_id: str
    queue: str
    actor: str
    message: dict[str, Any]
    status: JobStatus
    previous_status: JobStatus | None
    version: int
    lease_id: int
    worker_id: str | None
    lease_expires_at: float | None
    attempt: int
    attempt_id: str | None
    started_at: float | None
    finished_at: float | None
    retry_count: int
    retry_at: float | None
    scheduled_at: float | None
    dispatched_at: float | None
    pause_requested: bool
    stop_requested: bool
    cancel_requested: bool
    stop_requested_at: float | None
    checkpoint: Any
    checkpoint_version: int
    checkpoint_schema: int | None
    checkpoint_at: float | None
    owner: str | None
    workflow_id: str | None
    trace_id: str | None
    parent_job_id: str | None
    last_error_class: str | None
    last_error_type: str | None
    last_error_message: str | None
    created_at: float
    updated_at: float
    #: What a delivery must carry to claim the job (reliable.delivery_digest); None: not checked.
    delivery_digest: str | None = None

    @property
    def home_queue(self) -> str:
        """The queue the job was enqueued on: its contract, its policy rules and the operators' rights
        follow it. `queue` is the queue it waits on now, another one after a routed retry
        (docs/policies.md, "Retry routing")."""
        return home_queue_of(self.queue, self.message)

    def as_dict(self) -> dict[str, Any]:
        """The job as a plain dict (JSON-ready: states as their names)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["status"] = self.status.value
        out["previous_status"] = self.previous_status.value if self.previous_status else None
        return out

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Job:
        """Build a Job from a `reliable_jobs` row mapping."""
        values = dict(row)
        values["message"] = _loads(values["message"])
        values["checkpoint"] = _loads(values["checkpoint"])
        values["status"] = JobStatus(values["status"])
        prev = values["previous_status"]
        values["previous_status"] = JobStatus(prev) if prev else None
        for flag in ("pause_requested", "stop_requested", "cancel_requested"):
            values[flag] = bool(values[flag])
        values.setdefault("delivery_digest", None)
        return built(cls, values, _JOB_FIELDS)


_JOB_FIELDS = field_names(Job)


@dataclass(frozen=True)
class JobEvent:
    """One row of the append-only event history."""

    id: int
    job_id: str
    at: float
    event: str
    from_status: str | None
    to_status: str | None
    version: int | None
    attempt: int | None
    attempt_id: str | None
    lease_id: int | None
    worker_id: str | None
    queue: str | None
    actor: str | None
    workflow_id: str | None
    trace_id: str | None
    error_class: str | None
    error_type: str | None
    error_message: str | None
    retry_count: int | None
    checkpoint: Any
    operator: str | None
    reason: str | None
    host: str | None
    detail: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None  # a failed attempt's, bounded and masked

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> JobEvent:
        """Build a JobEvent from a `reliable_job_events` row mapping."""
        values = dict(row)
        values["checkpoint"] = _loads(values["checkpoint"])
        values["detail"] = _loads(values["detail"]) or {}
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The event as a plain dict (JSON-ready)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Claim:
    """What a worker gets when its claim wins: the lease and where to resume from."""

    job: Job

    @property
    def lease_id(self) -> int:
        """The fencing token: every write of this attempt is conditional on it."""
        return self.job.lease_id

    @property
    def attempt_id(self) -> str:
        """The id of the attempt this claim started."""
        assert self.job.attempt_id is not None
        return self.job.attempt_id


@dataclass(frozen=True)
class LeaseStatus:
    """A heartbeat's answer for one lease the worker still holds."""

    job_id: str
    lease_id: int
    status: JobStatus
    pause_requested: bool
    stop_requested: bool
    cancel_requested: bool
    lease_expires_at: float
    stop_requested_at: float | None = None


@dataclass(frozen=True)
class Attempt:
    """One attempt at running a job."""

    attempt_id: str
    job_id: str
    attempt: int
    lease_id: int
    worker_id: str | None
    started_at: float
    ended_at: float | None
    outcome: str | None
    error_class: str | None
    error_type: str | None
    error_message: str | None
    checkpoint_version_start: int | None


@dataclass(frozen=True)
class Effect:
    """The result of recording an operation key: applied now, or a replay that was detected."""

    job_id: str
    op_key: str
    applied: bool  # True the first time; False when the key had already been recorded
    duplicates: int
    attempt_id: str | None
    #: The first record of a key that an earlier attempt may have applied without recording it.
    possible_duplicate: bool = False
