"""Retry routing in the store, recovery and operator commands, on both databases (StubBroker)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from dramatiq.brokers.stub import StubBroker
from prometheus_client import CollectorRegistry

from reliable.control import Control
from reliable.errors import ReliableError
from reliable.metrics import Metrics
from reliable.operators import Operator, OperatorsPolicy, Rule
from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, Job, NewJob, StateStore

from support import wait_for

WORKER = "w1"


@pytest.fixture
def store(store_url: str) -> Iterator[StateStore]:
    opened = StateStore(store_url)
    yield opened
    opened.close()


def register(store: StateStore, job_id: str = "job-1", queue: str = "default") -> None:
    message = {"queue_name": queue, "actor_name": "export", "args": [1], "kwargs": {}, "options": {},
               "message_id": job_id, "message_timestamp": 0}
    store.register(NewJob(job_id, queue=queue, actor="export", message=message))


def fail_routed(store: StateStore, job_id: str = "job-1", *, queue: str | None = "slow", delay: float = 0.0,
                event: Event = Event.RETRY) -> Job:
    claim = store.claim(job_id, worker_id=WORKER, lease_ttl=30)
    return store.finish(job_id, claim.job.lease_id, event, worker_id=WORKER, retry_delay=delay,
                        error=ErrorInfo("slow_timeout", "builtins.TimeoutError", "slow"), queue=queue)


def test_a_routed_retry_moves_the_job_with_a_routed_event(store: StateStore) -> None:
    seen: list[dict[str, object]] = []
    store.add_listener(seen.append)
    register(store)
    job = fail_routed(store, delay=5.0)
    assert (job.status, job.queue, job.home_queue) == (JobStatus.RETRY_WAIT, "slow", "default")
    assert store.get("job-1").queue == "slow"
    events = store.events("job-1")
    assert [e.event for e in events] == ["enqueued", "claim", "retry_scheduled", "routed"]
    retry, routed = events[-2:]
    assert retry.queue == "default"  # the attempt failed there; the routed event says where it waits now
    assert routed.queue == "slow" and routed.detail == {"from": "default", "to": "slow"}
    assert routed.version == retry.version and routed.worker_id == WORKER
    assert [e["event"] for e in seen][-2:] == ["retry_scheduled", "routed"]  # listeners get both, in order


def test_same_queue_or_another_outcome_is_not_routed(store: StateStore) -> None:
    register(store)
    assert fail_routed(store, queue="default").queue == "default"
    register(store, "job-2")
    assert fail_routed(store, "job-2", queue="slow", event=Event.FAIL).queue == "default"  # only a retry moves
    register(store, "job-3")
    claim = store.claim("job-3", worker_id=WORKER, lease_ttl=30)
    store.transition("job-3", Event.PAUSE_REQUEST)
    paused = store.finish("job-3", claim.job.lease_id, Event.RETRY, worker_id=WORKER, retry_delay=0.0, queue="slow")
    assert (paused.status, paused.queue) == (JobStatus.PAUSED, "default")  # the pause won: no retry, no move
    for job_id in ("job-1", "job-2", "job-3"):
        assert "routed" not in [e.event for e in store.events(job_id)]


def test_a_job_routed_back_home_records_it(store: StateStore) -> None:
    register(store)
    fail_routed(store)
    home = fail_routed(store, queue="default")  # a later retry of a class that does not route
    assert home.queue == "default"
    assert [e.detail for e in store.events("job-1") if e.event == "routed"] == [
        {"from": "default", "to": "slow"}, {"from": "slow", "to": "default"}]


ROUTING_POLICY = "version: 1\nclasses:\n  slow_timeout: {action: retry, queue: slow}\n"


def routing_policy(tmp_path: Path, text: str = ROUTING_POLICY) -> Policy:
    path = tmp_path / "routing.yaml"
    path.write_text(text)
    return Policy.load(path)


def test_recovery_publishes_on_the_queue_the_job_waits_on(store: StateStore, tmp_path: Path) -> None:
    broker = StubBroker()
    try:
        register(store)
        fail_routed(store)  # due at once; the worker's own publish is "lost" (never made here)
        recovery = Recovery(store, broker, routing_policy(tmp_path), retry_grace=0.0, lease_ttl=0.2)
        wait_for(lambda: recovery.run_once().retried, "the due retry")
        assert broker.queues["slow"].qsize() == 1 and "default" not in broker.queues
        message = broker.queues["slow"].get_nowait()
        assert b'"queue_name":"slow"' in message and b'"message_id":"job-1"' in message
        assert b'"reliable_own_queue":"default"' in message  # whose contract the lane's worker applies

        # a worker claims it on the slow lane and dies: the lease expires, recovery requeues it there
        store.claim("job-1", worker_id=WORKER, lease_ttl=0.2)
        report = wait_for(lambda: (r := recovery.run_once()).expired and r, "the lease expiry", timeout=10)
        assert report.expired == {"job-1": "lease_expired"}
        assert broker.queues["slow"].qsize() == 1
        assert store.get("job-1").queue == "slow"
    finally:
        broker.close()


def test_recovery_decides_with_the_contract_of_the_jobs_own_queue(store: StateStore, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\ndefaults: {max_attempts: 2}\nqueues:\n  default: {max_attempts: 5}\n")
    policy = Policy.load(path)
    register(store)
    fail_routed(store)
    fail_routed(store)  # attempt 2 of 5 on the job's own queue (the slow lane alone would say 2 of 2)
    store.claim("job-1", worker_id=WORKER, lease_ttl=0.2)
    recovery = Recovery(store, None, policy, lease_ttl=0.2)
    assert recovery.contract_of(store.get("job-1")).max_attempts == 5
    wait_for(lambda: recovery.run_once().expired, "the lease expiry", timeout=10)
    assert store.get("job-1").status is JobStatus.PENDING  # requeued, not DEAD


def test_restart_sends_a_routed_job_home_resume_keeps_its_lane(store: StateStore) -> None:
    broker = StubBroker()
    control = Control(store, broker=broker, actor_options={"export": {"resumable": True}})
    try:
        register(store)
        fail_routed(store, delay=60.0)
        control.pause("job-1", reason="inspect")
        resumed = control.resume("job-1", reason="go on")
        assert resumed.ok and store.get("job-1").queue == "slow"
        assert broker.queues["slow"].qsize() == 1
        claim = store.claim("job-1", worker_id=WORKER, lease_ttl=30)
        store.finish("job-1", claim.job.lease_id, Event.FAIL, worker_id=WORKER,
                     error=ErrorInfo("invalid_input", "builtins.ValueError", "bad"))
        restarted = control.restart("job-1", reason="fixed the input")
        assert restarted.ok, restarted.message
        job = store.get("job-1")
        assert (job.status, job.queue) == (JobStatus.PENDING, "default")
        assert broker.queues["default"].qsize() == 1
        routed = [e for e in store.events("job-1") if e.event == "routed"]
        assert routed[-1].detail == {"from": "slow", "to": "default"} and routed[-1].operator is not None
    finally:
        broker.close()


def test_operators_rights_follow_the_jobs_own_queue(store: StateStore) -> None:
    register(store)
    fail_routed(store, delay=60.0)

    def as_operator(queues: tuple[str, ...]) -> Control:
        policy = OperatorsPolicy(operators=(("*", ("role",)),),
                                 roles={"role": (Rule(("*",), queues, ("*",)),)})
        return Control(store, operators=policy, identity=Operator("ann", "box", "test"))

    with pytest.raises(ReliableError, match="queue 'default'"):
        as_operator(("slow",)).pause("job-1", reason="x")
    assert as_operator(("default",)).pause("job-1", reason="x").ok


def test_metrics_count_the_route_with_both_queues(store: StateStore) -> None:
    registry = CollectorRegistry()
    store.add_listener(Metrics(registry))
    register(store)
    fail_routed(store)
    labels = {"actor": "export", "queue": "default", "to_queue": "slow"}
    assert registry.get_sample_value("reliable_retries_routed_total", labels) == 1
    assert registry.get_sample_value("reliable_retries_total", {"actor": "export", "queue": "default",
                                                                 "error_class": "slow_timeout"}) == 1


def test_a_lane_the_policy_no_longer_routes_to_sends_its_jobs_home(store: StateStore, tmp_path: Path) -> None:
    """Recovery and the sweeper publish a job waiting on a lane removed from the policy on its own
    queue (no worker may consume the lane any more), with a routed event; a known lane stays."""
    broker = StubBroker()
    try:
        for job_id in ("due", "expired", "swept", "kept"):
            register(store, job_id)
            fail_routed(store, job_id, delay=0.0 if job_id != "kept" else 3600.0)
        store.claim("expired", worker_id=WORKER, lease_ttl=0.2)  # claimed on the lane, then the worker died
        resumable = routing_policy(tmp_path, ROUTING_POLICY + "queues:\n  default: {resumable: true}\n")
        control = Control(store, policy=resumable)
        control.pause("swept", reason="inspect")
        assert control.resume("swept", reason="go on").ok  # PENDING on the lane, never published
        assert {store.get(j).queue for j in ("due", "expired", "swept", "kept")} == {"slow"}
        without_lane = Recovery(store, broker, Policy.load(None), retry_grace=0.0, lease_ttl=0.2, sweep_after=0.0)

        def moved_home() -> bool:
            without_lane.run_once()
            return all(store.get(j).queue == "default" for j in ("due", "expired", "swept"))

        wait_for(moved_home, "the stranded jobs sent home", timeout=10)
        assert "slow" not in broker.queues  # nothing published on the removed lane
        assert {"due", "expired", "swept"} <= set(_drain(broker, "default"))
        for job_id in ("due", "expired", "swept"):
            routed = [e for e in store.events(job_id) if e.event == "routed"]
            assert routed[-1].detail == {"from": "slow", "to": "default"}, job_id
        kept = store.get("kept")  # its retry is not due yet: nothing published, nothing moved
        assert (kept.status, kept.queue) == (JobStatus.RETRY_WAIT, "slow")

        register(store, "known")
        fail_routed(store, "known")
        store.claim("known", worker_id=WORKER, lease_ttl=0.2)
        with_lane = Recovery(store, broker, routing_policy(tmp_path), lease_ttl=0.2)
        wait_for(lambda: with_lane.run_once().expired, "the lease expiry on a known lane", timeout=10)
        assert store.get("known").queue == "slow" and _drain(broker, "slow") == ["known"]
    finally:
        broker.close()


def _drain(broker: StubBroker, queue: str) -> list[str]:
    """The message ids published on `queue` (consumed)."""
    found: list[str] = []
    while broker.queues[queue].qsize():
        found.append(json.loads(broker.queues[queue].get_nowait())["message_id"])
    return found
