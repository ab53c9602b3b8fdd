"""Dramatiq features keep working for tracked actors (StubBroker, a real Worker, a SQLite store).

Each test names the Dramatiq behaviour it holds reliable to: Results of final failures, refused
duplicates leaving Results alone, throws, retry_when, on_retry_exhausted, per-message retry
options, retries/traceback on retried attempts, min_backoff as a floor, join(fail_fast=True),
pipelines and callbacks registered with the outcome and linked by workflow_id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage, GroupCallbacks
from dramatiq.rate_limits.backends import StubBackend as StubRateLimiterBackend
from dramatiq.results import ResultFailure, ResultMissing, Results
from dramatiq.results.backends import StubBackend
from sqlalchemy import select

import reliable
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import barriers

from support import wait_for

POLICY = """\
version: 1
defaults:
  max_attempts: 3
  backoff: {base: 20ms, cap: 100ms}
rules:
  - {name: bad-input, exception: ValueError, class: invalid_input}
"""


class Setup:
    """A StubBroker with Results, GroupCallbacks and CurrentMessage, reliable installed, a Worker."""

    def __init__(self, sqlite_url: str, policy: Path, *, results_after_install: bool = False) -> None:
        self.broker = StubBroker()
        self.broker.emit_after("process_boot")
        self.results = StubBackend()
        self.broker.add_middleware(CurrentMessage())
        self.broker.add_middleware(GroupCallbacks(StubRateLimiterBackend()))
        if not results_after_install:
            self.broker.add_middleware(Results(backend=self.results))
        dramatiq.set_broker(self.broker)
        self.middleware = reliable.install(self.broker, store=sqlite_url, policies=policy, recovery=False)
        if results_after_install:
            self.broker.add_middleware(Results(backend=self.results))
        self.store: StateStore = self.middleware.store
        self.worker = Worker(self.broker, worker_timeout=50, worker_threads=2)

    def run(self, queue: str = "default") -> None:
        self.worker.start()
        self.broker.join(queue, fail_fast=False)
        self.worker.join()

    def events(self, job_id: str) -> list[str]:
        return [e.event for e in self.store.events(job_id)]


@pytest.fixture
def setup(sqlite_url: str, tmp_path: Path) -> Iterator[Setup]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    made = Setup(sqlite_url, policy)
    yield made
    made.worker.stop()
    made.broker.close()


def test_a_final_failure_reaches_results_and_a_retried_attempt_does_not(setup: Setup) -> None:
    tries: list[int] = []

    @dramatiq.actor(store_results=True, max_retries=0)
    def doomed() -> None:
        raise RuntimeError("no luck")

    @dramatiq.actor(store_results=True)
    def flaky() -> int:
        tries.append(1)
        if len(tries) < 2:
            raise RuntimeError("first try fails")
        return 42

    dead, recovered = doomed.send(), flaky.send()
    setup.run()
    assert setup.store.get(dead.message_id).status is JobStatus.DEAD
    with pytest.raises(ResultFailure, match="RuntimeError"):
        dead.get_result(backend=setup.results, block=True, timeout=5_000)
    assert recovered.get_result(backend=setup.results, block=True, timeout=5_000) == 42
    assert setup.store.get(recovered.message_id).attempt == 2


def test_results_added_after_install_store_final_failures_too(sqlite_url: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    late = Setup(sqlite_url, policy, results_after_install=True)
    try:
        @dramatiq.actor(store_results=True)
        def invalid() -> None:
            raise ValueError("bad input")  # invalid_input: FAILED at once

        message = invalid.send()
        late.run()
        assert late.store.get(message.message_id).status is JobStatus.FAILED
        with pytest.raises(ResultFailure, match="bad input"):
            message.get_result(backend=late.results, block=True, timeout=5_000)
    finally:
        late.worker.stop()
        late.broker.close()


def test_a_refused_duplicate_never_overwrites_a_result(setup: Setup) -> None:
    @dramatiq.actor(store_results=True)
    def answer() -> int:
        return 42

    message = answer.send()
    setup.run()
    assert message.get_result(backend=setup.results) == 42
    setup.broker.enqueue(message)  # a duplicate delivery of a finished job
    setup.broker.join(answer.queue_name, fail_fast=False)
    setup.worker.join()
    assert "claim_refused" in setup.events(message.message_id)
    assert message.get_result(backend=setup.results) == 42, "the skip stored None over the result"


def test_throws_fails_at_once_and_join_fail_fast_raises_it(setup: Setup) -> None:
    calls: list[int] = []

    @dramatiq.actor(throws=(KeyError,))
    def lookup() -> None:
        calls.append(1)
        raise KeyError("missing")

    message = lookup.send()
    setup.worker.start()
    with pytest.raises(KeyError, match="missing"):
        setup.broker.join(lookup.queue_name, fail_fast=True)
    setup.worker.join()
    job = setup.store.get(message.message_id)
    assert (job.status, job.attempt, len(calls)) == (JobStatus.FAILED, 1, 1)
    failed = [e for e in setup.store.events(message.message_id) if e.event == "fail"]
    assert failed and failed[0].detail["rule"] == "actor option throws"


def test_retry_when_decides_retries_and_on_retry_exhausted_follows(setup: Setup) -> None:
    seen: list[tuple[int, str]] = []
    exhausted: list[tuple[dict[str, Any], dict[str, Any]]] = []

    @dramatiq.actor
    def give_up(message_data: dict[str, Any], info: dict[str, Any]) -> None:
        exhausted.append((message_data, info))

    # retry_when overrides max_retries (here 10): two retries, then the retries are exhausted.
    @dramatiq.actor(max_retries=10, retry_when=lambda retries, exc: retries < 2, on_retry_exhausted="give_up")
    def stubborn() -> None:
        seen.append((len(seen), "try"))
        raise RuntimeError("still down")

    message = stubborn.send()
    setup.run()
    job = setup.store.get(message.message_id)
    assert (job.status, job.attempt) == (JobStatus.DEAD, 3)
    assert len(exhausted) == 1
    data, info = exhausted[0]
    assert data["message_id"] == message.message_id
    assert info["retries"] == 2
    callback = setup.store.list_jobs(actor="give_up")[0]
    assert callback.parent_job_id == message.message_id and callback.status is JobStatus.SUCCEEDED


def test_per_message_retry_options_win_over_the_actor(setup: Setup) -> None:
    @dramatiq.actor(max_retries=5)
    def once() -> None:
        raise RuntimeError("down")

    message = once.send_with_options(max_retries=0)
    setup.run()
    job = setup.store.get(message.message_id)
    assert (job.status, job.attempt) == (JobStatus.DEAD, 1), "the message's max_retries=0 applies"


def test_retried_attempts_and_failure_callbacks_see_retries_and_traceback(setup: Setup) -> None:
    attempts: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []

    @dramatiq.actor
    def on_fail(message_data: dict[str, Any], error: dict[str, Any]) -> None:
        failures.append({"retries": message_data["options"].get("retries"), "error": error})

    @dramatiq.actor(on_failure="on_fail")
    def twice() -> None:
        options = CurrentMessage.get_current_message().options
        attempts.append({"retries": options.get("retries", 0), "traceback": options.get("traceback")})
        if len(attempts) < 3:
            raise RuntimeError(f"failure {len(attempts)}")

    twice.send()
    setup.run()
    assert [a["retries"] for a in attempts] == [0, 1, 2]
    assert attempts[0]["traceback"] is None
    assert "RuntimeError: failure 2" in attempts[2]["traceback"]
    assert sorted(f["retries"] for f in failures) == [1, 2], "on_failure runs once per failed attempt"
    assert {f["error"]["type"] for f in failures} == {"RuntimeError"}


def test_min_backoff_is_a_floor(setup: Setup) -> None:
    @dramatiq.actor(min_backoff=400, max_backoff=1_000, max_retries=1)
    def slow_to_recover() -> None:
        raise RuntimeError("down")

    message = slow_to_recover.send()
    setup.run()
    delays = [e.detail["delay"] for e in setup.store.events(message.message_id) if e.event == "retry_scheduled"]
    assert delays and all(delay >= 0.4 for delay in delays), delays


def test_pipeline_steps_and_callbacks_are_linked(setup: Setup) -> None:
    @dramatiq.actor
    def add(x: int, y: int) -> int:
        return x + y

    @dramatiq.actor
    def done(message_data: dict[str, Any], result: int) -> None:
        pass

    pipe = dramatiq.pipeline([add.message(1, 2), add.message(10), add.message_with_options(args=(100,),
                                                                                           on_success="done")])
    pipe.run()
    setup.run()
    first, second, third = (setup.store.get(m.message_id) for m in pipe.messages)
    assert [j.status for j in (first, second, third)] == [JobStatus.SUCCEEDED] * 3
    assert third.message["args"] == [100, 13]
    assert {first.workflow_id, second.workflow_id, third.workflow_id} == {first.job_id}
    assert (second.parent_job_id, third.parent_job_id) == (first.job_id, second.job_id)
    assert len({first.trace_id, second.trace_id, third.trace_id}) == 1
    callback = setup.store.list_jobs(actor="done")[0]
    assert (callback.parent_job_id, callback.workflow_id, callback.trace_id) == \
        (third.job_id, first.job_id, first.trace_id)
    assert {j.job_id for j in setup.store.list_jobs(workflow_id=first.job_id)} == \
        {first.job_id, second.job_id, third.job_id, callback.job_id}


def test_group_members_carry_the_group_id(setup: Setup) -> None:
    finished: list[int] = []

    @dramatiq.actor
    def member(n: int) -> int:
        return n

    @dramatiq.actor
    def after_all() -> None:
        finished.append(1)

    group = dramatiq.group([member.message(1), member.message(2)])
    group.add_completion_callback(after_all.message())
    group.run()
    setup.run()
    wait_for(lambda: finished == [1], "the group's completion callback")
    members = [setup.store.get(m.message_id) for m in group.children]
    workflow = {m.workflow_id for m in members}
    assert len(workflow) == 1 and None not in workflow
    group_id = workflow.pop()
    callback = setup.store.list_jobs(actor="after_all")[0]
    assert (callback.workflow_id, callback.status) == (group_id, JobStatus.SUCCEEDED)
    assert callback.parent_job_id in {m.job_id for m in members}, "the member that cleared the barrier"
    assert {j.job_id for j in setup.store.list_jobs(workflow_id=group_id)} == \
        {m.job_id for m in members} | {callback.job_id}
    with setup.store.read() as conn:
        barrier = conn.execute(select(barriers).where(barriers.c.barrier_id == group_id)).mappings().one()
    assert (barrier["parties"], barrier["remaining"]) == (2, 0), "the barrier was kept in the store"


def test_a_group_barrier_counts_each_member_once_in_its_commit(setup: Setup) -> None:
    from reliable.states import Event
    from reliable.store import FanIn, NewJob

    store = setup.store
    assert store.create_barrier("g1", 2) and not store.create_barrier("g1", 2)
    for job_id in ("m1", "m2"):
        store.register(NewJob(job_id=job_id, queue="default", actor="member", message={}, workflow_id="g1"))
    callback = NewJob(job_id="cb", queue="default", actor="after_all", message={}, workflow_id="g1")
    first = store.claim("m1", worker_id="w", lease_ttl=30)
    second = store.claim("m2", worker_id="w", lease_ttl=30)
    failed = FanIn("g1", [callback])
    store.finish("m1", first.lease_id, Event.FAIL, fan_in=failed)
    assert not failed.cleared and store.find("cb") is None, "only a success arrives at the barrier"
    store.transition("m1", Event.RESTART, operator="test", reason="run it again", dispatch=True)
    again = store.claim("m1", worker_id="w", lease_ttl=30)
    arrived = FanIn("g1", [callback])
    store.finish("m1", again.lease_id, Event.SUCCEED, fan_in=arrived)
    assert (arrived.known, arrived.cleared) == (True, False) and store.find("cb") is None
    last = FanIn("g1", [callback])
    store.finish("m2", second.lease_id, Event.SUCCEED, fan_in=last)
    assert last.cleared and store.get("cb").status is JobStatus.PENDING
    unknown = FanIn("no-such-group", [])
    store.register(NewJob(job_id="m3", queue="default", actor="member", message={}))
    third = store.claim("m3", worker_id="w", lease_ttl=30)
    store.finish("m3", third.lease_id, Event.SUCCEED, fan_in=unknown)
    assert (unknown.known, unknown.cleared) == (False, False)


def test_follow_ups_commit_with_the_outcome_or_not_at_all(setup: Setup) -> None:
    """A stale worker's success registers no next step: the follow-ups live in its transaction."""
    from reliable.errors import LeaseLost
    from reliable.states import Event
    from reliable.store import NewJob

    store = setup.store
    store.register(NewJob(job_id="parent", queue="default", actor="add", message={"args": []}))
    stale = store.claim("parent", worker_id="w1", lease_ttl=0.01)
    follower = NewJob(job_id="next-step", queue="default", actor="add", message={"args": []},
                      parent_job_id="parent")

    def follow(status: JobStatus) -> list[NewJob]:
        return [follower] if status is JobStatus.SUCCEEDED else []

    wait_for(lambda: store.expired_leases(), "the lease to expire")
    store.transition("parent", Event.LEASE_EXPIRED, lease_id=stale.lease_id, lease_expired=True)
    fresh = store.claim("parent", worker_id="w2", lease_ttl=30)
    with pytest.raises(LeaseLost):
        store.finish("parent", stale.lease_id, Event.SUCCEED, follow_ups=follow)
    assert store.find("next-step") is None, "a refused outcome registered its follow-up"
    done = store.finish("parent", fresh.lease_id, Event.SUCCEED, follow_ups=follow)
    assert done.status is JobStatus.SUCCEEDED
    registered = store.get("next-step")
    assert registered.status is JobStatus.PENDING and registered.parent_job_id == "parent"
    assert json.loads(json.dumps(registered.message)) == {"args": []}


