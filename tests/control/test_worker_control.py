"""Acceptance of issue 5: operator commands on a real worker, real RabbitMQ and real PostgreSQL.

Each test gets its own queue, a RabbitmqBroker with reliable installed, and a Dramatiq Worker in
this process; commands go through `reliable.control.Control`, writing only to the store (plus the
broker for immediate dispatch), exactly as the CLI does.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq import Worker

import reliable
from reliable.control import Control
from reliable.errors import ControlRefused
from reliable.operators import Operator
from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import JobStatus
from reliable.store import StateStore

from support import RABBITMQ_URL, port_open, require_service, wait_for

pytestmark = pytest.mark.integration

POLICY = """\
version: 1
lease:
  ttl: 3s
  heartbeat_interval: 300ms
  recovery_interval: 300ms
  sweep_after: 2s
  retry_grace: 1s
"""
OPS = Operator("oncall", "test-host", "test")


@dataclass
class Rig:
    broker: Any
    store: StateStore
    worker: Worker
    queue: str
    policy: Policy
    pages: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # job -> [(attempt, page)]
    compensated: list[str] = field(default_factory=list)

    def status(self, job_id: str) -> JobStatus:
        return self.store.get(job_id).status

    def wait_status(self, job_id: str, status: JobStatus, timeout: float = 20.0) -> None:
        wait_for(lambda: self.status(job_id) is status, f"job {job_id} in {status.value}", timeout=timeout)

    def control(self, **kw: Any) -> Control:
        return Control(self.store, broker=self.broker, identity=OPS, **kw)


@pytest.fixture
def rig(pg_database: str, tmp_path: Path) -> Iterator[Rig]:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    broker = RabbitmqBroker(url=RABBITMQ_URL)
    broker.emit_after("process_boot")
    middleware = reliable.install(broker, store=pg_database, policies=policy)
    queue = f"control-{uuid.uuid4().hex[:8]}"
    rig = Rig(broker, middleware.store, Worker(broker, worker_timeout=100, worker_threads=2), queue, middleware.policy)

    @dramatiq.actor(broker=broker, queue_name=queue, resumable=True, checkpoint_schema=1,
                    compensation="undo_pages", stop_grace=2)
    def paged(job_key: str, last_page: int, effects: bool = False) -> None:
        job = reliable.current_job()
        start = job.checkpoint_value or 0
        for page in range(start, last_page):
            rig.pages.setdefault(job_key, []).append((job.attempt, page))
            if effects:
                job.record_effect(page)
            time.sleep(0.1)
            job.checkpoint(page + 1)

    @dramatiq.actor(broker=broker, queue_name=queue)
    def undo_pages(job_id: str) -> None:
        rig.compensated.append(job_id)

    @dramatiq.actor(broker=broker, queue_name=queue, stop_grace=1)
    def stubborn(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:  # never checkpoints: only forced termination stops it
            time.sleep(0.05)

    rig.paged = paged  # type: ignore[attr-defined]
    rig.stubborn = stubborn  # type: ignore[attr-defined]
    rig.worker.start()
    yield rig
    rig.worker.stop()
    for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
        with contextlib.suppress(Exception):  # already gone or channel closed: the name is unique anyway
            broker.channel.queue_delete(name)
    broker.close()
    rig.store.close()


def started(rig: Rig, job_key: str, pages: int = 2) -> None:
    wait_for(lambda: len(rig.pages.get(job_key, [])) >= pages, what=f"{job_key} running {pages} pages")


def test_pause_lands_in_paused_at_the_next_checkpoint_and_resume_continues(rig: Rig) -> None:
    message = rig.paged.send("p", 40)  # type: ignore[attr-defined]
    job_id = message.message_id
    started(rig, "p")
    result = rig.control().pause(job_id, reason="downstream maintenance")
    assert result.outcome == "requested"
    rig.wait_status(job_id, JobStatus.PAUSED, timeout=10)
    paused = rig.store.get(job_id)
    assert paused.checkpoint is not None and paused.checkpoint > 0
    assert max(page for _, page in rig.pages["p"]) == paused.checkpoint - 1  # stopped right after the unit
    # Nothing dispatches a paused job: not even a recovery pass that sweeps every job at once.
    report = Recovery(rig.store, rig.broker, rig.policy, sweep_after=0, retry_grace=0).run_once()
    assert job_id not in (*report.expired, *report.retried, *report.redispatched), report
    assert rig.status(job_id) is JobStatus.PAUSED
    resumed = rig.control().resume(job_id, reason="maintenance over")
    assert resumed.dispatched
    rig.wait_status(job_id, JobStatus.SUCCEEDED, timeout=30)
    job = rig.store.get(job_id)
    second = [page for attempt, page in rig.pages["p"] if attempt == 2]
    assert second[0] == paused.checkpoint and second[-1] == 39  # continued from the checkpoint
    assert job.job_id == job_id and job.attempt == 2 and len(rig.store.attempts(job_id)) == 2
    events = [(e.event, e.operator) for e in rig.store.events(job_id)]
    assert ("pause_requested", "oncall") in events and ("pause_observed", None) in events
    assert ("resume", "oncall") in events


def test_stop_lands_in_stopped(rig: Rig) -> None:
    job_id = rig.paged.send("s", 40).message_id  # type: ignore[attr-defined]
    started(rig, "s")
    assert rig.control().stop(job_id, reason="runaway").job.status is JobStatus.STOPPING  # type: ignore[union-attr]
    rig.wait_status(job_id, JobStatus.STOPPED, timeout=10)
    assert "stop_observed" in [e.event for e in rig.store.events(job_id)]
    assert rig.store.get(job_id).checkpoint is not None


def test_stop_past_grace_escalates_and_terminates(rig: Rig) -> None:
    job_id = rig.stubborn.send(60).message_id  # type: ignore[attr-defined]
    rig.wait_status(job_id, JobStatus.RUNNING)
    rig.control().stop(job_id, reason="stuck")
    rig.wait_status(job_id, JobStatus.STOPPED, timeout=30)
    events = [e.event for e in rig.store.events(job_id)]
    assert "escalation" in events and "force_stop" in events


def test_cancel_of_a_running_job_runs_its_compensation(rig: Rig) -> None:
    job_id = rig.paged.send("c", 40, True).message_id  # type: ignore[attr-defined]
    started(rig, "c", 3)
    result = rig.control().cancel(job_id, reason="customer withdrew")
    assert result.event == "cancel_requested"
    rig.wait_status(job_id, JobStatus.CANCELLED, timeout=10)
    wait_for(lambda: job_id in rig.compensated, what="compensation run")
    assert "compensation_enqueued" in [e.event for e in rig.store.events(job_id)]


def test_cancel_of_a_paused_job_with_effects_enqueues_the_compensation(rig: Rig) -> None:
    job_id = rig.paged.send("cp", 40, True).message_id  # type: ignore[attr-defined]
    started(rig, "cp", 2)
    rig.control().pause(job_id, reason="test")
    rig.wait_status(job_id, JobStatus.PAUSED, timeout=10)
    result = rig.control().cancel(job_id, reason="not needed any more")
    assert result.compensation == "undo_pages" and result.job.status is JobStatus.CANCELLED  # type: ignore[union-attr]
    wait_for(lambda: job_id in rig.compensated, what="compensation run")


def test_two_racing_resumes_one_winner_and_one_run(rig: Rig) -> None:
    job_id = rig.paged.send("r", 30).message_id  # type: ignore[attr-defined]
    started(rig, "r")
    rig.control().pause(job_id, reason="test")
    rig.wait_status(job_id, JobStatus.PAUSED, timeout=10)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def contender(name: str) -> None:
        control = Control(rig.store, broker=rig.broker, identity=Operator(name, "h", "test"))
        barrier.wait()
        try:
            control.resume(job_id, reason="race")
            outcomes.append("won")
        except ControlRefused as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=contender, args=(f"op{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("won") == 1, outcomes
    rig.wait_status(job_id, JobStatus.SUCCEEDED, timeout=30)
    assert rig.store.get(job_id).attempt == 2  # one resumed attempt, not two
    assert [e.event for e in rig.store.events(job_id)].count("resume") == 1


def test_resume_refused_on_an_incompatible_checkpoint_schema(rig: Rig) -> None:
    job_id = rig.paged.send("x", 30).message_id  # type: ignore[attr-defined]
    started(rig, "x")
    rig.control().pause(job_id, reason="test")
    rig.wait_status(job_id, JobStatus.PAUSED, timeout=10)
    # The actor was redeployed with checkpoint_schema=2: the stored checkpoint (schema 1) is unusable.
    upgraded = Control(rig.store, identity=OPS, actor_options={"paged": {"resumable": True, "checkpoint_schema": 2}})
    with pytest.raises(ControlRefused, match="schema 1 but actor 'paged' now expects 2"):
        upgraded.resume(job_id, reason="test")
    assert rig.status(job_id) is JobStatus.PAUSED
    assert rig.store.events(job_id)[-1].event == "command_refused"
