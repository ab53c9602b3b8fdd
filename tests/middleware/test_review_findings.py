"""Review of issue 24 (reliable/worker/, delivery digest, another middleware's skip): behaviour that
differs with the middleware order or lets a send with other arguments through without an error."""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import pytest
from dramatiq.middleware import Middleware, SkipMessage

from reliable.dispatch import message_for
from reliable.middleware import ReliableMiddleware
from reliable.states import Event, JobStatus

from middleware_harness import Harness
from support import wait_for

ORDERS = ["before", "after"]


class SkipAll(Middleware):
    """An app's middleware that skips every delivery (a cancel, an expiry, a de-duplication)."""

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        raise SkipMessage("not wanted")


def _add(setup: Harness, middleware: Middleware, order: str) -> None:
    broker = setup.broker
    if order == "before":
        broker.add_middleware(middleware, before=ReliableMiddleware)
    else:
        broker.add_middleware(middleware)


@pytest.mark.parametrize("order", ORDERS)
def test_a_skipped_retry_of_a_job_with_effects_is_compensated_in_both_orders(setup: Harness, order: str) -> None:
    """A job whose first attempt applied an effect and failed waits for its retry; another
    middleware skips the retry's delivery, which ends the job CANCELLED. A cancelled job with
    effects gets its compensation (or a `partial_effects_remain` event) on every other path
    (worker, recovery, operator): here only when reliable had claimed it first ("after")."""

    @dramatiq.actor
    def refund(job_id: str) -> None:
        pass

    @dramatiq.actor(compensation="refund")
    def charge() -> None:
        pass

    store = setup.store
    message = charge.send()  # queued; the worker is not started yet
    claim = store.claim(message.message_id, worker_id="w-first", lease_ttl=30.0)
    store.record_effect(message.message_id, claim.lease_id, "unit-0", attempt_id=claim.attempt_id)
    store.finish(message.message_id, claim.lease_id, Event.RETRY, worker_id="w-first", retry_delay=0.0)
    _add(setup, SkipAll(), order)  # the queued message is now the due retry's delivery

    setup.run()

    assert store.get(message.message_id).status is JobStatus.CANCELLED
    events = setup.events(message.message_id)
    assert "skipped" in events
    assert "compensation_enqueued" in events, events


def test_a_copy_of_a_sent_message_with_other_arguments_never_runs(setup: Harness) -> None:
    """A copy of a message already sent (Message.copy keeps its id and its options, the mark
    `reliable_registered` among them) is not registered again, so send() cannot compare it: the
    worker refuses it (delivery_mismatch, dead-lettered) and the job's own message runs once."""
    ran: list[int] = []

    @dramatiq.actor
    def charge(amount: int) -> None:
        ran.append(amount)

    sent = charge.send(1)
    setup.broker.enqueue(sent.copy(args=(666,)))
    setup.run()

    assert ran == [1]
    assert setup.store.get(sent.message_id).status is JobStatus.SUCCEEDED
    assert "delivery_mismatch" in setup.events(sent.message_id)
    assert [m.message_id for m in setup.broker.dead_letters] == [sent.message_id]


class DefaultTimeLimit(Middleware):
    """An app's middleware that gives every message a time limit when it is enqueued (Dramatiq
    reads `time_limit` from the message first): added after `reliable.install`, so its
    before_enqueue runs after reliable's registration."""

    def before_enqueue(self, broker: dramatiq.Broker, message: Any, delay: int | None) -> None:
        message.options.setdefault("time_limit", 60_000)


def test_a_middleware_changing_messages_after_reliable_is_named_at_the_first_send(
        setup: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Its before_enqueue runs after the registration: an option it sets is not in the registered
    digest and every delivery would be refused. The first send names it and the fix."""
    setup.broker.add_middleware(DefaultTimeLimit())

    @dramatiq.actor
    def work(n: int) -> None:
        pass

    with caplog.at_level("WARNING", logger="reliable.middleware"):
        work.send(1)
        work.send(2)
    warnings = [r.getMessage() for r in caplog.records if "DefaultTimeLimit" in r.getMessage()]
    assert len(warnings) == 1 and "before=reliable.ReliableMiddleware" in warnings[0]


def test_a_middleware_changing_messages_before_reliable_keeps_its_jobs_running(setup: Harness) -> None:
    """Added before reliable's (the documented fix), the option it sets is registered with the job."""
    setup.broker.add_middleware(DefaultTimeLimit(), before=ReliableMiddleware)
    ran: list[int] = []

    @dramatiq.actor
    def work(n: int) -> None:
        ran.append(n)

    message = work.send(1)
    setup.run()

    assert ran == [1], setup.events(message.message_id)
    assert setup.store.get(message.message_id).status is JobStatus.SUCCEEDED


class SkipSeenIds(Middleware):
    """An app's own de-duplication by message id: the first delivery of an id runs, any later copy
    is skipped (what the issue names as "an app's own de-duplication")."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        if message.message_id in self.seen:
            raise SkipMessage("duplicate")
        self.seen.add(message.message_id)


class SkipsDone(Middleware):
    """First in the broker's list, so last to see `after_skip_message`: every other middleware's
    after_skip_message (reliable's among them) has returned when it sets `done`."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        self.done.set()


@pytest.mark.parametrize("order", ORDERS)
def test_a_skipped_duplicate_does_not_cancel_a_durable_run_in_progress(setup: Harness, order: str) -> None:
    """A duplicate copy of a running job's message (the sweeper's re-publish, a redelivery) that
    another middleware skips leaves the run alone: the job is RUNNING, not waiting for a delivery.
    (A fast-path run writes nothing before it ends, so its job is PENDING while it runs and such a
    skip ends it: docs/compatibility.md, the fast path's limits.)"""
    fast = False
    _add(setup, SkipSeenIds(), order)
    skips = SkipsDone()
    setup.broker.middleware.insert(0, skips)
    started, release = threading.Event(), threading.Event()

    @dramatiq.actor(fast_path=fast)
    def slow() -> None:
        started.set()
        release.wait(30)

    message = slow.send()
    setup.worker.start()
    wait_for(started.is_set, "the fast-path run to start", timeout=10)
    duplicate = message_for(setup.store.get(message.message_id))  # as the sweeper re-publishes it
    setup.broker.enqueue(duplicate)
    wait_for(skips.done.is_set, "the duplicate to be skipped", timeout=10)
    release.set()
    setup.join()

    events = setup.events(message.message_id)
    assert setup.store.get(message.message_id).status is JobStatus.SUCCEEDED, events
