"""Registration: new jobs written PENDING with their `enqueued` events, an identical re-send de-duplicated.

Every registration passes here: producers (the middleware at enqueue), follow-ups and group members
committed with an outcome, workflows, schedules, and the features' units of work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..delivery_digest import message_digest
from ..errors import JobIdConflict, MessageRefused
from ..inputs import job_id_problem, message_size_problem
from ..states import JobStatus
from .core import StoreCore
from .json_text import _detail
from .records import NewJob
from .sqlrunner import Registered, Registering, Tx

__all__ = ["Registrations"]

# Built once: json.dumps with arguments builds an encoder per call.
_MESSAGE_JSON = json.JSONEncoder(default=str, separators=(",", ":"))


def _conflicts_within(rows: Sequence[Mapping[str, Any]]) -> None:
    """JobIdConflict when two rows of one registration share a job id with different digests."""
    seen: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        first = seen.setdefault(row["job_id"], row)
        if first["delivery_digest"] != row["delivery_digest"]:
            raise JobIdConflict(row["job_id"], differs="actor" if first["actor"] != row["actor"]
                                else "arguments or options", actor=row["actor"], registered_actor=first["actor"])


class Registrations(StoreCore):
    """Register jobs alone or inside another write's transaction; a conflicting id raises JobIdConflict."""

    def register(self, job: NewJob, *, timeout: float | None = None, synchronous: bool = True) -> bool:
        """Insert a PENDING job and its `enqueued` event; False if the job_id already exists.

        An existing job registered with another actor, arguments or behaviour-choosing options
        (another delivery digest: reliable.delivery_digest) raises JobIdConflict; an identical
        re-send is de-duplicated (False).

        On PostgreSQL with group commit the registrations of the process's threads that wait
        together share one statement and one commit (reliable/store/batching.py); `timeout` bounds
        the wait behind the others' batches (StoreUnavailable past it). `synchronous` False: the
        commit does not wait for its WAL flush (`synchronous_commit=off` for that transaction only;
        a batch waits unless all its sends said so). SQLite ignores both.
        """
        group = self._sql.registrations
        if group is None:
            return self.register_many([job], synchronous=synchronous) == 1
        self.check_schema()
        row = self._new_job_row(job)
        done = group.write(Registering(job.job_id, row, _enqueued_detail(job), synchronous), timeout)
        if done is None:  # never: every registration gets its row back
            raise RuntimeError(f"job {job.job_id}: the registration's batch gave no answer")
        self._check_resent([row], [done])
        if done.event is None:
            return False
        self._emit_registered([row], [done.event])
        return True

    def register_many(self, new_jobs: Sequence[NewJob], *, synchronous: bool = True) -> int:
        """Register several jobs in one transaction; return how many were new.

        JobIdConflict (nothing registered) when one of them reuses an existing job's id with
        another delivery digest, or two of them share an id with different digests.
        """
        if not new_jobs:
            return 0
        self.check_schema()
        rows = [self._new_job_row(job) for job in new_jobs]
        _conflicts_within(rows)
        with self._sql.transaction() as tx:
            done = self._sql.register(rows, [_enqueued_detail(job) for job in new_jobs], tx, synchronous=synchronous)
            self._check_resent(rows, done, tx)
        events = [each.event for each in done if each.event is not None]
        self._emit_registered(rows, events)
        return len(events)

    def _check_resent(self, rows: Sequence[Mapping[str, Any]], done: Sequence[Registered],
                      tx: Tx | None = None) -> None:
        """JobIdConflict when a row whose job existed already carries another delivery digest than
        that job (a job registered before digests were kept has none: never a conflict). The
        registration answered what it found; a job it could not see (registered by another
        transaction meanwhile) is read again."""
        resent = [(row, each) for row, each in zip(rows, done, strict=True) if each.event is None]
        if not resent:
            return
        unseen = [row["job_id"] for row, each in resent if each.actor is None]
        registered: dict[str, tuple[str, str | None]] = {}
        if unseen:
            if tx is not None:
                registered = self._sql.registered_digests(tx, unseen)
            else:
                with self._sql.single() as own:
                    registered = self._sql.registered_digests(own, unseen)
        for row, each in resent:
            actor, digest = (each.actor, each.digest) if each.actor is not None \
                else registered.get(row["job_id"], (None, None))
            if digest is not None and digest != row["delivery_digest"]:
                raise JobIdConflict(row["job_id"], differs="actor" if actor != row["actor"] else "arguments or options",
                                    actor=row["actor"], registered_actor=actor)

    def _emit_registered(self, rows: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]) -> None:
        if self._listeners:
            by_id = {row["job_id"]: row for row in rows}
            self._emit([self._record(e, {"dispatched_at": e["at"], **by_id.get(e["job_id"], {}),
                                         "scheduled_at": None}) for e in events])

    @staticmethod
    def _new_job_row(job: NewJob) -> dict[str, Any]:
        """The row of a new job; MessageRefused when its ids or its size break reliable.inputs' rules
        (every registration passes here: producers, follow-ups, workflows, schedules, the worker)."""
        for field, value in (("message_id", job.job_id), ("workflow_id", job.workflow_id),
                             ("parent_job_id", job.parent_job_id)):
            problem = job_id_problem(value) if value is not None or field == "message_id" else None
            if problem is not None:
                raise MessageRefused(field, problem, actor=job.actor)
        given = job.message
        message = _MESSAGE_JSON.encode(given if type(given) is dict else dict(given))
        if (problem := message_size_problem(len(message))) is not None:  # ASCII JSON: characters are bytes
            raise MessageRefused("size", problem, actor=job.actor)
        return {
            "job_id": job.job_id, "queue": job.queue, "actor": job.actor, "message": message,
            "status": JobStatus.PENDING.value, "delay": job.delay or 0.0, "owner": job.owner,
            "workflow_id": job.workflow_id, "trace_id": job.trace_id, "parent_job_id": job.parent_job_id,
            "checkpoint_schema": job.checkpoint_schema,
            # From the message as stored, decoded (what every re-publish of it delivers), for the
            # job's actor.
            "delivery_digest": message_digest({**json.loads(message), "actor_name": job.actor}),
        }

    def _register_in(self, tx: Tx, new_jobs: Sequence[NewJob]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Register `new_jobs` inside `tx`: their rows and `enqueued` events, to emit after the commit."""
        rows = [self._new_job_row(job) for job in new_jobs]
        done = self._sql.register(rows, [_enqueued_detail(job) for job in new_jobs], tx)
        return rows, [each.event for each in done if each.event is not None]


def _enqueued_detail(job: NewJob) -> str | None:
    """The `enqueued` event's detail: the job's delay, if it has one."""
    return _detail({"delay": job.delay}) if job.delay else None
