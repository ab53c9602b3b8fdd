"""The opt-in fast path (`fast_path=True`): no claim before the run, one compare-and-set after it.

On SQLite and PostgreSQL (group commit), with Dramatiq's StubBroker and a real Worker.
"""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import pytest

import reliable
from reliable.control import Control
from reliable.errors import PolicyError
from reliable.states import JobStatus

from middleware_harness import Harness
from support import wait_for


def test_a_success_commits_once_without_a_claim(setup: Harness) -> None:
    ran: list[int] = []

    @dramatiq.actor(fast_path=True)
    def add(x: int) -> int:
        ran.append(x)
        return x + 1

    messages = [add.send(i) for i in range(6)]
    setup.run()
    assert sorted(ran) == list(range(6))
    for message in messages:
        job = setup.store.get(message.message_id)
        assert job.status is JobStatus.SUCCEEDED and job.attempt == 1 and job.lease_id == 1
        assert job.worker_id == setup.middleware.worker_id and job.lease_expires_at is None
        assert setup.events(message.message_id) == ["enqueued", "fast_succeed"]
        assert setup.store.attempts(message.message_id) == []  # one write: no attempt row


def test_a_duplicate_delivery_may_run_twice_but_commits_once_and_is_recorded(setup: Harness) -> None:
    both_running = threading.Barrier(2, timeout=10)
    runs: list[str] = []

    @dramatiq.actor(fast_path=True)
    def touch() -> None:
        runs.append(threading.current_thread().name)
        both_running.wait()  # the two copies run at the same time: neither commits before the other runs

    message = touch.send()
    setup.broker.enqueue(message)  # the same message_id again, as a redelivery would
    setup.run()
    assert len(runs) == 2
    history = setup.store.events(message.message_id)
    names = [e.event for e in history]
    assert sorted(names) == ["enqueued", "fast_succeed", "stale_commit_rejected"], names
    refused = next(e for e in history if e.event == "stale_commit_rejected")
    assert refused.detail["write"] == "fast_succeed" and refused.detail["status"] == "SUCCEEDED"
    job = setup.store.get(message.message_id)
    assert job.status is JobStatus.SUCCEEDED and job.attempt == 1


@pytest.mark.parametrize("command", ["pause", "cancel"])
def test_a_pause_or_cancel_requested_before_the_run_is_honoured(setup: Harness, command: str) -> None:
    ran: list[bool] = []

    @dramatiq.actor(fast_path=True)
    def charge() -> None:
        ran.append(True)

    message = charge.send()
    control = Control(setup.store, policy=setup.middleware.policy)
    getattr(control, command)(message.message_id, reason="maintenance")
    setup.run()
    assert ran == []
    job = setup.store.get(message.message_id)
    assert job.status is (JobStatus.PAUSED if command == "pause" else JobStatus.CANCELLED)
    names = setup.events(message.message_id)
    assert "claim_refused" in names and "fast_succeed" not in names


def test_a_failure_takes_the_durable_path_and_its_retry_too(setup: Harness) -> None:
    calls: list[int] = []

    @dramatiq.actor(fast_path=True)
    def flaky() -> str:
        calls.append(reliable.current_job().attempt if len(calls) else 0)
        if len(calls) == 1:
            raise TimeoutError("upstream slow")  # transient in the test policy: retried
        return "done"

    message = flaky.send()
    setup.run()
    wait_for(lambda: setup.store.get(message.message_id).status is JobStatus.SUCCEEDED, "the retry to succeed",
             timeout=20)
    assert setup.events(message.message_id) == ["enqueued", "claim", "retry_scheduled", "claim", "succeed"]
    assert calls == [0, 2], "the retry ran on the durable path, with a claim (and current_job())"
    job = setup.store.get(message.message_id)
    assert job.attempt == 2 and job.lease_id == 2


def test_a_final_failure_is_decided_by_the_policy(setup: Harness) -> None:
    @dramatiq.actor(fast_path=True)
    def parse() -> None:
        raise ValueError("not a number")  # invalid_input in the test policy: FAILED at once

    message = parse.send()
    setup.run()
    job = setup.store.get(message.message_id)
    assert job.status is JobStatus.FAILED and job.last_error_class == "invalid_input"
    assert setup.events(message.message_id) == ["enqueued", "claim", "fail"]


