"""The middleware end to end on Dramatiq's StubBroker and a real SQLite store."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import dramatiq
import pytest

import reliable
from reliable.control import Control
from reliable.dispatch import dispatch
from reliable.states import Event, JobStatus

from support import wait_for

Harness = Any


def events(h: Harness, job_id: str) -> list[str]:
    return [e.event for e in h.store.events(job_id)]


def test_jobs_succeed_with_full_history(harness: Harness) -> None:
    seen: list[tuple[str, int]] = []

    @dramatiq.actor
    def add(x: int, y: int) -> None:
        job = reliable.current_job()
        seen.append((job.job_id, job.fencing_token))

    messages = [add.send(i, i) for i in range(5)]
    harness.worker.start()
    harness.join()
    for message in messages:
        job = harness.store.get(message.message_id)
        assert job.status is JobStatus.SUCCEEDED and job.attempt == 1 and job.lease_id == 1
        assert job.trace_id and job.message["args"] == list(message.args)
        assert events(harness, message.message_id) == ["enqueued", "claim", "succeed"]
    assert sorted(job_id for job_id, _ in seen) == sorted(m.message_id for m in messages)


def test_redelivered_duplicate_never_runs_twice(harness: Harness) -> None:
    runs: list[str] = []

    @dramatiq.actor
    def once() -> None:
        runs.append(reliable.current_job().job_id)

    message = once.send()
    harness.broker.enqueue(message)  # the same message_id again, as a redelivery would
    harness.worker.start()
    harness.join()
    assert runs == [message.message_id]
    history = harness.store.events(message.message_id)
    names = [e.event for e in history]
    # The copy runs in another thread: it is refused while the first still runs, or after it finished.
    assert names[:2] == ["enqueued", "claim"] and sorted(names[2:]) == ["claim_refused", "succeed"], names
    assert history[names.index("claim_refused")].detail["reason"] in ("finished", "held")


def test_transient_error_is_retried_by_policy_not_by_dramatiq(harness: Harness) -> None:
    attempts: list[int] = []

    @dramatiq.actor(max_retries=20)
    def flaky() -> None:
        job = reliable.current_job()
        attempts.append(job.attempt)
        if job.attempt < 3:
            raise TimeoutError("upstream slow")

    message = flaky.send()
    harness.worker.start()
    harness.join()
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.SUCCEEDED)
    harness.join()
    assert attempts == [1, 2, 3]
    job = harness.store.get(message.message_id)
    assert job.retry_count == 2 and job.attempt == 3
    history = harness.store.events(message.message_id)
    retries = [e for e in history if e.event == "retry_scheduled"]
    assert len(retries) == 2 and all(e.error_class == "transient" for e in retries)
    assert all(0 <= e.detail["delay"] <= 0.2 for e in retries)
    assert retries[0].error_type == "builtins.TimeoutError" and retries[0].error_message == "upstream slow"


def test_failures_follow_the_policy(harness: Harness) -> None:
    @dramatiq.actor
    def bad_input() -> None:
        raise ValueError("amount must be positive")

    @dramatiq.actor
    def forbidden() -> None:
        raise PermissionError("token revoked")

    @dramatiq.actor
    def always_down() -> None:
        raise ConnectionError("refused")

    b, f, d = bad_input.send(), forbidden.send(), always_down.send()
    harness.worker.start()
    wait_for(lambda: harness.store.get(d.message_id).status is JobStatus.DEAD)
    harness.join()
    assert harness.store.get(b.message_id).status is JobStatus.FAILED
    assert harness.store.get(b.message_id).attempt == 1, "invalid input fails fast"
    assert harness.store.get(f.message_id).status is JobStatus.STOPPED
    assert "alert" in events(harness, f.message_id)
    dead = harness.store.get(d.message_id)
    assert dead.attempt == 3 and dead.last_error_class == "transient"
    # As under Dramatiq's Retries, a job that ends FAILED or DEAD has its message failed (nacked):
    # StubBroker dead-letters it; a STOPPED job is acknowledged (an operator may resume it).
    dead_lettered = sorted(m.message_id for m in harness.broker.dead_letters)
    assert dead_lettered == sorted([b.message_id, d.message_id])


def test_untracked_actor_keeps_dramatiq_retries(harness: Harness) -> None:
    calls: list[int] = []

    @dramatiq.actor(reliable=False, max_retries=1, min_backoff=10, max_backoff=20)
    def legacy() -> None:
        calls.append(1)
        raise RuntimeError("boom")

    message = legacy.send()
    harness.worker.start()
    harness.join()
    assert len(calls) == 2, "Dramatiq's Retries still applies to actors reliable does not track"
    assert harness.store.find(message.message_id) is None


def test_checkpoint_pause_and_resume_from_checkpoint(harness: Harness) -> None:
    gate = threading.Event()
    starts: list[int] = []

    @dramatiq.actor(resumable=True)
    def export(pages: int) -> None:
        job = reliable.current_job()
        start = job.checkpoint_value or 0
        starts.append(start)
        for page in range(start, pages):
            if page == 3:
                gate.wait(5)
            assert job.record_effect(page)
            job.checkpoint(page + 1)

    message = export.send(6)
    harness.worker.start()
    wait_for(lambda: harness.store.get(message.message_id).checkpoint == 3)
    job = harness.store.get(message.message_id)
    harness.store.transition(job.job_id, Event.PAUSE_REQUEST, expected_version=job.version, operator="alice",
                             reason="db maintenance")
    gate.set()
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.PAUSED)
    paused = harness.store.get(message.message_id)
    assert paused.checkpoint == 4, "the unit in progress finished and was checkpointed"
    resumed = harness.store.transition(paused.job_id, Event.RESUME, expected_version=paused.version,
                                       operator="alice", dispatch=True)
    dispatch(harness.broker, resumed)
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.SUCCEEDED)
    harness.join()
    assert starts == [0, 4]
    final = harness.store.get(message.message_id)
    assert final.attempt == 2 and final.checkpoint == 6
    assert len(harness.store.effects(message.message_id)) == 6
    assert [e.event for e in harness.store.events(message.message_id) if e.event != "checkpoint"] == [
        "enqueued", "claim", "pause_requested", "pause_observed", "resume", "claim", "succeed"]


def test_stale_worker_commit_is_rejected(harness: Harness) -> None:
    release = threading.Event()
    stolen = threading.Event()

    @dramatiq.actor
    def slow() -> None:
        job = reliable.current_job()
        stolen.wait(5)
        release.wait(5)
        job.checkpoint("late")  # raises LeaseLostInterrupt: the lease was reassigned

    message = slow.send()
    harness.worker.start()
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.RUNNING)
    job = harness.store.get(message.message_id)
    # Another worker takes over after a (simulated) lease expiry.
    harness.store.transition(job.job_id, Event.LEASE_EXPIRED, expected_version=job.version, lease_id=job.lease_id)
    takeover = harness.store.claim(job.job_id, worker_id="other", lease_ttl=30)
    stolen.set()
    release.set()
    harness.join()
    harness.store.finish(job.job_id, takeover.lease_id, Event.SUCCEED, worker_id="other")
    final = harness.store.get(job.job_id)
    assert final.status is JobStatus.SUCCEEDED and final.worker_id == "other"
    stale = [e for e in harness.store.events(job.job_id) if e.event == "stale_commit_rejected"]
    assert stale and stale[0].lease_id == job.lease_id


def test_current_job_outside_an_actor() -> None:
    with pytest.raises(RuntimeError, match="only available inside"):
        reliable.current_job()


def test_enqueue_many_registers_in_bulk(harness: Harness) -> None:
    @dramatiq.actor
    def tick(n: int) -> None:
        pass

    messages = [tick.message(i) for i in range(50)]
    assert harness.middleware.enqueue_many(harness.broker, messages) == 50
    harness.worker.start()
    harness.join()
    assert harness.store.count_by_status() == {JobStatus.SUCCEEDED: 50}
    assert events(harness, messages[0].message_id) == ["enqueued", "claim", "succeed"]


class _Response:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers


class RateLimited(Exception):
    """Shaped like httpx.HTTPStatusError: the policy reads .response.status_code and its headers."""

    def __init__(self, retry_after: str) -> None:
        super().__init__("429 Too Many Requests")
        self.response = _Response(429, {"Retry-After": retry_after})


def test_rate_limited_job_waits_at_least_retry_after(harness: Harness) -> None:
    started: list[float] = []

    @dramatiq.actor
    def call_api() -> None:
        started.append(time.monotonic())
        if len(started) == 1:
            raise RateLimited("1")

    message = call_api.send()
    harness.worker.start()
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.SUCCEEDED)
    assert started[1] - started[0] >= 1.0, "Retry-After: 1 was honoured"
    retry = next(e for e in harness.store.events(message.message_id) if e.event == "retry_scheduled")
    assert retry.error_class == "rate_limited" and retry.detail["delay"] >= 1.0 and retry.detail["rate_limited"]


@pytest.mark.parametrize("policy_file", [{"max_retries": 2}], indirect=True)
def test_a_requeued_job_gets_a_fresh_budget_of_rate_limited_retries(harness: Harness) -> None:
    calls: list[int] = []

    @dramatiq.actor
    def call_api() -> None:
        calls.append(1)
        if len(calls) in (1, 2, 3, 4, 5):
            raise RateLimited("0")

    message = call_api.send()
    harness.worker.start()
    store = harness.store
    wait_for(lambda: store.get(message.message_id).status is JobStatus.DEAD, "3 rate-limited attempts: DEAD")
    assert len(calls) == 3  # 2 rate-limited retries, then over the cap of 2
    Control(store, broker=harness.broker).requeue(message.message_id, reason="partner raised our quota")
    # Two more rate-limited failures fit a fresh budget of 2; the third attempt after the requeue succeeds.
    wait_for(lambda: store.get(message.message_id).status in (JobStatus.SUCCEEDED, JobStatus.DEAD),
             "the requeued job to end")
    assert store.get(message.message_id).status is JobStatus.SUCCEEDED and len(calls) == 6


def test_a_rate_limited_retry_is_one_info_line_in_dramatiqs_log(harness: Harness,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    @dramatiq.actor
    def call_api() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RateLimited("0")
        raise ValueError("a real bug")

    caplog.set_level(logging.INFO, logger="dramatiq.worker.WorkerThread")
    message = call_api.send()
    harness.worker.start()
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.FAILED)
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records
             if r.name == "dramatiq.worker.WorkerThread" and "call_api" in r.getMessage()]
    expected = re.compile(r"Message call_api\(\) was rate limited \(.*policy\.yaml:\d+ \(http-429\)\): "
                          r"reliable retries it on its rate-limit budget\.")
    assert any(level == "INFO" and not traceback and expected.fullmatch(text) for level, text, traceback in lines), \
        lines
    # The bug keeps Dramatiq's ERROR line with its traceback.
    assert ("ERROR", "Failed to process message call_api() with unhandled exception.", True) in lines, lines
    assert sum(level == "ERROR" for level, _, _ in lines) == 1


def test_ambiguous_side_effect_goes_to_review_without_retry(harness: Harness) -> None:
    calls: list[int] = []

    @dramatiq.actor(idempotent=False)
    def charge() -> None:
        calls.append(1)
        raise ConnectionResetError("bank closed the connection after the request was sent")

    message = charge.send()
    harness.worker.start()
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.REVIEW)
    harness.join()
    assert calls == [1], "never retried automatically"
    job = harness.store.get(message.message_id)
    assert job.last_error_class == "side_effect_unknown" and job.attempt == 1


def test_stale_attempt_in_the_same_process_cannot_commit_with_the_new_lease(harness: Harness) -> None:
    """A re-claimed job re-delivered to the same process: the old thread is stopped, the new one wins."""
    first_started = threading.Event()
    release_first = threading.Event()
    runs: list[int] = []

    @dramatiq.actor
    def sticky() -> None:
        job = reliable.current_job()
        runs.append(job.fencing_token)
        if job.fencing_token == 1:
            first_started.set()
            release_first.wait(5)
            job.checkpoint("stale")  # must raise: lease 1 was reassigned

    message = sticky.send()
    harness.worker.start()
    assert first_started.wait(5)
    job = harness.store.get(message.message_id)
    harness.store.transition(job.job_id, Event.LEASE_EXPIRED, expected_version=job.version, lease_id=1, dispatch=True)
    dispatch(harness.broker, harness.store.get(job.job_id))  # lands in this process, another thread
    wait_for(lambda: harness.store.get(message.message_id).status is JobStatus.SUCCEEDED)
    release_first.set()
    harness.join()
    final = harness.store.get(message.message_id)
    assert final.status is JobStatus.SUCCEEDED and final.lease_id == 2 and final.attempt == 2
    assert sorted(runs) == [1, 2]
    assert harness.middleware._heartbeat is not None and harness.middleware._heartbeat.held() == []


def test_an_interrupt_landing_as_the_attempt_enters_leaves_no_lease_held(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost lease's interrupt (or a duplicate claim's) landing just after the attempt entered
    escapes Dramatiq's before-hooks: the after-hook still finds the attempt and ends it, and the
    heartbeat stops renewing its lease."""
    from reliable.errors import LeaseLostInterrupt
    from reliable.worker.context import JobContext

    enter = JobContext.enter

    def interrupted_on_entering(self: JobContext) -> bool:
        assert enter(self)
        raise LeaseLostInterrupt("lost as the run began")

    monkeypatch.setattr(JobContext, "enter", interrupted_on_entering)
    ran: list[str] = []

    @dramatiq.actor
    def never_runs() -> None:
        ran.append("ran")

    message = never_runs.send()
    harness.worker.start()
    harness.join()
    assert ran == []
    assert "claim" in events(harness, message.message_id)
    assert harness.middleware._heartbeat is not None and harness.middleware._heartbeat.held() == []
