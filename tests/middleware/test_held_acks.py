"""A fast-path success is acknowledged only once it has committed, and its worker thread does not
wait for the commit (reliable.worker.acks).

PostgreSQL (group commit), Dramatiq's StubBroker and a real Worker. The commit is held by a lock on
the job's row, taken from another connection: the delivery stays unacknowledged (the StubBroker's
queue counts it unfinished) while the worker thread has already moved on to the next message.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from queue import PriorityQueue
from typing import Any

import dramatiq
import pytest
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker
from dramatiq.results import Results
from dramatiq.results.backends import StubBackend
from dramatiq.worker import ConsumerThread

from reliable import current_job
from reliable.control import Control
from reliable.rabbitmq.acks import Acked
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.worker.acks import HeldAcks, _Held

from middleware_harness import Harness, make_harness
from support import row_locked, wait_for, waiting_on_a_lock


@pytest.fixture
def pg(pg_store: StateStore, pg_database: str, policy_file: Path) -> Iterator[Harness]:
    made = make_harness(pg_database, policy_file, metrics=False, json_logs=False)
    yield made
    made.close()


def unacked(setup: Harness, queue: str = "default") -> int:
    return int(setup.broker.queues[queue].unfinished_tasks)


def test_the_ack_waits_for_the_commit_but_the_worker_thread_does_not(pg: Harness) -> None:
    ran: list[int] = []

    @dramatiq.actor(fast_path=True)
    def step(n: int) -> None:
        ran.append(n)

    blocked = step.send(0)
    with row_locked(pg.store.engine, blocked.message_id):
        pg.worker.start()
        # Job 0's thread found no batch under way: it leads its own, which waits for the row.
        wait_for(lambda: ran == [0] and waiting_on_a_lock(pg.store.engine), "the run done, its success's batch blocked")
        assert pg.store.get(blocked.message_id).status is JobStatus.PENDING and unacked(pg) == 1
        # Job 1's success queues behind that batch: its thread hands it over and goes on (Dramatiq
        # marks the work item done), while its acknowledgement stays held.
        queued = step.send(1)
        wait_for(lambda: ran == [0, 1] and pg.worker.work_queue.unfinished_tasks == 1,
                 "job 1's thread done with it")
        assert pg.store.get(queued.message_id).status is JobStatus.PENDING
        assert unacked(pg) == 2, "acknowledged before its success committed"
        assert pg.middleware.acks.held == 2
    pg.join()
    assert unacked(pg) == 0
    for message in (blocked, queued):
        job = pg.store.get(message.message_id)
        assert job.status is JobStatus.SUCCEEDED and job.attempt == 1
        assert pg.events(message.message_id) == ["enqueued", "fast_succeed"]


def test_a_success_refused_after_the_run_is_settled_and_acknowledged(
        pg: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Cancelled during its run: its batch's guard refuses the success; the settling thread records
    the refusal the waited way (the stale run), then the delivery is acknowledged."""
    ran: list[bool] = []
    control = Control(pg.store, policy=pg.middleware.policy)
    target: list[str] = []

    @dramatiq.actor(fast_path=True)
    def charge() -> None:
        control.cancel(target[0], reason="changed mind")
        ran.append(True)

    message = charge.message()
    target.append(message.message_id)
    pg.broker.enqueue(message)
    with caplog.at_level(logging.WARNING, logger="reliable.middleware"):
        pg.run()
    assert ran == [True] and unacked(pg) == 0
    assert pg.store.get(message.message_id).status is JobStatus.CANCELLED
    names = pg.events(message.message_id)
    assert "fast_succeed" not in names and "stale_commit_rejected" in names, names
    assert "fast-path result discarded" in caplog.text
    assert pg.middleware.acks.settled == 1


def test_a_shutdown_waits_for_the_held_acks_before_the_consumers_stop(pg: Harness) -> None:
    @dramatiq.actor(fast_path=True)
    def step() -> None:
        pass

    message = step.send()
    with row_locked(pg.store.engine, message.message_id) as lock:
        pg.worker.start()
        wait_for(lambda: waiting_on_a_lock(pg.store.engine), "the success's batch blocked")
        assert pg.middleware.acks.drain(timeout=0.01) is False  # still held: the shutdown would wait
        lock.rollback()  # the row free: the batch commits and the delivery is acknowledged
        assert pg.middleware.acks.drain(timeout=30) is True
    assert unacked(pg) == 0 and pg.store.get(message.message_id).status is JobStatus.SUCCEEDED
    assert not pg.middleware.acks.enabled, "after the drain each success is waited for again"
    step.send()
    pg.join()
    assert unacked(pg) == 0 and pg.middleware.acks.held == 1


