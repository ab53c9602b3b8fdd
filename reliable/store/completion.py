"""Completion: the worker ends an attempt (fenced by its lease) with what follows it, in one transaction.

The outcome honours the control requests standing on the job (reliable.states.honour_requests), a
late completion after recovery expired the lease still commits when nobody claimed the job since
(reliable.states.late_target), and a reply lost after the commit is found again by a retry. The jobs
that follow the outcome (pipeline steps, callbacks, a cleared group's), a group member's arrival at
its barrier, a workflow node's result and a retry's queue are written with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import select

from ..errors import JobNotFound
from ..states import ACTIVE_STATES, Event, JobStatus, honour_requests, late_target, target
from .json_text import _detail, _truncate
from .records import ErrorInfo, FanIn, Job, NewJob, NodeResult
from .registration import Registrations
from .routing import route_write
from .schema import barriers, job_events
from .sqlrunner import Tx
from .writes import JobWrite, transition_write

__all__ = ["WorkerCompletion"]

#: How many times a worker's outcome is re-decided against the job's current requests (a pause,
#: a stop and a cancel may each land between two tries, and then the write itself).
_OUTCOME_ROUNDS = 4


class WorkerCompletion(Registrations):
    """The worker's outcome of an attempt and the completion barriers of groups."""

    def finish(self, job_id: str, lease_id: int, event: Event, *, worker_id: str | None = None,
               error: ErrorInfo | None = None, retry_delay: float | None = None,
               detail: Mapping[str, Any] | None = None,
               follow_ups: Callable[[JobStatus], Sequence[NewJob]] | None = None,
               fan_in: FanIn | None = None, node_result: NodeResult | None = None,
               queue: str | None = None) -> Job:
        """End the attempt holding `lease_id` with `event` (succeed, fail, retry, review, ...).

        Fenced by the lease: a worker whose lease was reassigned gets LeaseLost, its result is
        discarded and a `stale_commit_rejected` event is recorded. Control requests standing on the
        job are honoured (`reliable.states.honour_requests`): e.g. a retryable failure of a job
        asked to pause ends PAUSED; the returned job says where it ended. A worker whose lease was
        expired while it could not reach the store still commits if nobody claimed the job since
        (`reliable.states.late_target`).

        `follow_ups(status)` names the jobs that follow the attempt if it ends in `status` (the next
        pipeline step, callbacks): they are registered PENDING in the same transaction as the
        outcome, so a crash right after the commit cannot lose them (the sweeper publishes them).
        `fan_in`: a group member's arrival at its completion barrier, counted in the transaction
        that commits its success (see FanIn). `node_result`: a workflow node's result, stored with
        its success. `queue`: the queue a retry waits on (a routed retry); when the job ends
        RETRY_WAIT and waits on another queue, it moves there with a `routed` event in the same
        transaction (`route_write`), and the job returned names it.
        """
        info = None if error is None else {"error_class": error.error_class, "error_type": error.error_type,
                                           "message": _truncate(error.message), "traceback": error.traceback}
        extra: dict[str, Any] = dict(detail or {})
        if retry_delay is not None and event is Event.RETRY:
            extra["delay"] = retry_delay
        self.check_schema()
        requested = event
        tried: set[str] = set()
        for _ in range(_OUTCOME_ROUNDS):
            tried.add(event.value)
            write = transition_write(
                job_id, event, lease_id=lease_id, worker_id=worker_id, error=info,
                delay=retry_delay if target(event) is JobStatus.RETRY_WAIT else None,
                detail=_detail(extra))
            result = self._write_following(write, follow_ups, fan_in, node_result, queue)
            if result is not None:
                break
            current = self.find(job_id)
            if current is None:
                raise JobNotFound(job_id)
            if current.lease_id != lease_id:
                raise self._stale(job_id, lease_id, event.value, worker_id)
            if current.status in ACTIVE_STATES:
                resolved = honour_requests(event, current.status, pause_requested=current.pause_requested,
                                           cancel_requested=current.cancel_requested)
                if resolved is event:
                    raise self._stale(job_id, lease_id, event.value, worker_id)
                extra["requested_outcome"] = requested.value
                event = resolved
                continue
            if self._committed_already(current, lease_id, tried):
                return current  # our own write committed, its reply was lost: a retry finds it
            result = self._late_completion(current, event, write, extra, follow_ups, fan_in, node_result, queue)
            if result is None:
                raise self._stale(job_id, lease_id, event.value, worker_id)
            break
        else:
            raise self._stale(job_id, lease_id, event.value, worker_id)
        for written in result:
            self._emit_one(written)
        return Job.from_row(result[-1][0])

    def succeed_later(self, job_id: str, lease_id: int, *, worker_id: str | None,
                      done: Callable[[bool], None]) -> bool:
        """`finish(job_id, lease_id, Event.SUCCEED)` without waiting for it (see `_submit` for
        `done`; a batch refuses it when the lease was lost, or a pause or cancel was requested
        meanwhile). Settle a `done(False)` with `finish`, which resolves each case as it does for a
        first try and finds a commit whose reply was lost."""
        # `finish`'s first write for a success, as it is (slim: `_submit` takes only its event record).
        return self._submit(transition_write(job_id, Event.SUCCEED, lease_id=lease_id, worker_id=worker_id, slim=True),
                            done)

    def _committed_already(self, job: Job, lease_id: int, events: set[str]) -> bool:
        """Whether the job's last transition is this lease's own outcome (one of `events`)."""
        if job.lease_id != lease_id or job.previous_status not in ACTIVE_STATES:
            return False
        stmt = select(job_events.c.event, job_events.c.lease_id, job_events.c.detail).where(
            job_events.c.job_id == job.job_id, job_events.c.version == job.version,
            job_events.c.to_status == job.status.value)
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        return any(event in events and lease == lease_id and "expired_lease" not in json.loads(detail or "{}")
                   for event, lease, detail in rows)

    def _write_following(self, write: JobWrite, follow_ups: Callable[[JobStatus], Sequence[NewJob]] | None,
                         fan_in: FanIn | None = None, node_result: NodeResult | None = None,
                         queue: str | None = None) -> list[tuple[dict[str, Any], dict[str, Any]]] | None:
        """Execute `write`; register the jobs that follow its outcome, count a group member's
        arrival at its barrier, store a workflow node's result and route a retry to `queue` in the
        same transaction. The rows written, the outcome's first (None: its guard did not match)."""
        status = JobStatus(write.to_status) if write.to_status else None
        new_jobs = list(follow_ups(status)) if follow_ups and status else []
        arriving = fan_in if fan_in is not None and status is JobStatus.SUCCEEDED else None
        result_of_node = node_result if status is JobStatus.SUCCEEDED else None
        lane = queue if status is JobStatus.RETRY_WAIT else None
        if not new_jobs and arriving is None and result_of_node is None and lane is None:
            single = self._sql.write(write)
            return None if single is None else [single]
        registered: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
        with self._sql.transaction() as tx:
            result = self._sql.write(write, tx)
            if result is None:
                return None
            written = [result]
            if lane is not None and (route := route_write(result[0], lane, worker_id=write.event_worker_id)):
                written.append(self._write_in(tx, route))
            if result_of_node is not None:
                self._sql.save_node_result(tx, result_of_node.job_id, result_of_node.result, result_of_node.note)
            if arriving is not None:
                new_jobs.extend(self._arrive(tx, arriving))
            if new_jobs:
                registered.append(self._register_in(tx, new_jobs))
        for rows, events in registered:
            self._emit_registered(rows, events)
        return written

    def _late_completion(self, current: Job, event: Event, write: JobWrite, extra: dict[str, Any],
                         follow_ups: Callable[[JobStatus], Sequence[NewJob]] | None = None,
                         fan_in: FanIn | None = None, node_result: NodeResult | None = None,
                         queue: str | None = None) -> list[tuple[dict[str, Any], dict[str, Any]]] | None:
        if late_target(current.status, event) is None or current.previous_status not in ACTIVE_STATES:
            return None
        if not self._expired_by_recovery(current):
            return None
        detail = {**extra, "late_completion": True, "expired_into": current.status.value}
        late = transition_write(
            current.job_id, event, lease_id=write.lease_id, version=current.version,
            from_states=[current.status], worker_id=write.event_worker_id,
            error=None if not write.has_error else {"error_class": write.error_class,
                                                    "error_type": write.error_type,
                                                    "message": write.error_message,
                                                    "traceback": write.traceback},
            delay=write.delay, detail=_detail(detail))
        return self._write_following(late, follow_ups, fan_in, node_result, queue)

    def _expired_by_recovery(self, job: Job) -> bool:
        """Whether the job's last transition was recovery expiring its current lease."""
        stmt = select(job_events.c.detail).where(job_events.c.job_id == job.job_id,
                                                 job_events.c.version == job.version,
                                                 job_events.c.to_status == job.status.value)
        with self._read() as conn:
            details = [json.loads(d or "{}") for d in conn.execute(stmt).scalars()]
        return any(d.get("expired_lease") == job.lease_id for d in details)

    def _arrive(self, tx: Tx, fan_in: FanIn) -> Sequence[NewJob]:
        """Count one arrival at `fan_in`'s barrier (sets known/cleared); the jobs to register with it."""
        remaining = self._sql.arrive_at_barrier(tx, fan_in.barrier_id)
        fan_in.known = remaining is not None
        fan_in.cleared = remaining == 0
        return fan_in.jobs if fan_in.cleared else ()

    def arrive_at_barrier(self, fan_in: FanIn) -> FanIn:
        """A group member's arrival at its barrier in a transaction of its own (members whose success
        reliable does not commit: untracked actors); the clearing arrival registers `fan_in.jobs`
        in it. Returns `fan_in` with known/cleared set."""
        self.check_schema()
        registered: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
        with self._sql.transaction() as tx:
            new_jobs = list(self._arrive(tx, fan_in))
            if new_jobs:
                registered.append(self._register_in(tx, new_jobs))
        for rows, events in registered:
            self._emit_registered(rows, events)
        return fan_in

    def barrier_known(self, barrier_id: str) -> bool:
        """Whether the store holds the completion barrier `barrier_id` (cleared or not)."""
        with self._read() as conn:
            row = conn.execute(select(barriers.c.barrier_id).where(barriers.c.barrier_id == barrier_id)).first()
        return row is not None

    def create_barrier(self, barrier_id: str, parties: int) -> bool:
        """Create a group's completion barrier awaiting `parties` members (False: it exists already)."""
        if parties < 1:
            raise ValueError(f"a barrier needs at least one party, got {parties}")
        self.check_schema()
        return self._sql.create_barrier(barrier_id, parties)
