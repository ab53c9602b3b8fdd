"""Control requests are never lost: every (pause, stop, cancel requested) x outcome, on both databases.

The expected end states are the table in docs/concepts.md ("Control requests and outcomes"),
written out here by hand. Requests are made through `Control` (as an operator would), outcomes
through `StateStore.finish` (as the worker's middleware commits them) and the recovery loop
(a crash: the lease expires by the store's injected clock).
"""

from __future__ import annotations

import itertools

import pytest

from reliable.control import Control
from reliable.operators import Operator
from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import Event, JobStatus, honour_requests
from reliable.store import ErrorInfo, NewJob, StateStore

from support import Clock

S, E = JobStatus, Event

OUTCOMES: dict[str, Event | None] = {
    "success": E.SUCCEED, "retryable failure": E.RETRY, "permanent failure": E.FAIL, "review": E.NEED_REVIEW,
    "dead letter": E.DEAD_LETTER, "halt": E.HALT, "crash (idempotent)": None, "crash (not idempotent)": None,
}

#: What nothing requested gives, then how each request changes it (docs/concepts.md).
PLAIN = {"success": S.SUCCEEDED, "retryable failure": S.RETRY_WAIT, "permanent failure": S.FAILED,
         "review": S.REVIEW, "dead letter": S.DEAD, "halt": S.STOPPED, "crash (idempotent)": S.PENDING,
         "crash (not idempotent)": S.REVIEW}


def expected(pause: bool, stop: bool, cancel: bool, outcome: str) -> JobStatus:
    plain = PLAIN[outcome]
    if stop or cancel:  # the job is STOPPING: the operator's stop or cancel wins...
        if outcome in ("success", "review"):  # ...but finished work and ambiguous side effects stand
            return plain
        return S.CANCELLED if cancel else S.STOPPED
    if pause and plain in (S.RETRY_WAIT, S.PENDING):  # a pause wins over running again
        return S.PAUSED
    return plain





COMBOS = list(itertools.product([False, True], repeat=3))


@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_every_request_combination_with_every_outcome(clocked: tuple[StateStore, Clock], outcome: str) -> None:
    store, clock = clocked
    policy = Policy.load(None)
    control = Control(store, policy=policy, identity=Operator("alice", "ops-host", "test"))
    recovery = Recovery(store, None, policy, lease_ttl=10.0)
    idempotent = outcome != "crash (not idempotent)"
    for pause, stop, cancel in COMBOS:
        job_id = f"{outcome}-{pause}-{stop}-{cancel}".replace(" ", "_")
        store.register(NewJob(job_id, queue="q", actor="a",
                              message={"options": {"reliable_contract": {"idempotent": idempotent}}}))
        claim = store.claim(job_id, worker_id="w", lease_ttl=10.0)
        if pause:
            control.pause(job_id, reason="maintenance")
        if stop:
            control.stop(job_id, reason="deploy")
        if cancel:
            control.cancel(job_id, reason="not needed")
        event = OUTCOMES[outcome]
        if event is None:
            clock.now += 60.0  # the worker died: its lease expires by the store's clock
            report = recovery.run_once()
            assert job_id in report.expired, (job_id, report)
        else:
            store.finish(job_id, claim.lease_id, event, worker_id="w",
                         error=None if event is E.SUCCEED else ErrorInfo("transient", "E", "m"),
                         retry_delay=5.0 if event is E.RETRY else None)
        job = store.get(job_id)
        want = expected(pause, stop, cancel, outcome)
        assert job.status is want, f"pause={pause} stop={stop} cancel={cancel} + {outcome}: {job.status.value}"
        assert not (job.pause_requested or job.stop_requested or job.cancel_requested), "flags cleared at rest"
        if job.status is not S.RETRY_WAIT and job.status is not S.PENDING:
            assert job.finished_at == clock.now


@pytest.mark.parametrize("status", [S.RUNNING, S.STOPPING])
def test_honour_requests_only_returns_what_the_store_accepts(status: JobStatus) -> None:
    from reliable.states import CANCEL_UPGRADES, RERUN_EVENTS, TRANSITIONS, WORKER_OUTCOMES

    for event, pause, cancel in itertools.product(Event, [False, True], [False, True]):
        if status is S.RUNNING and cancel:
            continue  # a cancel request always moves a running job to STOPPING
        resolved = honour_requests(event, status, pause_requested=pause, cancel_requested=cancel)
        # What a worker or recovery may try: anything valid while RUNNING (a stop or cancel may
        # land between the decision and the write), and the stop observations themselves.
        if (S.RUNNING, event) not in TRANSITIONS and (status, event) not in TRANSITIONS:
            continue
        if event not in WORKER_OUTCOMES and not event.value.startswith("lease_expired"):
            continue
        assert (status, resolved) in TRANSITIONS, (status, event, resolved)
        assert not (pause and resolved in RERUN_EVENTS), (status, event, resolved)
        assert not (cancel and resolved in CANCEL_UPGRADES), (status, event, resolved)
