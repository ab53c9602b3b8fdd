"""The per-process heartbeat: one statement renews every lease the process holds.

It also delivers what the answer says: control flags to each running job (so a pause or stop is
seen within one interval even between checkpoints), a lost lease (the job's thread is interrupted
so a stale worker stops working; a claim held ahead, not started yet, never starts), and forced
termination of a job still running past its stop grace period (an async exception in its thread,
as Dramatiq's TimeLimit does).

On a silent network each renewal is bounded (`renewal_bound`: its connection is cut at the
deadline, reliable.deadlines) and logged as late with the store's host and how long the leases have
gone unrenewed. A job whose lease this process could not renew for a full TTL is interrupted
(LeaseLostInterrupt, as for a lost lease): recovery may already have handed it on, and anything its
thread still writes is refused by fencing. Its `lease_unrenewed` event is recorded once the store
answers again, so the job's history says why the attempt stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..deadlines import within
from ..errors import JobForceStopped, JobNotFound, LeaseLostInterrupt, StoreError
from ..policy import check_heartbeat
from ..states import JobStatus
from ..store import WorkerProgress
from .context import JobContext

__all__ = ["MIN_RENEWAL_BOUND", "Heartbeat", "renewal_bound"]

logger = logging.getLogger("reliable.leases")

#: The least time a renewal is given before its connection is cut: a statement takes milliseconds,
#: and a loaded machine must not turn into cut connections.
MIN_RENEWAL_BOUND = 2.0


def renewal_bound(interval: float) -> float:
    """Seconds one renewal may take: one heartbeat interval (the next is due then), at least MIN_RENEWAL_BOUND."""
    return max(MIN_RENEWAL_BOUND, interval)


@dataclass(frozen=True)
class _Abandoned:
    """An attempt interrupted because its lease went unrenewed for a TTL, its event not yet recorded."""

    job_id: str
    lease_id: int
    unrenewed_for: float


class Heartbeat:
    """A daemon thread renewing the leases of every job running in this process."""

    def __init__(self, store: WorkerProgress, *, worker_id: str, interval: float, lease_ttl: float,
                 on_beat: Callable[[float, int, int], None] | None = None,
                 on_failure: Callable[[], None] | None = None,
                 on_escalation: Callable[[JobContext, float], None] | None = None,
                 where: str = "the store", clock: Callable[[], float] = time.monotonic,
                 after_beat: Callable[[list[JobContext]], None] | None = None,
                 interrupt_unrenewed: bool = True) -> None:
        check_heartbeat(interval, lease_ttl, names=("heartbeat interval", "lease ttl"))
        self.store = store
        self.worker_id = worker_id
        self.interval = interval
        self.lease_ttl = lease_ttl
        # job_id -> its attempt: one per job, `add` drops an older one (a lookup, not a scan per claim).
        self._jobs: dict[str, JobContext] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_beat = on_beat
        self._on_failure = on_failure
        self._on_escalation = on_escalation
        #: Called after each beat with the jobs held (reliable.worker.commands: the busy threads reported,
        #: an operator's command picked up); its own errors are its own.
        self._after_beat = after_beat
        #: Interrupt a job unrenewed for a full TTL (install's `interrupt_unrenewed`); else warn only.
        self.interrupt_unrenewed = interrupt_unrenewed
        self._warned_unrenewed: set[tuple[str, int]] = set()
        self._escalated: dict[tuple[str, int], float] = {}
        self._clock = clock
        # job_id -> when its lease was last known renewed (this process's monotonic clock, taken
        # before the renewal was sent: never later than the database's own stamp).
        self._renewed_at: dict[str, float] = {}
        self._abandoned: list[_Abandoned] = []
        self._failing_since: float | None = None
        self.where = where

    def add(self, job: JobContext) -> None:
        """Start renewing `job`'s lease; an older attempt of the same job in this process is stale."""
        with self._lock:
            old = self._jobs.get(job.job_id)
            self._jobs[job.job_id] = job
            self._renewed_at[job.job_id] = self._clock()  # its claim set the lease a moment ago
        if old is not None:  # its lease was reassigned (to `job`): stop it before it does more work
            old.mark_lease_lost()
            old.interrupt(LeaseLostInterrupt)

    def remove(self, job: JobContext) -> None:
        """Stop renewing `job`'s lease (its attempt ended)."""
        with self._lock:
            self._forget(job)
            self._escalated.pop((job.job_id, job.fencing_token), None)

    def _forget(self, job: JobContext) -> None:
        """Drop `job`'s attempt, if it is the one held for its job (under the lock)."""
        held = self._jobs.get(job.job_id)
        if held is not None and held.fencing_token == job.fencing_token:
            del self._jobs[job.job_id]
            self._renewed_at.pop(job.job_id, None)

    def held(self) -> list[JobContext]:
        """The jobs whose leases this process currently renews."""
        with self._lock:
            return list(self._jobs.values())

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="reliable-heartbeat", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat_once()

    def beat_once(self) -> None:
        """One turn of the thread: a bounded renewal; on failure, the jobs unrenewed for a TTL interrupted."""
        started = self._clock()
        try:
            with within(renewal_bound(self.interval)):
                self.beat()
                self._record_abandoned()
            self._failing_since = None
            self._report()
            return
        except StoreError as exc:
            since = self._failing_since = self._failing_since or started
            logger.warning("heartbeat failed: the store at %s did not renew the leases (failing for %.1fs, this try "
                           "%.1fs; retrying in %.1fs): %s", self.where, self._clock() - since,
                           self._clock() - started, self.interval, exc)
        except Exception:
            logger.exception("heartbeat failed unexpectedly")
        if self._on_failure:
            self._on_failure()
        self.abandon_unrenewed()

    def _report(self) -> None:
        """After a renewal: the held jobs to `after_beat`, bounded like a renewal (after a failed one
        the store does not answer: nothing to report to, no command to pick up)."""
        if self._after_beat is None:
            return
        try:
            with within(renewal_bound(self.interval)):
                self._after_beat(self.held())
        except Exception:
            logger.exception("the heartbeat's report failed unexpectedly")

    def abandon_unrenewed(self) -> None:
        """Interrupt every running job whose lease went unrenewed for a full TTL (with
        `interrupt_unrenewed`; else a warning each): recovery may hand it on now if other workers
        reach the store (the store decides by its clock), so its thread stops (a log line each)."""
        now = self._clock()
        with self._lock:
            late = [(job, now - self._renewed_at.get(job.job_id, now)) for job in self._jobs.values()]
        for job, unrenewed in late:
            if unrenewed < self.lease_ttl or not job.lease_matters():
                continue
            if not self.interrupt_unrenewed:
                # The default: a store down for every worker hands nothing on (recovery gives holders
                # time to renew once it is back), so the job goes on; a partition from a store others
                # reach may hand it on: its late commit is then refused (interrupt_unrenewed=True stops it).
                if (job.job_id, job.fencing_token) not in self._warned_unrenewed:
                    self._warned_unrenewed.add((job.job_id, job.fencing_token))
                    logger.warning("job %s: lease %d not renewed for %.1fs (lease ttl %.1fs; the store at %s does "
                                   "not answer): it goes on; if other workers reach the store it may be handed on",
                                   job.job_id, job.fencing_token, unrenewed, self.lease_ttl, self.where)
                continue
            if not job.lose_lease():  # its actor returned meanwhile
                continue
            logger.error("job %s: lease %d not renewed for %.1fs (lease ttl %.1fs; the store at %s does not answer): "
                         "interrupting its thread, the job is being handed on", job.job_id, job.fencing_token,
                         unrenewed, self.lease_ttl, self.where)
            with self._lock:
                self._abandoned.append(_Abandoned(job.job_id, job.fencing_token, round(unrenewed, 1)))
            job.interrupt(LeaseLostInterrupt)

    def _record_abandoned(self) -> None:
        """Record the `lease_unrenewed` events of the attempts interrupted while the store was away."""
        with self._lock:
            pending, self._abandoned = self._abandoned, []
        for i, gone in enumerate(pending):
            try:
                self._record_unrenewed(gone)
            except JobNotFound:
                continue  # purged meanwhile: nothing left to explain
            except StoreError:
                with self._lock:
                    self._abandoned[:0] = pending[i:]
                raise

    def _record_unrenewed(self, gone: _Abandoned) -> None:
        self.store.record_event(
            gone.job_id, "lease_unrenewed", worker_id=self.worker_id, lease_id=gone.lease_id,
            reason=f"the heartbeat could not reach the store for {gone.unrenewed_for:g}s (a full lease ttl): "
                   "the attempt was interrupted and the job handed on",
            detail={"unrenewed_for": gone.unrenewed_for})

    def beat(self) -> None:
        """Renew every held lease once and act on the answer."""
        jobs = self.held()
        if not jobs:
            self.store.process_beat(self.worker_id)  # the process's record: alive, holding nothing
            if self._on_beat:
                self._on_beat(0.0, 0, 0)  # nothing renewed: lets "leases held" fall back to 0
            return
        sent = self._clock()
        started = time.perf_counter()
        answer = self.store.renew(self.worker_id, [(j.job_id, j.fencing_token) for j in jobs], self.lease_ttl)
        latency = time.perf_counter() - started
        with self._lock:
            for job in jobs:
                if job.job_id in answer and self._jobs.get(job.job_id) is job:
                    self._renewed_at[job.job_id] = sent
        lost = 0
        for job in jobs:
            lease = answer.get(job.job_id)
            if lease is None:
                lost += 1
                self._lose(job)
                continue
            job.observe(lease)
            if lease.status is JobStatus.STOPPING and lease.stop_requested_at is not None:
                now = lease.lease_expires_at - self.lease_ttl  # the database's clock, without a query
                overdue = now - lease.stop_requested_at - job.contract.stop_grace
                if overdue > 0:
                    self._force_stop(job, overdue)
        if self._on_beat:
            self._on_beat(latency, len(jobs) - lost, lost)

    def _lose(self, job: JobContext) -> None:
        with self._lock:
            held = self._jobs.get(job.job_id) is job
        # A job whose actor already returned is committing its outcome (or just did): missing from
        # the answer, it simply finished between the snapshot and the renewal. One yet to run (a
        # claim held ahead) is marked too: its run never starts (JobContext.enter).
        if not held or not job.lose_lease():
            return
        logger.warning("job %s: lease %d lost; interrupting its thread (a run not started never starts)",
                       job.job_id, job.fencing_token)
        try:  # the renewal was a fenced write that lost: record it like any stale commit
            self.store.record_event(job.job_id, "stale_commit_rejected", worker_id=self.worker_id,
                                    lease_id=job.fencing_token, detail={"write": "heartbeat"})
        except StoreError:
            logger.warning("job %s: could not record the lost lease", job.job_id)
        job.interrupt(LeaseLostInterrupt)

    def _force_stop(self, job: JobContext, overdue: float) -> None:
        key = (job.job_id, job.fencing_token)
        if key in self._escalated:
            if overdue > 2 * job.contract.stop_grace + self.lease_ttl:
                # The interrupt never landed (blocked in C code): stop renewing the lease so the
                # recovery loop force-stops the job; anything the thread writes later is fenced out.
                logger.error("job %s: thread still running after termination; releasing its lease", job.job_id)
                with self._lock:
                    self._forget(job)
            return
        self._escalated[key] = overdue
        logger.error("job %s: still running %.1fs past its stop grace; terminating its thread", job.job_id, overdue)
        if self._on_escalation:
            self._on_escalation(job, overdue)
        job.interrupt(JobForceStopped)
