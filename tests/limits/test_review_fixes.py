"""Limits around a delivery, on a StubBroker (SQLite store): only a delivery whose claim can win
spends a slot or a token, a deferral moves the job's dispatch time (the sweeper publishes no extra
copy), the fast path never runs under a concurrency limit, and a key that cannot be computed fails
the job instead of leaving it PENDING."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest

import reliable
from reliable.states import JobStatus

from middleware_harness import Harness, make_harness
from support import wait_for

POLICY = """\
version: 1
lease: {ttl: 1s, heartbeat_interval: 200ms, recovery_interval: 200ms, sweep_after: 1s}
actors:
  slow_fast: {fast_path: true, idempotent: true}
"""


@pytest.fixture
def setup(sqlite_url: str, tmp_path: Path) -> Iterator[Harness]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    made = make_harness(sqlite_url, tmp_path / "policy.yaml")
    yield made
    made.worker.stop()
    made.broker.close()


def test_a_policy_fast_path_does_not_escape_a_concurrency_limit(setup: Harness) -> None:
    """The run outlasts the lease TTL (the slot's TTL before a claim): on the fast path (no claim)
    the slot would free itself mid-run and a second run would start."""
    lock = threading.Lock()
    running = [0, 0]  # now, peak

    @dramatiq.actor(actor_name="slow_fast", limits=reliable.Limits(concurrency=1, delay=0.1))
    def slow_fast() -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(1.5)
        with lock:
            running[0] -= 1

    msgs = [slow_fast.send() for _ in range(2)]
    setup.worker.start()
    wait_for(lambda: all(setup.store.get(m.message_id).status is JobStatus.SUCCEEDED for m in msgs), "both done",
             timeout=30)
    assert running[1] == 1
    assert all(setup.store.get(m.message_id).attempt == 1 for m in msgs)
    assert all("claim" in setup.events(m.message_id) for m in msgs)  # the durable path, not fast_succeed


def test_a_raising_key_callable_fails_the_job_naming_actor_and_callable(setup: Harness) -> None:
    def account_of(account: str, **_: object) -> str:
        return account

    @dramatiq.actor(actor_name="keyed", limits=reliable.Limits(concurrency=1, key=account_of))
    def keyed(**kwargs: object) -> None:
        pass

    msg = keyed.send_with_options(kwargs={"other": 1})  # account_of raises TypeError
    setup.worker.start()
    wait_for(lambda: setup.store.get(msg.message_id).status is JobStatus.FAILED, "the job failed", timeout=10)
    job = setup.store.get(msg.message_id)
    assert job.last_error_type == "TypeError" and job.last_error_class == "limits_key"
    assert job.last_error_message is not None
    assert "'keyed'" in job.last_error_message and "account_of" in job.last_error_message


def test_a_duplicate_of_a_finished_job_spends_no_token(setup: Harness) -> None:
    @dramatiq.actor(actor_name="rated", limits=reliable.Limits(rate="2/1h", shards=1))
    def rated() -> None:
        pass

    first = rated.send()
    setup.worker.start()
    wait_for(lambda: setup.store.get(first.message_id).status is JobStatus.SUCCEEDED, "first done", timeout=10)
    setup.broker.enqueue(first.copy())  # a redelivered duplicate: refused before any token
    setup.join()
    assert "claim_refused" in setup.events(first.message_id)
    second = rated.send()  # the bucket's second token is still there
    wait_for(lambda: setup.store.get(second.message_id).status is JobStatus.SUCCEEDED, "second done", timeout=10)
    assert "limit_deferred" not in setup.events(second.message_id)


def test_a_bouncing_deferred_job_is_not_stale_for_the_sweeper(setup: Harness) -> None:
    @dramatiq.actor(actor_name="busy", limits=reliable.Limits(concurrency=1, delay=0.1))
    def busy(t: float) -> None:
        time.sleep(t)

    holder = busy.send(4.0)
    setup.worker.start()
    wait_for(lambda: setup.store.get(holder.message_id).status is JobStatus.RUNNING, "the slot held", timeout=10)
    sent = time.monotonic()
    waiting = busy.send(0.0)
    # The 8th deferral (its 4th event row) well past sweep_after (1 s) since it was sent.
    wait_for(lambda: time.monotonic() - sent > 1.5
             and setup.store.count_job_events(waiting.message_id, "limit_deferred") >= 4, "deferred a while",
             timeout=10)
    assert setup.store.get(waiting.message_id).status is JobStatus.PENDING
    assert waiting.message_id not in [j.job_id for j in setup.store.stale_pending(age=1.0)]
    wait_for(lambda: setup.store.get(waiting.message_id).status is JobStatus.SUCCEEDED, "ran after", timeout=15)
    assert setup.store.get(waiting.message_id).attempt == 1
