"""The per-process heartbeat: one statement renews every lease the process holds.

It also delivers what the answer says: control flags to each running job (so a pause or stop is
seen within one interval even between checkpoints), a lost lease (the job's thread is interrupted
so a stale worker stops working), and forced termination of a job still running past its stop
grace period (an async exception in its thread, as Dramatiq's TimeLimit does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..errors import JobForceStopped, LeaseLostInterrupt, StoreError
from ..policy import check_heartbeat
from ..states import JobStatus
from ..store import WorkerProgress
from .context import JobContext

__all__ = ["Heartbeat"]

logger = logging.getLogger("reliable.leases")


class Heartbeat:
    """A daemon thread renewing the leases of every job running in this process."""

    def __init__(self, store: WorkerProgress, *, worker_id: str, interval: float, lease_ttl: float,
                 on_beat: Callable[[float, int, int], None] | None = None,
                 on_failure: Callable[[], None] | None = None,
                 on_escalation: Callable[[JobContext, float], None] | None = None,
                 after_beat: Callable[[list[JobContext]], None] | None = None) -> None:
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
        self._escalated: dict[tuple[str, int], float] = {}

    def add(self, job: JobContext) -> None:
        """Start renewing `job`'s lease; an older attempt of the same job in this process is stale."""
        with self._lock:
            old = self._jobs.get(job.job_id)
            self._jobs[job.job_id] = job
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
            try:
                self.beat()
            except StoreError as exc:
                logger.warning("heartbeat failed (leases not renewed, retrying in %.1fs): %s", self.interval, exc)
                if self._on_failure:
                    self._on_failure()
            except Exception:
                logger.exception("heartbeat failed unexpectedly")
                if self._on_failure:
                    self._on_failure()
            if self._after_beat is not None:
                try:
                    self._after_beat(self.held())
                except Exception:
                    logger.exception("the heartbeat's report failed unexpectedly")

    def beat(self) -> None:
        """Renew every held lease once and act on the answer."""
        jobs = self.held()
        if not jobs:
            self.store.process_beat(self.worker_id)  # the process's record: alive, holding nothing
            if self._on_beat:
                self._on_beat(0.0, 0, 0)  # nothing renewed: lets "leases held" fall back to 0
            return
        started = time.perf_counter()
        answer = self.store.renew(self.worker_id, [(j.job_id, j.fencing_token) for j in jobs], self.lease_ttl)
        latency = time.perf_counter() - started
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
        # the answer, it simply finished between the snapshot and the renewal.
        if job.lease_lost or not held or not job.interruptible():
            return
        job.mark_lease_lost()
        logger.warning("job %s: lease %d lost; interrupting its thread", job.job_id, job.fencing_token)
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
