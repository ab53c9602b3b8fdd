"""Retry routing through the middleware: StubBroker, real Worker threads, both databases.

One worker consumes the job's own queue, another only the slow lane (as `dramatiq app -Q slow`
would): the lane is declared at boot from the policy, so the second worker finds it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.middleware import CurrentMessage

import reliable
from reliable.states import JobStatus

from middleware_harness import Harness, make_harness
from support import wait_for

POLICY = """\
version: 1
lease: {ttl: 2s, heartbeat_interval: 200ms, recovery_interval: 200ms, sweep_after: 1s, retry_grace: 500ms}
defaults:
  max_attempts: 2
  backoff: {base: 20ms, cap: 50ms}
queues:
  default: {max_attempts: 5}
classes:
  slow_timeout: {action: retry, queue: slow}
rules:
  - {name: timeouts, exception: TimeoutError, class: slow_timeout}
  - {name: refused, exception: ConnectionRefusedError, class: transient}
"""


@pytest.fixture
def harness(store_url: str, tmp_path: Path) -> Iterator[tuple[Harness, Worker]]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    made = make_harness(store_url, policy, threads=2)
    made.broker.add_middleware(CurrentMessage())
    made.worker = Worker(made.broker, worker_timeout=50, worker_threads=2, queues={"default"})
    slow = Worker(made.broker, worker_timeout=50, worker_threads=2, queues={"slow"})
    yield made, slow
    slow.stop()
    made.close()


def test_a_routed_retry_runs_on_the_slow_lane_with_the_jobs_own_contract(
        harness: tuple[Harness, Worker]) -> None:
    made, slow = harness
    seen: list[tuple[int, str]] = []
    lock = threading.Lock()
    plan = {1: TimeoutError("slow upstream"), 2: TimeoutError("still slow"), 3: ConnectionRefusedError("down")}

    @dramatiq.actor
    def export() -> str:
        attempt = reliable.current_job().attempt
        with lock:
            seen.append((attempt, CurrentMessage.get_current_message().queue_name))
        if attempt in plan:
            raise plan[attempt]
        return "done"

    made.worker.start()
    slow.start()
    message = export.send()
    job = wait_for(lambda: (j := made.store.get(message.message_id)).status is JobStatus.SUCCEEDED and j,
                   "the job to succeed", timeout=20)
    # attempts 1 on its own queue; 2 and 3 (TimeoutError: slow_timeout) on the slow lane, consumed by
    # the slow worker only; attempt 3's ConnectionRefusedError is transient: attempt 4 back home.
    assert seen == [(1, "default"), (2, "slow"), (3, "slow"), (4, "default")]
    # the job's contract is its own queue's (max_attempts 5), not the lane's (2): it was not DEAD at 2
    assert job.attempt == 4 and (job.queue, job.home_queue) == ("default", "default")
    events = made.store.events(message.message_id)
    routes = [e.detail for e in events if e.event == "routed"]
    assert routes == [{"from": "default", "to": "slow"}, {"from": "slow", "to": "default"}]
    assert [e.queue for e in events if e.event == "claim"] == ["default", "slow", "slow", "default"]
    assert [(e.detail or {}).get("queue") for e in events if e.event == "retry_scheduled"] == ["slow", "slow", None]