def test_a_group_mixing_tracked_and_untracked_members_completes(setup: Setup) -> None:
    """Every member's success arrives at the store's barrier, an untracked one's in its own commit."""
    finished: list[int] = []

    @dramatiq.actor
    def tracked(n: int) -> int:
        return n

    @dramatiq.actor(reliable=False)
    def untracked(n: int) -> int:
        return n

    @dramatiq.actor
    def after_all() -> None:
        finished.append(1)

    group = dramatiq.group([tracked.message(1), untracked.message(2), untracked.message(3)])
    group.add_completion_callback(after_all.message())
    group.run()
    setup.run()
    wait_for(lambda: finished == [1], "the mixed group's completion callback")
    callback = setup.store.list_jobs(actor="after_all")[0]
    assert callback.status is JobStatus.SUCCEEDED
    with setup.store.read() as conn:
        barrier = conn.execute(select(barriers).where(barriers.c.barrier_id == callback.workflow_id)
                               ).mappings().one()
    assert (barrier["parties"], barrier["remaining"]) == (3, 0)


def test_a_group_created_before_group_callbacks_was_adopted_completes_on_dramatiqs_barrier(
        sqlite_url: str) -> None:
    """GroupCallbacks added after install, and a group run before reliable saw it: Dramatiq's barrier
    decides, and the callback (tracked) is registered before it is published (no claim `not_found`)."""
    broker = StubBroker()
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    middleware = reliable.install(broker, store=sqlite_url, recovery=False)
    worker = Worker(broker, worker_timeout=50, worker_threads=2)
    worker.start()
    broker.add_middleware(GroupCallbacks(StubRateLimiterBackend()))  # after the worker booted
    finished: list[int] = []
    try:
        @dramatiq.actor
        def member(n: int) -> int:
            return n

        @dramatiq.actor(reliable=False)
        def untracked_member(n: int) -> int:
            return n

        @dramatiq.actor
        def after_all(n: int) -> None:
            finished.append(n)

        for callback_arg, children in ((1, [member.message(1), member.message(2)]),
                                       (2, [untracked_member.message(1), untracked_member.message(2)])):
            group = dramatiq.group(children)
            group.add_completion_callback(after_all.message(callback_arg))
            group.run()
        wait_for(lambda: sorted(finished) == [1, 2], "both groups' completion callbacks")
        callbacks = middleware.store.list_jobs(actor="after_all")
        assert sorted(j.status.value for j in callbacks) == ["SUCCEEDED", "SUCCEEDED"]
    finally:
        worker.stop()
        broker.close()


