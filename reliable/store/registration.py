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
from .sqlrunner import Tx

__all__ = ["Registrations"]


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

    def register(self, job: NewJob) -> bool:
        """Insert a PENDING job and its `enqueued` event; False if the job_id already exists.

        An existing job registered with another actor, arguments or behaviour-choosing options
        (another delivery digest: reliable.delivery_digest) raises JobIdConflict; an identical
        re-send is de-duplicated (False).
        """
        return self.register_many([job]) == 1

    def register_many(self, new_jobs: Sequence[NewJob]) -> int:
        """Register several jobs in one transaction; return how many were new.

        JobIdConflict (nothing registered) when one of them reuses an existing job's id with
        another delivery digest, or two of them share an id with different digests.
        """
        if not new_jobs:
            return 0
        self.check_schema()
        rows = [self._new_job_row(job) for job in new_jobs]
        _conflicts_within(rows)
        details = [_detail({"delay": job.delay} if job.delay else None) for job in new_jobs]
        with self._sql.transaction() as tx:
            _, events = self._sql.register(rows, details, tx)
            if len(events) < len(rows):  # some existed: only then is anything read back
                self._check_resent(tx, rows, events)
        self._emit_registered(rows, events)
        return len(events)

    def _check_resent(self, tx: Tx, rows: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]) -> None:
        """JobIdConflict when a row whose job existed already carries another delivery digest than
        that job (a job registered before digests were kept has none: never a conflict)."""
        fresh = {event["job_id"] for event in events}
        resent = [row for row in rows if row["job_id"] not in fresh]
        registered = self._sql.registered_digests(tx, [row["job_id"] for row in resent])
        for row in resent:
            actor, digest = registered.get(row["job_id"], (None, None))
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
        message = json.dumps(dict(job.message), default=str, separators=(",", ":"))
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
        details = [_detail({"delay": job.delay} if job.delay else None) for job in new_jobs]
        return rows, self._sql.register(rows, details, tx)[1]
