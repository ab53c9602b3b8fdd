"""Which queue's contract applies to a routed job: its own, wherever the message comes from.

One rule (`reliable.options.own_queue`, `Job.home_queue`): a lane delivery carries the job's own
queue (`OWN_QUEUE`, set by `message_for` only), the claim reads it from the store, and the fast path
never runs a lane delivery. StubBroker, real Worker threads, both databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from dramatiq import Worker

import reliable
from reliable.access import role_policy
from reliable.control import Control
from reliable.dispatch import declare_queue, message_for
from reliable.errors import NotAuthorized
from reliable.operations import Operations
from reliable.operators import Operator
from reliable.options import OWN_QUEUE
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.selection import JobFilter

from middleware_harness import Harness, make_harness
from support import wait_for

POLICY = """\
version: 1
lease: {ttl: 2s, heartbeat_interval: 200ms, recovery_interval: 200ms, sweep_after: 1s, retry_grace: 500ms}
defaults:
  max_attempts: 2
  backoff: {base: 20ms, cap: 50ms}
queues:
  default: {max_attempts: 5, idempotent: false, resumable: true}
  slow: {fast_path: true}     # the lane is also the home of other (fast-path) actors
classes:
  slow_timeout: {action: retry, queue: slow}
rules:
  - {name: timeouts, exception: TimeoutError, class: slow_timeout}
"""


@pytest.fixture(params=["lane without fast_path", "lane with fast_path"])
def harness(request: pytest.FixtureRequest, store_url: str, tmp_path: Path) -> Iterator[tuple[Harness, Worker]]:
    policy = tmp_path / "policy.yaml"
    with_fast_path = request.param.endswith("with fast_path")
    policy.write_text(POLICY if with_fast_path else POLICY.replace("  slow: {fast_path: true}", "  slow: {}"))
    made = make_harness(store_url, policy, threads=1)
    slow = Worker(made.broker, worker_timeout=50, worker_threads=1, queues={"slow"})
    yield made, slow
    slow.stop()
    made.close()


def _route_to_lane(made: Harness, job_id: str) -> None:
    """What a worker does on a routed TimeoutError: RETRY_WAIT moved to `slow` (store only)."""
    claim = made.store.claim(job_id, worker_id="w", lease_ttl=30)
    made.store.finish(job_id, claim.job.lease_id, Event.RETRY, worker_id="w", retry_delay=60.0,
                      error=ErrorInfo("slow_timeout", "builtins.TimeoutError", "slow"), queue="slow")


def test_a_lane_delivery_of_a_job_sent_home_runs_with_its_own_contract(harness: tuple[Harness, Worker]) -> None:
    """A lane message still queued when an operator cancelled and restarted the job (home again)."""
    made, slow = harness
    seen: list[tuple[int, bool]] = []

    @dramatiq.actor
    def export() -> None:
        contract = reliable.current_job().contract
        seen.append((contract.max_attempts, contract.idempotent))

    job_id = export.send().message_id
    _route_to_lane(made, job_id)
    declare_queue(made.broker, "slow")
    made.broker.enqueue(message_for(made.store.get(job_id)))  # the worker's publish on the lane (in flight)
    control = Control(made.store, broker=made.broker, policy=made.middleware.policy)
    control.cancel(job_id, reason="x")
    assert control.restart(job_id, reason="back home", allow_duplicate_side_effects=True).ok
    assert made.store.get(job_id).queue == "default"
    slow.start()
    wait_for(lambda: made.store.get(job_id).status is not JobStatus.PENDING, "the lane delivery", timeout=10)
    made.broker.join("slow", fail_fast=False)
    slow.join()
    assert seen == [(5, False)], seen  # the job's own contract: max_attempts 5, idempotent False


def test_a_routed_job_resumed_on_a_fast_path_lane_is_claimed(harness: tuple[Harness, Worker]) -> None:
    """A resumable, non-idempotent job resumed on the lane never runs without a claim and a lease."""
    made, slow = harness
    ran: list[str] = []

    @dramatiq.actor
    def charge() -> None:
        try:
            reliable.current_job()
            ran.append("durable")
        except RuntimeError:
            ran.append("fast path")

    job_id = charge.send().message_id
    _route_to_lane(made, job_id)
    control = Control(made.store, broker=made.broker, policy=made.middleware.policy)
    control.pause(job_id, reason="inspect")
    assert control.resume(job_id, reason="go on").ok
    assert made.store.get(job_id).queue == "slow"
    slow.start()
    made.broker.join("slow", fail_fast=False)
    slow.join()
    events = [e.event for e in made.store.events(job_id)]
    assert ran == ["durable"] and "fast_succeed" not in events, (ran, events)


def test_a_producer_may_not_name_a_jobs_own_queue(harness: tuple[Harness, Worker]) -> None:
    made, _slow = harness

    @dramatiq.actor
    def export() -> None:
        pass

    forged = export.message()
    forged.options[OWN_QUEUE] = "slow"  # would choose the slow queue's (fast-path) contract
    made.broker.enqueue(forged)
    job = made.store.get(forged.message_id)
    assert (job.queue, job.home_queue) == ("default", "default") and OWN_QUEUE not in job.message["options"]
    ignored = [e for e in made.store.events(job.job_id) if e.event == "untrusted_options_ignored"]
    assert ignored and ignored[0].detail == {"options": [OWN_QUEUE]}
    assert OWN_QUEUE not in message_for(job).options  # only a job waiting on a lane names its own queue
    _route_to_lane(made, job.job_id)
    assert message_for(made.store.get(job.job_id)).options[OWN_QUEUE] == "default"


def test_the_bulk_preview_judges_rights_by_the_jobs_own_queue(store_url: str) -> None:
    store = StateStore(store_url)
    try:
        message = {"queue_name": "exports", "actor_name": "export", "args": [], "kwargs": {}, "options": {},
                   "message_id": "j1", "message_timestamp": 0}
        store.register(NewJob("j1", queue="exports", actor="export", message=message))
        claim = store.claim("j1", worker_id="w", lease_ttl=30)
        store.finish("j1", claim.job.lease_id, Event.RETRY, worker_id="w", retry_delay=60.0,
                     error=ErrorInfo("slow_timeout", "builtins.TimeoutError", "slow"), queue="slow")
        otto = Control(store, identity=Operator("otto", "box", "test"),
                       operators=role_policy("otto", "operator", queues=["exports"]))
        other = Control(store, identity=Operator("olga", "box", "test"),
                        operators=role_policy("olga", "operator", queues=["slow"]))
        preview = Operations(store).preview(otto, "pause", JobFilter(job_ids=("j1",)), reason="x", dry_run=True)
        refused = Operations(store).preview(other, "pause", JobFilter(job_ids=("j1",)), reason="x", dry_run=True)
        # the lane gives no rights: olga's preview does not even count it (issue 38)
        assert (preview.operation.total, refused.operation.total) == (1, 0)
        with pytest.raises(NotAuthorized):  # as Control says
            other.pause("j1", reason="x")
        assert otto.pause("j1", reason="x").ok
    finally:
        store.close()
