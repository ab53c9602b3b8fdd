"""The recovery loop: expired leases, due retries, messages the broker lost, and workflows whose
advance a dead worker left undone.

Each step reads candidates, then applies a compare-and-set (expected version, unchanged lease,
lease still expired by the database's clock) and publishes only when its own write won. Several
recovery loops (one per worker process, or `reliable recover` processes) can run at once.

A lease is never expired because nobody could reach the store: after this loop found the store
unreachable, after the heartbeats recorded an outage in the store (`StateStore.outage_ended_at`),
and after the database server (re)started, it expires no lease until the store has been reachable
for a full lease TTL, long enough for every live worker's heartbeat to renew its leases
(docs/concepts.md, "Leases and store outages").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dramatiq

from .compensation import compensate
from .dispatch import dispatch
from .errors import JobNotFound, StoreUnavailable, TransitionRefused
from .options import contract_options, stored_contract
from .policy import JobContract, Policy
from .states import Event, JobStatus, honour_requests
from .store import Job, StateStore
from .store.processes import leases_held_by
from .workflows.engine import WorkflowEngine

__all__ = ["CRASH_EVENTS", "REPUBLISHED", "Recovery", "RecoveryReport", "crash_event"]

logger = logging.getLogger("reliable.recovery")

#: The event of each policy action for an attempt whose worker crashed (its lease expired).
CRASH_EVENTS: dict[str, Event] = {
    "requeue": Event.LEASE_EXPIRED, "retry": Event.LEASE_EXPIRED_BACKOFF,
    "review": Event.LEASE_EXPIRED_REVIEW, "dead": Event.LEASE_EXPIRED_DEAD,
    "fail": Event.LEASE_EXPIRED_DEAD, "halt": Event.LEASE_EXPIRED_REVIEW,
}
#: Crash outcomes whose message recovery publishes (now or delayed).
REPUBLISHED = frozenset({Event.LEASE_EXPIRED, Event.LEASE_EXPIRED_BACKOFF})


def crash_event(action: str) -> Event:
    """The event of the policy's crash decision `action` (lease_expired_review for one it does not know)."""
    return CRASH_EVENTS.get(action, Event.LEASE_EXPIRED_REVIEW)


@dataclass
class RecoveryReport:
    """What one pass did, job ids by step."""

    expired: dict[str, str] = field(default_factory=dict)  # job_id -> event applied
    retried: list[str] = field(default_factory=list)
    redispatched: list[str] = field(default_factory=list)
    lost_races: int = 0
    #: Running workflows advanced because nobody had looked at them for `sweep_after` seconds.
    workflows: int = 0
    #: Lease expiry was held back: the store came back (or restarted) less than a lease TTL ago.
    expiry_held: bool = False

    @property
    def total(self) -> int:
        """How many jobs this pass moved or re-published."""
        return len(self.expired) + len(self.retried) + len(self.redispatched)


