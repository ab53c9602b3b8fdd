"""Review of issue 24 (reliable/worker/, delivery digest, another middleware's skip): behaviour that
differs with the middleware order or lets a send with other arguments through without an error."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.middleware import Middleware, SkipMessage

from reliable.dispatch import message_for
from reliable.errors import JobIdConflict
from reliable.middleware import ReliableMiddleware
from reliable.states import Event, JobStatus

from middleware_harness import Harness, make_harness
from support import wait_for

ORDERS = ["before", "after"]


@pytest.fixture
def setup(store_url: str, policy_file: Path) -> Iterator[Harness]:
    made = make_harness(store_url, policy_file, metrics=False, json_logs=False)
    yield made
    made.close()


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


def test_a_copy_of_a_sent_message_with_other_arguments_gets_an_error_from_send(setup: Harness) -> None:
    """Issue 24: a producer that sends a new message under an existing job's id with other
    arguments gets JobIdConflict from send(). A copy of a message already sent (Message.copy keeps
    its id and its options, `reliable_registered` among them) is not registered at all: it is
    published, and only the worker refuses and dead-letters it."""

    @dramatiq.actor
    def charge(amount: int) -> None:
        pass

    sent = charge.send(1)
    with pytest.raises(JobIdConflict):
        setup.broker.enqueue(sent.copy(args=(666,)))


class DefaultTimeLimit(Middleware):
    """An app's middleware that gives every message a time limit when it is enqueued (Dramatiq
    reads `time_limit` from the message first): added after `reliable.install`, so its
    before_enqueue runs after reliable's registration."""

    def before_enqueue(self, broker: dramatiq.Broker, message: Any, delay: int | None) -> None:
        message.options.setdefault("time_limit", 60_000)


def test_an_option_another_middleware_sets_at_enqueue_does_not_refuse_the_jobs_own_message(setup: Harness) -> None:
    """The digest is computed from the message as reliable registered it, before the middleware
    after it in the list adds a behaviour-choosing option to the message that is published: every
    delivery of the job is then refused as a forgery, dead-lettered, and the job never runs."""
    setup.broker.add_middleware(DefaultTimeLimit())
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
@pytest.mark.parametrize("fast", [True, False], ids=["fast_path", "durable"])
def test_a_skipped_duplicate_does_not_cancel_a_fast_path_run_in_progress(setup: Harness, order: str,
                                                                         fast: bool) -> None:
    """A fast-path run writes nothing before it ends: its job stays PENDING while it runs. A
    duplicate copy of its message (the sweeper's re-publish of a PENDING job, a redelivery) that
    another middleware skips then ends that job CANCELLED (`skips.end_unclaimed`: PENDING, version
    unchanged), and the run's success is discarded. The same duplicate of a durable run is ignored
    (the job is RUNNING)."""
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