def test_current_job_is_not_available_on_the_fast_path(setup: Harness) -> None:
    seen: list[str] = []

    @dramatiq.actor(fast_path=True)
    def look() -> None:
        try:
            reliable.current_job()
        except RuntimeError as exc:
            seen.append(str(exc))

    look.send()
    setup.run()
    assert len(seen) == 1 and "fast_path" in seen[0]


def test_a_message_whose_success_is_followed_runs_on_the_durable_path(setup: Harness) -> None:
    @dramatiq.actor(fast_path=True)
    def first() -> int:
        return 1

    @dramatiq.actor
    def second(value: int) -> None:
        pass

    pipe = dramatiq.pipeline([first.message(), second.message()])
    pipe.run()
    setup.run()
    wait_for(lambda: setup.store.count_by_status().get(JobStatus.SUCCEEDED, 0) == 2, "both steps", timeout=20)
    first_id = pipe.messages[0].message_id
    assert setup.events(first_id) == ["enqueued", "claim", "succeed"]


@pytest.mark.parametrize(("options", "why"), [({"resumable": True}, "resumable"),
                                              ({"idempotent": False}, "idempotent")])
def test_the_fast_path_is_refused_for_resumable_or_non_idempotent_actors(setup: Harness, options: dict[str, Any],
                                                                         why: str) -> None:
    with pytest.raises(PolicyError, match=f"actor 'risky': fast_path=True is refused.*{why}"):
        @dramatiq.actor(actor_name="risky", fast_path=True, **options)
        def risky() -> None:
            pass


def test_messages_sent_by_a_fast_path_actor_are_linked_to_it(setup: Harness) -> None:
    @dramatiq.actor
    def child() -> None:
        pass

    @dramatiq.actor(fast_path=True)
    def parent() -> None:
        child.send()

    message = parent.send()
    setup.run()
    wait_for(lambda: setup.store.count_by_status().get(JobStatus.SUCCEEDED, 0) == 2, "parent and child", timeout=20)
    [spawned] = [j for j in setup.store.list_jobs() if j.actor == "child"]
    parent_job = setup.store.get(message.message_id)
    assert spawned.parent_job_id == parent_job.job_id and spawned.trace_id == parent_job.trace_id


def test_a_fast_path_message_skipped_by_a_later_middleware_ends_cancelled(setup: Harness) -> None:
    from dramatiq.middleware import Middleware, SkipMessage

    class SkipOnce(Middleware):
        skipped: list[str] = []

        def before_process_message(self, broker: Any, message: Any) -> None:
            if not self.skipped:
                self.skipped.append(message.message_id)
                raise SkipMessage("not now")

    setup.broker.add_middleware(SkipOnce())  # after reliable's middleware
    ran: list[bool] = []

    @dramatiq.actor(fast_path=True)
    def later() -> None:
        ran.append(True)

    message = later.send()
    setup.run()
    history = setup.store.events(message.message_id)
    # Nothing was claimed before the skip: the PENDING job ends as Dramatiq ends the message.
    assert [e.event for e in history] == ["enqueued", "skipped"], history
    assert history[1].detail == {"middleware": "SkipOnce", "reason": "not now"}
    assert setup.store.get(message.message_id).status is JobStatus.CANCELLED
    assert ran == [], "the skipped delivery never ran"


def test_a_stored_fast_path_contract_never_breaks_recovery_or_control(setup: Harness) -> None:
    policy = setup.middleware.policy
    # A job stored under fast_path=True whose actor is now declared idempotent=False: the durable
    # contract applies wherever the stored and current options meet (no PolicyError).
    contract = policy.contract("sync", "default", {"fast_path": True, "idempotent": False})
    assert contract.fast_path is False and contract.idempotent is False
    with pytest.raises(PolicyError):
        policy.contract("sync", "default", {"fast_path": True, "idempotent": False}, strict=True)
