"""Claims: the worker takes a job for one attempt, or looks at it first; the fast path's one-write success.

A claim is one compare-and-set (PENDING, or RETRY_WAIT once due, to RUNNING with a new lease_id, the
fencing token); a refusal says why (ClaimRefused). The fast path runs before any claim and commits
PENDING -> SUCCEEDED in one write.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ClaimRefused
from ..states import ACTIVE_STATES, TERMINAL_STATES, Event, JobStatus
from .core import StoreCore
from .json_text import _detail
from .records import Claim, Job
from .writes import JobWrite, transition_write

__all__ = ["WorkerClaims"]


def _mismatch(job: Job, delivery_digest: str | None) -> ClaimRefused | None:
    """The refusal of a delivery whose digest is not the job's (None: it matches, or either is unknown)."""
    if delivery_digest is None or job.delivery_digest is None or job.delivery_digest == delivery_digest:
        return None
    return ClaimRefused(job.job_id, "delivery_mismatch", status=job.status.value)


class WorkerClaims(StoreCore):
    """The worker's claims and looks before a run, and the fast path's commit."""

    def claim(self, job_id: str, *, worker_id: str, lease_ttl: float,
              attempt_id: str | None = None, from_states: Iterable[JobStatus] | None = None,
              delivery_digest: str | None = None) -> Claim:
        """Take the job for one attempt: RUNNING, a new lease_id (fencing token), attempt + 1.

        Wins only from PENDING, or from RETRY_WAIT once retry_at has passed (`from_states` narrows
        that). Otherwise raises ClaimRefused with the reason (held under a live lease, paused,
        finished, not due...). `delivery_digest`: the digest of the delivery that claims
        (reliable.delivery_digest); a job registered with another one is refused with the reason
        "delivery_mismatch" and left as it was (checked in the claim's own statement).
        """
        self.check_schema()
        write = transition_write(job_id, Event.CLAIM, worker_id=worker_id, lease_ttl=lease_ttl,
                                 attempt_id=attempt_id or uuid.uuid4().hex, from_states=from_states,
                                 delivery_digest=delivery_digest)
        return self._claimed(write, self._sql.write(write), delivery_digest)

    def claim_with_ahead(self, job_id: str, *, worker_id: str, lease_ttl: float, attempt_id: str,
                         delivery_digest: str | None, ahead: Sequence[tuple[str, str | None]]
                         ) -> tuple[Claim | BaseException, dict[str, Claim]]:
        """`claim`, and in the same group-commit batch the claims of `ahead` ((job id, delivery
        digest) of messages waiting in the worker's own queue): the claim as `claim` answers it
        (its refusal or store error returned, not raised, so the claims ahead that won are never
        lost to it: the caller holds them, then raises it), and the claims ahead that won, by job
        id. A claim ahead refused (or failed) is simply not in the answer: its delivery's own claim
        decides later."""
        self.check_schema()
        write = transition_write(job_id, Event.CLAIM, worker_id=worker_id, lease_ttl=lease_ttl,
                                 attempt_id=attempt_id, delivery_digest=delivery_digest)
        others = [transition_write(other, Event.CLAIM, worker_id=worker_id, lease_ttl=lease_ttl,
                                   attempt_id=uuid.uuid4().hex, delivery_digest=digest) for other, digest in ahead]
        results = self._sql.write_together([write, *others])
        won: dict[str, Claim] = {}
        for other, result in zip(others, results[1:], strict=True):
            if isinstance(result, tuple):
                self._emit_one(result)
                won[other.job_id] = Claim(Job.from_row(result[0]))
        own = results[0]
        if isinstance(own, BaseException):  # returned, not raised: the claims ahead that won are held
            return own, won
        try:
            return self._claimed(write, own, delivery_digest), won
        except ClaimRefused as refused:
            return refused, won

    def return_claim(self, job_id: str, lease_id: int, *, worker_id: str) -> Job | None:
        """Hand back a claim taken ahead and never used (`claim_returned`: RUNNING -> PENDING, fenced
        by `lease_id`): the job's attempt counter reads as before the claim, its message is still
        on its way. None when the lease no longer holds or the job left RUNNING (a stop or cancel
        request, recovery) or a pause is requested: recovery then ends that lease as any other."""
        self.check_schema()
        result = self._sql.write(transition_write(job_id, Event.CLAIM_RETURNED, lease_id=lease_id,
                                                  worker_id=worker_id))
        if result is None:
            return None
        self._emit_one(result)
        return Job.from_row(result[0])

    def _claimed(self, write: JobWrite, result: tuple[dict[str, Any], dict[str, Any]] | None,
                 delivery_digest: str | None) -> Claim:
        """The answer to a claim's write (`claim`)."""
        if result is None:
            current = self.find(write.job_id)
            if current is not None and current.attempt_id == write.attempt_id and current.status in ACTIVE_STATES:
                return Claim(current)  # our own claim committed, its reply was lost: a retry finds it
            raise self._claim_refusal(write.job_id, current, delivery_digest)
        self._emit_one(result)
        return Claim(Job.from_row(result[0]))

    def claim_refusal(self, job_id: str, *, delivery_digest: str | None = None) -> ClaimRefused | None:
        """Why a claim of the job would be refused now, read without writing (None: it may win, or
        there is no such job, which the caller registers first): the look a limited actor's
        delivery takes before spending a slot or a token. `delivery_digest` as for `claim`."""
        job = self.find(job_id)
        if job is None:
            return None
        mismatch = _mismatch(job, delivery_digest)
        if mismatch is not None or job.status is JobStatus.PENDING:
            return mismatch
        refusal = self._claim_refusal(job_id, job)
        if refusal.reason == "not_due" and not refusal.retry_in:
            return None  # a retry that is due
        return refusal

    def job_status(self, job_id: str, *, delivery_digest: str | None = None) -> JobStatus | None:
        """The job's state alone (None: no such job): the fast path's look before a run.

        `delivery_digest` as for `claim`: ClaimRefused("delivery_mismatch") when the job was
        registered with another one (compared in Python: the look reads the row's digest with its
        state, no second query).
        """
        self.check_schema()
        return self.looked_status(job_id, self._sql.job_status(job_id), delivery_digest=delivery_digest)

    def job_statuses(self, job_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """The state and registered delivery digest of each of these jobs that exists, by job id, in
        ONE read: the fast path's batched look (reliable.worker.waiting). Each answer is judged by
        `looked_status` with its own delivery's digest."""
        self.check_schema()
        return self._sql.job_statuses(job_ids)

    @staticmethod
    def looked_status(job_id: str, found: tuple[str, str | None] | None, *,
                      delivery_digest: str | None = None) -> JobStatus | None:
        """The job's state of a look's row (state, registered digest; None: no such job), as
        `job_status` answers: ClaimRefused("delivery_mismatch") when the job was registered with
        another digest than `delivery_digest`."""
        if found is None:
            return None
        status, registered = found
        if delivery_digest is not None and registered is not None and registered != delivery_digest:
            raise ClaimRefused(job_id, "delivery_mismatch", status=status)
        return JobStatus(status)

    def fast_succeed(self, job_id: str, *, worker_id: str, attempt_id: str,
                     detail: Mapping[str, Any] | None = None) -> Job | None:
        """Commit a fast-path run that succeeded: ONE compare-and-set PENDING -> SUCCEEDED.

        No claim came before the run, so the write takes and releases a lease at once (lease_id
        and attempt + 1: any older lease is fenced) and writes no attempt row. None when the job
        is no longer PENDING (a duplicate delivery committed first, an operator paused or
        cancelled it meanwhile, or it runs on the durable path): this run's outcome is discarded.
        A retry after a lost reply finds its own commit by `attempt_id`; a refusal is recorded as
        `stale_commit_rejected` (detail.write = "fast_succeed").
        """
        found = self._fast_succeed(job_id, worker_id=worker_id, attempt_id=attempt_id, detail=detail)
        return found if found is None or isinstance(found, Job) else Job.from_row(found)

    def fast_committed(self, job_id: str, *, worker_id: str, attempt_id: str,
                       detail: Mapping[str, Any] | None = None) -> bool:
        """`fast_succeed` for a caller that only needs to know whether the success was committed
        (the worker after a fast-path run): the job row written is not decoded into a Job."""
        return self._fast_succeed(job_id, worker_id=worker_id, attempt_id=attempt_id, detail=detail) is not None

    def fast_commit_later(self, job_id: str, *, worker_id: str, attempt_id: str,
                          detail: Mapping[str, Any] | None, done: Callable[[bool], None]) -> bool:
        """`fast_committed` without waiting for it (see `_submit` for `done`). Settle a
        `done(False)` with `fast_committed`, which tells a reply lost from a refusal."""
        return self._submit(transition_write(job_id, Event.FAST_SUCCEED, worker_id=worker_id, attempt_id=attempt_id,
                                             detail=_detail(detail), slim=True), done)

    def _fast_succeed(self, job_id: str, *, worker_id: str, attempt_id: str,
                      detail: Mapping[str, Any] | None) -> Job | Mapping[str, Any] | None:
        """`fast_succeed`'s write: the job row it wrote, the Job its earlier try committed, or None."""
        self.check_schema()
        result = self._sql.write(transition_write(job_id, Event.FAST_SUCCEED, worker_id=worker_id,
                                                  attempt_id=attempt_id, detail=_detail(detail)))
        if result is None:
            current = self.find(job_id)
            if current is None:
                return None
            if current.attempt_id == attempt_id and current.status is JobStatus.SUCCEEDED:
                return current
            # The run happened but its outcome loses: recorded, so a second run is never unnoticed.
            self._record_stale(job_id, lease_id=None, worker_id=worker_id, detail={
                "write": Event.FAST_SUCCEED.value, "status": current.status.value, "attempt_id": attempt_id})
            return None
        self._emit_one(result)
        return result[0]

    def _claim_refusal(self, job_id: str, job: Job | None, delivery_digest: str | None = None) -> ClaimRefused:
        if job is None:
            return ClaimRefused(job_id, "not_found")
        mismatch = _mismatch(job, delivery_digest)
        if mismatch is not None:  # whatever the job's state: this delivery is not its message
            return mismatch
        status = job.status
        if status in TERMINAL_STATES:
            reason = "finished"
        elif status in ACTIVE_STATES:
            reason = "held"
        elif status is JobStatus.PAUSED:
            reason = "paused"
        elif status is JobStatus.STOPPED:
            reason = "stopped"
        elif status is JobStatus.REVIEW:
            reason = "review"
        elif status is JobStatus.RETRY_WAIT:
            now = self.now()
            retry_in = max(0.0, (job.retry_at or now) - now)
            return ClaimRefused(job_id, "not_due", status=status.value, retry_in=retry_in)
        else:  # PENDING again: someone else claimed and released in between
            reason = "held"
        return ClaimRefused(job_id, reason, status=status.value)
