"""The middleware with limits on a StubBroker (SQLite store): declarations are checked when the
actor is declared, and a limit of 1 holds across a worker's threads with deferrals, not attempts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from prometheus_client import REGISTRY

import reliable
from reliable.errors import PolicyError
from reliable.states import JobStatus

from middleware_harness import Harness, make_harness
from support import wait_for

POLICY = """\
version: 1
lease: {ttl: 2s, heartbeat_interval: 200ms, recovery_interval: 200ms, sweep_after: 30s}
"""


@pytest.fixture
def setup(sqlite_url: str, tmp_path: Path) -> Iterator[Harness]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    made = make_harness(sqlite_url, tmp_path / "policy.yaml")
    yield made
    made.worker.stop()
    made.broker.close()


def test_a_bad_declaration_fails_at_the_actor(setup: Harness) -> None:
    with pytest.raises(PolicyError, match=r"actor 'charge': limits.key: the actor has no argument 'acount'"):
        @dramatiq.actor(actor_name="charge", limits=reliable.Limits(concurrency=2, key="acount"))
        def charge(account: str) -> None:
            pass
    with pytest.raises(PolicyError, match=r"actor 'quick': limits.concurrency: cannot be combined with fast_path"):
        @dramatiq.actor(actor_name="quick", fast_path=True, limits={"concurrency": 1})
        def quick() -> None:
            pass


def test_a_limit_of_one_holds_across_threads_and_deferrals_are_not_attempts(setup: Harness) -> None:
    lock = threading.Lock()
    running = [0, 0]  # now, peak

    @dramatiq.actor(actor_name="one_at_a_time", limits=reliable.Limits(concurrency=1, delay=0.05))
    def one_at_a_time() -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    def deferrals() -> float:
        return REGISTRY.get_sample_value("reliable_limit_deferrals_total", {
            "actor": "one_at_a_time", "queue": "default", "limit": "concurrency"}) or 0.0

    before = deferrals()
    messages = [one_at_a_time.send() for _ in range(6)]
    setup.worker.start()
    wait_for(lambda: all(setup.store.get(m.message_id).status is JobStatus.SUCCEEDED for m in messages),
             "6 jobs SUCCEEDED", timeout=30)
    assert running[1] == 1
    assert all(setup.store.get(m.message_id).attempt == 1 for m in messages)
    deferred = [e for m in messages for e in setup.store.events(m.message_id) if e.event == "limit_deferred"]
    assert deferred and all(e.detail["limit"] == "concurrency" for e in deferred)
    # every deferral is counted; only the 1st, 2nd, 4th... of each job is an event row
    assert deferrals() - before >= len(deferred)