class Recovery:
    """One recovery pass at a time over the store; publishes through `broker` (None: store only).

    Without a broker the jobs still move to PENDING and a sweeper with a broker publishes them.
    """

    def __init__(self, store: StateStore, broker: dramatiq.Broker | None, policy: Policy, *,
                 actor_options: Callable[[str], Mapping[str, Any]] | None = None,
                 sweep_after: float | None = None, retry_grace: float | None = None,
                 lease_ttl: float | None = None, batch: int = 200, worker_id: str | None = None) -> None:
        self.store = store
        #: Who runs this loop (a worker's id, or `reliable recover`'s), named in the events it writes.
        self.worker_id = worker_id
        self.broker = broker
        self.policy = policy
        self.actor_options = actor_options or (lambda actor: {})
        self.sweep_after = sweep_after if sweep_after is not None else policy.lease.sweep_after
        self.retry_grace = retry_grace if retry_grace is not None else policy.lease.retry_grace
        self.lease_ttl = lease_ttl if lease_ttl is not None else policy.lease.ttl
        self.batch = batch
        self._unreachable_seen = False
        self._expiry_held_until: float | None = None

    def contract_of(self, job: Job) -> JobContract:
        """The job's contract: policy, then the contract the actor declared (stored with the job at
        registration), then the live actor's options, then Dramatiq's retry options of the message
        (as Dramatiq reads them). Never a contract option a producer put in the message."""
        options = {**stored_contract(job.message), **self.actor_options(job.actor)}
        return self.policy.contract(job.actor, job.home_queue,
                                    contract_options(options, (job.message or {}).get("options")))

    def run_once(self) -> RecoveryReport:
        """Recover expired leases, promote overdue retries, re-publish lost messages."""
        try:
            return self._run_once()
        except StoreUnavailable:
            self._unreachable_seen = True
            raise

    def _expiry_allowed(self, now: float) -> bool:
        """Whether leases may be expired now (see the module docstring)."""
        since = self.store.serving_since()  # every pass: a restart between two passes counts too
        if since is not None:
            self._hold_expiry(since + self.lease_ttl)
        ended = self.store.outage_ended_at()  # seen by the heartbeats: held by every recovery loop
        if ended is not None:
            self._hold_expiry(ended + self.lease_ttl)
        if self._unreachable_seen:
            self._unreachable_seen = False
            self._hold_expiry(now + self.lease_ttl)
            logger.warning("recovery: the store is reachable again; no lease expires before %.1fs have passed "
                           "(heartbeats renew first)", self.lease_ttl)
        return self._expiry_held_until is None or now >= self._expiry_held_until

    def _hold_expiry(self, until: float) -> None:
        self._expiry_held_until = max(until, self._expiry_held_until or until)

    def _run_once(self) -> RecoveryReport:
        report = RecoveryReport()
        if self._expiry_allowed(self.store.now()):
            for job in self.store.expired_leases(limit=self.batch):
                self._expired(job, report)
        else:
            report.expiry_held = True
        for job in self.store.due_retries(grace=self.retry_grace, limit=self.batch):
            self._retry_due(job, report)
        for job in self.store.stale_pending(age=self.sweep_after, limit=self.batch):
            home = self._stranded(job)
            if self.broker is not None and self.store.mark_dispatched(job, worker_id=self.worker_id, queue=home):
                self._publish(dataclasses.replace(job, queue=home) if home else job)
                report.redispatched.append(job.job_id)
        report.workflows = WorkflowEngine(self.store, self.broker).advance_stale(older_than=self.sweep_after,
                                                                                limit=self.batch)
        if report.total or report.workflows:
            logger.info("recovery: %d expired leases, %d retries due, %d re-dispatched, %d workflows advanced",
                        len(report.expired), len(report.retried), len(report.redispatched), report.workflows)
        return report

    def release_holder(self, worker_id: str, *, observed_by: str, how: str) -> RecoveryReport:
        """Expire at once every lease held by `worker_id`, a process known for certain to be dead
        (`how`: pid_gone, pid_reused), as its lease expiring would, without waiting for its TTL.

        The same fenced compare-and-set as an expiry (version and lease unchanged) and the same
        crash rules (a non-idempotent job goes to review); the event names who saw the death, and how.
        Never call it for a process that may be alive: a frozen or unreachable holder keeps its TTL.
        """
        report = RecoveryReport()
        death = {"holder_dead": how, "observed_by": observed_by}
        for job in leases_held_by(self.store, [worker_id]):
            self._expired(job, report, death=death)
        if report.expired:
            logger.warning("recovery: %d leases of %s released at once (%s, seen by %s)", len(report.expired),
                           worker_id, how, observed_by)
        return report

    def _expired(self, job: Job, report: RecoveryReport, *, death: Mapping[str, str] | None = None) -> None:
        if job.status is JobStatus.STOPPING:
            event, reason, delay = Event.FORCE_STOP, "lease expired while stopping", None
        else:
            decision = self.policy.decide_crash(contract=self.contract_of(job), attempt=job.attempt,
                                                actor=job.actor, queue=job.home_queue)
            event = crash_event(decision.action)
            reason, delay = decision.reason, decision.delay
        if death is not None:
            reason = f"{reason} (its holder {job.worker_id} is dead: {death['holder_dead']}, " \
                     f"seen by {death['observed_by']})"
        honoured = honour_requests(event, job.status, pause_requested=job.pause_requested,
                                   cancel_requested=job.cancel_requested)
        if honoured is not event:
            event, reason = honoured, f"{reason} ({'pause' if job.status is JobStatus.RUNNING else 'stop'} requested)"
        try:
            moved = self.store.transition(
                job.job_id, event, expected_version=job.version, lease_id=job.lease_id, lease_expired=death is None,
                retry_delay=(delay or 0.0) if event is Event.LEASE_EXPIRED_BACKOFF else None, reason=reason,
                dispatch=(self.broker is not None) if event is Event.LEASE_EXPIRED else None,
                queue=self._stranded(job) if event in REPUBLISHED else None,
                detail={"expired_worker": job.worker_id, "expired_lease": job.lease_id,
                        "lease_expires_at": job.lease_expires_at, "checkpoint_version": job.checkpoint_version,
                        **(death or {})},
            )
        except (TransitionRefused, JobNotFound):
            report.lost_races += 1  # renewed, finished, or another recovery loop won
            return
        report.expired[job.job_id] = event.value
        if event is Event.FORCE_CANCEL:
            warning = compensate(self.store, self.broker, moved, self.contract_of(job).compensation,
                                 reason="cancel completed by recovery after the worker's lease expired")
            if warning:
                logger.warning("job %s: %s", job.job_id, warning)
        if event is Event.LEASE_EXPIRED:
            self._publish(moved)
        elif event is Event.LEASE_EXPIRED_BACKOFF and self.broker is not None:
            self._publish(moved, delay_ms=int((delay or 0.0) * 1000))

    def _stranded(self, job: Job) -> str | None:
        """The job's own queue when it waits on a lane this policy no longer routes to (a lane
        removed from the policy: no worker may consume it any more), else None (it stays)."""
        routed = job.queue != job.home_queue
        return job.home_queue if routed and job.queue not in self.policy.lanes else None

    def _retry_due(self, job: Job, report: RecoveryReport) -> None:
        try:
            moved = self.store.transition(job.job_id, Event.RETRY_DUE, expected_version=job.version,
                                          dispatch=self.broker is not None, queue=self._stranded(job),
                                          reason="retry_at passed without a claim")
        except (TransitionRefused, JobNotFound):
            report.lost_races += 1
            return
        report.retried.append(job.job_id)
        self._publish(moved)

    def _publish(self, job: Job, *, delay_ms: int | None = None) -> None:
        if self.broker is None:
            return
        try:
            dispatch(self.broker, job, delay_ms=delay_ms)
        except Exception:
            logger.warning("job %s: publish failed; the sweeper will retry", job.job_id, exc_info=True)