def test_with_results_the_success_is_waited_for(pg_store: StateStore, pg_database: str, policy_file: Path) -> None:
    """Dramatiq's Results stores a value only for a success the store kept (`store_results`):
    known only after the commit, so no acknowledgement is held."""
    setup = make_harness(pg_database, policy_file, metrics=False, json_logs=False)
    setup.broker.add_middleware(Results(backend=StubBackend()))
    try:
        @dramatiq.actor(fast_path=True, store_results=True)
        def add(x: int) -> int:
            return x + 1

        message = add.send(1)
        setup.run()
        assert setup.store.get(message.message_id).status is JobStatus.SUCCEEDED
        assert message.get_result(block=True, timeout=5000) == 2
        assert not setup.middleware.acks.enabled and setup.middleware.acks.held == 0
    finally:
        setup.close()


def test_on_sqlite_the_success_is_waited_for(sqlite_url: str, policy_file: Path) -> None:
    setup = make_harness(sqlite_url, policy_file, metrics=False, json_logs=False)
    try:
        @dramatiq.actor(fast_path=True)
        def step() -> None:
            pass

        message = step.send()
        setup.run()
        assert setup.store.get(message.message_id).status is JobStatus.SUCCEEDED
        assert not setup.middleware.acks.enabled and setup.middleware.acks.held == 0
    finally:
        setup.close()


def test_a_durable_success_is_held_with_its_lease_until_it_commits(pg: Harness) -> None:
    """D (durable) ends while L's fast-path success blocks the batch under way: D's success queues
    behind it and D's thread goes on; D stays RUNNING with its lease renewed and its delivery
    unacknowledged until its success commits."""
    d_may_end = threading.Event()
    ran: list[str] = []
    lock = contextlib.ExitStack()
    blocked = dramatiq.Message(queue_name="default", actor_name="fast", args=(), kwargs={}, options={})

    @dramatiq.actor
    def durable() -> None:
        ran.append("D")
        d_may_end.wait(30)

    @dramatiq.actor(fast_path=True)
    def fast() -> None:
        lock.enter_context(row_locked(pg.store.engine, blocked.message_id))  # its own success will wait
        ran.append("L")

    d = durable.send()
    pg.worker.start()
    wait_for(lambda: ran == ["D"], "D running")
    heartbeat = pg.middleware.runtime.heartbeat
    assert heartbeat is not None
    with lock:
        pg.broker.enqueue(blocked)
        wait_for(lambda: ran == ["D", "L"] and waiting_on_a_lock(pg.store.engine), "L's success blocking the batch")
        d_may_end.set()
        wait_for(lambda: pg.worker.work_queue.unfinished_tasks == 1, "D's thread done with D")
        assert pg.store.get(d.message_id).status is JobStatus.RUNNING
        assert d.message_id in {held.job_id for held in heartbeat.held()}, "its lease is renewed until the commit"
        assert unacked(pg) == 2, "acknowledged before its success committed"
    pg.join()
    assert unacked(pg) == 0 and pg.store.get(d.message_id).status is JobStatus.SUCCEEDED
    assert d.message_id not in {held.job_id for held in heartbeat.held()}
    assert pg.events(d.message_id) == ["enqueued", "claim", "succeed"]
    assert pg.middleware.acks.held == 2