def test_a_callback_that_cannot_be_built_never_costs_the_next_pipeline_step(setup: Setup) -> None:
    @dramatiq.actor(on_success="no_such_actor")
    def first(n: int) -> int:
        return n

    @dramatiq.actor
    def second(n: int, previous: int) -> int:
        return n + previous

    pipe = dramatiq.pipeline([first.message(1), second.message(2)])
    pipe.run()
    setup.run()
    assert setup.store.get(pipe.messages[1].message_id).status is JobStatus.SUCCEEDED


def test_a_claim_that_fails_never_stores_a_result(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    @dramatiq.actor(store_results=True)
    def answer() -> int:
        return 42

    calls: list[str] = []

    def broken_claim(*args: Any, **kwargs: Any) -> Any:
        calls.append("claim")
        raise RuntimeError("the store answered nonsense")

    monkeypatch.setattr(setup.middleware.store, "claim", broken_claim)
    message = answer.send()
    setup.run()
    assert calls, "the claim was tried"
    with pytest.raises(ResultMissing):
        setup.results.get_result(message)


def test_a_pipeline_inside_a_group_belongs_to_the_group(setup: Setup) -> None:
    finished: list[int] = []

    @dramatiq.actor
    def step(n: int, previous: int | None = None) -> int:
        return n

    @dramatiq.actor
    def after_all() -> None:
        finished.append(1)

    pipe = dramatiq.pipeline([step.message(1), step.message(2)])
    group = dramatiq.group([pipe, step.message(3)])
    group.add_completion_callback(after_all.message())
    group.run()
    setup.run()
    wait_for(lambda: finished == [1], "the group's completion callback")
    callback = setup.store.list_jobs(actor="after_all")[0]
    in_group = {j.job_id for j in setup.store.list_jobs(workflow_id=callback.workflow_id)}
    expected = {m.message_id for m in pipe.messages} | {group.children[1].message_id, callback.job_id}
    assert in_group == expected, "the pipeline's steps belong to the group, not a workflow of their own"
