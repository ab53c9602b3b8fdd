"""Transitions: the generic compare-and-set an operator's command or recovery applies to a job.

Operators and recovery read what they act on: the class derives from Reads and Sweeps, so a caller
typed with it (control, recovery, bulk operations) has those too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from ..errors import JobNotFound, LeaseLost, TransitionRefused
from ..states import ACTIVE_STATES, Event, JobStatus
from .json_text import _detail
from .reads import Reads
from .records import Job
from .routing import route_write
from .sweeps import Sweeps
from .writes import event_write, transition_write

__all__ = ["OperatorTransitions"]


class OperatorTransitions(Sweeps, Reads):
    """Operators' and recovery's transitions (strict on the version read, or on an expired lease),
    and the claim to re-publish a stale PENDING job's message."""

    def transition(self, job_id: str, event: Event, *, expected_version: int | None = None,
                   lease_id: int | None = None, lease_expired: bool = False, operator: str | None = None,
                   reason: str | None = None, detail: Mapping[str, Any] | None = None,
                   dispatch: bool | None = None, retry_delay: float | None = None,
                   checkpoint_schema: int | None = None, host: str | None = None,
                   queue: str | None = None) -> Job:
        """Apply `event` to the job as a compare-and-set; raise TransitionRefused if it lost.

        `expected_version` (and `lease_id`) make it a strict compare-and-set on what the caller
        read. `lease_expired=True` adds "and the lease has expired by the store's clock" (recovery).
        For transitions to PENDING, `dispatch=True` stamps dispatched_at (the caller publishes the
        message right after); otherwise it is left unset so the sweeper publishes it. `retry_delay`
        is required entering RETRY_WAIT; `checkpoint_schema` records the schema a restart starts with.
        `queue`: the queue the job waits on after it (an operator's restart sends a routed job back
        to its own queue), moved in the same transaction with a `routed` event (`route_write`).
        """
        self.check_schema()
        write = transition_write(
            job_id, event, lease_id=lease_id, version=expected_version, expired_only=lease_expired,
            delay=retry_delay, dispatch=dispatch, checkpoint_schema=checkpoint_schema, operator=operator,
            reason=reason, host=host or (self.host if operator is not None else None), detail=_detail(detail))
        written: list[tuple[dict[str, Any], dict[str, Any]]] = []
        with self._sql.transaction() if queue is not None else contextlib.nullcontext() as tx:
            result = self._sql.write(write, tx)
            if result is not None:
                written.append(result)
                route = route_write(result[0], queue, operator=operator, host=write.host) if queue else None
                if route is not None and tx is not None:
                    written.append(self._write_in(tx, route))
        if result is None:
            current = self.find(job_id)
            if current is None:
                raise JobNotFound(job_id)
            if lease_id is not None and current.lease_id != lease_id:
                raise LeaseLost(job_id, lease_id, current_lease_id=current.lease_id, status=current.status.value)
            if expected_version is not None and current.version != expected_version:
                why = f"version {current.version} != expected {expected_version}"
            elif write.unpaused_only and current.pause_requested:
                why = "a pause is requested"
            elif lease_expired and current.status in ACTIVE_STATES:
                why = "the lease has not expired"
            else:
                why = f"not allowed from {current.status.value}"
            raise TransitionRefused(f"job {job_id}: {event.value} refused ({why})", job_id=job_id,
                                    status=current.status.value, event=event.value)
        for each in written:
            self._emit_one(each)
        return Job.from_row(written[-1][0])

    def mark_dispatched(self, job: Job, *, worker_id: str | None = None, queue: str | None = None) -> bool:
        """Claim the right to re-publish a PENDING job's message (compare-and-set on dispatched_at).

        Several sweepers may see the same stale job; only the one whose update wins publishes.
        `worker_id`: the process that re-publishes, named in the `redispatched` event. `queue`: the
        queue it waits on from now (a lane the policy no longer routes to sends it home), moved in
        the same transaction with a `routed` event (`route_write`).
        """
        self.check_schema()
        written: list[tuple[dict[str, Any], dict[str, Any]]] = []
        with self._sql.transaction() as tx:
            won = self._sql.mark_dispatched(tx, job.job_id, status=JobStatus.PENDING.value, version=job.version,
                                            dispatched_at=job.dispatched_at)
            if won:
                detail = _detail({"previous_dispatch": job.dispatched_at})
                written.append(self._write_in(tx, event_write(job.job_id, "redispatched", worker_id=worker_id,
                                                              detail=detail)))
                route = route_write(written[0][0], queue, worker_id=worker_id) if queue else None
                if route is not None:
                    written.append(self._write_in(tx, route))
        for each in written:
            self._emit_one(each)
        return won