@pytest.mark.parametrize("store_kind", ["sqlite", "postgresql"])
def test_a_durable_success_refused_by_its_batch_ends_as_a_waited_one_does(
        store_kind: str, sqlite_url: str, pg_database: str, pg_store: StateStore, policy_file: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Its lease taken by another worker during the run: the success's batch refuses it; settled the
    waited way, it is recorded and discarded as where the success is waited for (SQLite)."""
    setup = make_harness(pg_database if store_kind == "postgresql" else sqlite_url, policy_file,
                         metrics=False, json_logs=False)
    try:
        @dramatiq.actor
        def charge() -> None:
            job = current_job()  # as if recovery had expired the lease and another worker claimed the job
            assert setup.store.return_claim(job.job_id, job.fencing_token, worker_id="test") is not None
            setup.store.claim(job.job_id, worker_id="thief", lease_ttl=60)

        message = charge.send()
        with caplog.at_level(logging.WARNING, logger="reliable.middleware"):
            setup.run()
        assert unacked(setup) == 0
        job = setup.store.get(message.message_id)
        assert (job.status, job.worker_id) == (JobStatus.RUNNING, "thief")
        assert setup.events(message.message_id) == [
            "enqueued", "claim", "claim_returned", "claim", "stale_commit_rejected"], setup.events(message.message_id)
        assert "its lease 1 was reassigned" in caplog.text
        assert setup.middleware.acks.settled == (1 if store_kind == "postgresql" else 0)
    finally:
        setup.close()


def test_a_queue_of_fast_path_actors_prefetches_for_its_held_acks(
        pg: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held acknowledgements take prefetch slots: the consumer of a queue whose actors are all on
    the fast path prefetches up to one batch (64) more; a queue with a durable actor keeps
    Dramatiq's prefetch (2 x threads), and so does every queue when the app set its own."""
    @dramatiq.actor(queue_name="quick", fast_path=True)
    def quick() -> None:
        pass

    @dramatiq.actor(queue_name="mixed", fast_path=True)
    def quick_too() -> None:
        pass

    @dramatiq.actor(queue_name="mixed")
    def durable() -> None:
        pass

    def prefetches() -> dict[str, int]:
        return {name: thread.consumer.inner.prefetch for name, thread in pg.worker.consumers.items()
                if thread.consumer is not None and not name.endswith(".DQ")}

    pg.worker.start()
    wait_for(lambda: {"quick", "mixed"} <= set(prefetches()), "the consumers",
             context=lambda: f"{prefetches()} {list(pg.worker.consumers)}")
    assert prefetches() == {"quick": 16, "mixed": 8}  # 4 threads: Dramatiq's 8
    acks = pg.middleware.acks
    assert acks.prefetch("quick", 100) == 164 and acks.prefetch("mixed", 100) == 100
    monkeypatch.setattr("dramatiq.worker.QUEUE_PREFETCH", 8)  # dramatiq_queue_prefetch=8: the app's own
    assert acks.prefetch("quick", 8) == 8
    monkeypatch.undo()
    acks.drain(timeout=1)  # no longer held: nothing to make room for
    assert acks.prefetch("quick", 8) == 8


def test_without_held_acks_every_queue_keeps_dramatiqs_prefetch(sqlite_url: str, policy_file: Path) -> None:
    setup = make_harness(sqlite_url, policy_file, metrics=False, json_logs=False)
    try:
        @dramatiq.actor(queue_name="quick", fast_path=True)
        def quick() -> None:
            pass

        setup.worker.start()
        wait_for(lambda: setup.worker.consumers.get("quick") is not None
                 and setup.worker.consumers["quick"].consumer is not None, "the consumer")
        assert setup.worker.consumers["quick"].consumer.inner.prefetch == 8
    finally:
        setup.close()


def test_a_held_entry_never_takes_another_deliverys_ack() -> None:
    """An entry keeps its own delivery: another delivery that finds the same id (an address reused
    once a stale entry's delivery is gone) is acknowledged at once, and never released by it."""
    acks = HeldAcks()
    first, second = object(), object()
    acked: list[object] = []
    acks._held[id(second)] = _Held(first, consumer=None)  # as if `first` had lived at `second`'s address
    acks._post_process(acked.append, second)
    assert acked == [second]
    acks.release(second)
    assert id(second) in acks._held, "not released by another delivery"


def _stub_deliveries(count: int) -> tuple[ConsumerThread, list[MessageProxy], queue.Queue[Any]]:
    """A StubBroker consumer thread (not started) and `count` deliveries it received: its
    `post_process_message` is Dramatiq's own, and acknowledging marks the stub queue's task done."""
    broker = StubBroker()
    broker.declare_queue("q")
    for n in range(count):
        broker.enqueue(dramatiq.Message(queue_name="q", actor_name="a", args=(n,), kwargs={}, options={}))
    thread = ConsumerThread(broker=broker, queue_name="q", prefetch=count, work_queue=PriorityQueue(),
                            worker_timeout=100)
    thread.consumer = broker.consume("q", prefetch=count)
    received = [MessageProxy(message) for message in itertools.islice(filter(None, thread.consumer), count)]
    return thread, received, broker.queues["q"]


def _held(thread: ConsumerThread, message: MessageProxy) -> _Held:
    held = _Held(message, thread)
    held.due = thread.post_process_message
    return held


def test_acks_that_cannot_go_together_go_one_by_one_through_dramatiq(caplog: pytest.LogCaptureFixture) -> None:
    """What `ack_together` leaves (or all of a group, when it fails) goes through Dramatiq's own
    post_process_message, once each; a group sent together counts one hand-off."""
    acks = HeldAcks()
    thread, messages, stub_queue = _stub_deliveries(6)
    group = [_held(thread, message) for message in messages]
    acks._together = lambda consumer, given: Acked(list(given[1:3]), len(given) - 2)
    acks._ack(group[:3])
    assert stub_queue.unfinished_tasks == 4 and acks.handoffs == 1  # two acknowledged by Dramatiq's own path

    def broken(consumer: object, given: list[object]) -> Acked:
        raise RuntimeError("unexpected")

    acks._together = broken
    with caplog.at_level(logging.ERROR, logger="reliable.middleware"):
        acks._ack(group[3:])
    assert stub_queue.unfinished_tasks == 1 and acks.handoffs == 1
    assert "acknowledging 3 deliveries together failed; one by one instead" in caplog.text


def test_an_apps_own_post_process_is_never_bypassed() -> None:
    acks = HeldAcks()
    thread, (message,), _ = _stub_deliveries(1)
    together: list[object] = []
    acks._together = lambda consumer, given: (together.extend(given), Acked([], len(given)))[1]
    overridden: list[object] = []
    held = _Held(message, thread)
    held.due = overridden.append  # an app's override (or another wrapper) of post_process_message
    acks._ack([held])
    assert overridden == [message] and together == [] and acks.handoffs == 0


def test_the_due_acks_are_sent_together_per_consumer_then_forgotten() -> None:
    acks = HeldAcks()
    (first, first_messages, _), (second, second_messages, _) = _stub_deliveries(2), _stub_deliveries(1)
    calls: list[tuple[object, list[object]]] = []
    acks._together = lambda consumer, given: (calls.append((consumer, list(given))), Acked([], len(given)))[1]
    due = [_held(first, first_messages[0]), _held(second, second_messages[0]), _held(first, first_messages[1])]
    for held in due:
        acks._held[id(held.message)] = held
    acks._ack_due(due)
    assert calls == [(first, first_messages), (second, second_messages)] and acks.handoffs == 2
    assert acks._held == {}


def test_a_batchs_acks_are_sent_by_the_thread_that_ran_its_callbacks() -> None:
    """Inside `together` (a group-commit batch's callbacks) the acknowledgements released go out
    when it ends, from that thread, those of one consumer in one hand-off: no acknowledging thread
    is woken for them. What cannot go together (an app's own post_process_message) still goes to
    the acknowledging thread, and is acknowledged there."""
    acks = HeldAcks()
    thread, messages, stub_queue = _stub_deliveries(3)
    calls: list[tuple[str, list[object]]] = []

    def together(consumer: object, given: list[object]) -> Acked:
        calls.append((threading.current_thread().name, list(given)))
        return Acked([], len(given))

    acks._together = together
    overridden: list[object] = []
    due = [_held(thread, message) for message in messages[:2]]
    own = _Held(messages[2], thread)
    own.due = overridden.append  # an app's override of post_process_message
    for held in [*due, own]:
        acks._held[id(held.message)] = held
    with acks.together():
        for held in [*due, own]:
            acks.release(held.message)
        assert calls == [] and acks._acking is None, "sent before the batch's callbacks all ran"
    assert calls == [(threading.current_thread().name, messages[:2])] and acks.handoffs == 1
    wait_for(lambda: overridden == [messages[2]], "the app's own acknowledgement, in the acknowledging thread")
    wait_for(lambda: acks._held == {}, "every entry forgotten")
    assert stub_queue.unfinished_tasks == 3  # the stub `together` sent nothing; the override acks nothing


def test_an_acknowledging_thread_that_cannot_start_leaves_the_acks_held_and_the_batch_unharmed(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """`together` never raises into the group commit (its callbacks thread, or its flusher while it
    leads, would die): when the acknowledging thread cannot start, what it was to acknowledge stays
    held, and goes with the next hand-off once a thread starts."""
    acks = HeldAcks()
    thread, (message,), _ = _stub_deliveries(1)
    overridden: list[object] = []
    held = _Held(message, thread)
    held.due = overridden.append  # an app's post_process_message: never sent together
    acks._held[id(message)] = held
    start = HeldAcks._start

    def no_thread(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(HeldAcks, "_start", staticmethod(no_thread))
    with caplog.at_level(logging.ERROR, logger="reliable.middleware"), acks.together():
        acks.release(message)
    assert "the acknowledging thread could not start: 1 acknowledgements left held" in caplog.text
    assert acks._acking is None and acks._held == {id(message): held} and overridden == []
    monkeypatch.setattr(HeldAcks, "_start", staticmethod(start))
    thread_two, (later,), _ = _stub_deliveries(1)
    after = _Held(later, thread_two)
    after.due = overridden.append
    acks._held[id(later)] = after
    acks.release(later)
    wait_for(lambda: overridden == [message, later], "both acknowledged by the thread started next")
    wait_for(lambda: acks._held == {}, "every entry forgotten")
