"""Another middleware's skip is final (reliable.worker.skips): dramatiq-abort's cancel and abort,
Dramatiq's AgeLimit and an app's own SkipMessage, with the other middleware before and after
reliable's, on both stores. The skipped actor never runs and the sweeper never publishes it again."""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import pytest
from dramatiq.common import current_millis
from dramatiq.middleware import AgeLimit, Middleware, SkipMessage
from dramatiq.results import ResultFailure, Results
from dramatiq.results.backends import StubBackend as ResultsStub
from dramatiq_abort import Abortable, abort
from dramatiq_abort.backends import StubBackend
from dramatiq_abort.middleware import AbortMode

from reliable.middleware import ReliableMiddleware
from reliable.recovery import Recovery
from reliable.states import Event, JobStatus
from reliable.store import JobEvent

from middleware_harness import Harness
from support import wait_for

ORDERS = ["before", "after"]


def _add(setup: Harness, middleware: Middleware, order: str) -> None:
    """Add `middleware` before or after reliable's (replacing one of its type already there)."""
    broker = setup.broker
    broker.middleware[:] = [m for m in broker.middleware if type(m) is not type(middleware)]
    if order == "before":
        broker.add_middleware(middleware, before=ReliableMiddleware)
    else:
        broker.add_middleware(middleware)
    assert (broker.middleware.index(middleware) < broker.middleware.index(setup.middleware)) == (order == "before")


def _last(setup: Harness, job_id: str) -> JobEvent:
    return setup.store.events(job_id)[-1]


def _never_published_again(setup: Harness, job_id: str, status: JobStatus) -> None:
    """A sweep with every PENDING job overdue publishes nothing, and the job stays where it ended."""
    report = Recovery(setup.store, setup.broker, setup.middleware.policy, sweep_after=0.0, retry_grace=0.0).run_once()
    assert job_id not in report.redispatched and job_id not in report.retried, report
    assert setup.store.get(job_id).status is status


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("fast", [False, True], ids=["durable", "fast_path"])
def test_a_message_cancelled_with_dramatiq_abort_ends_cancelled(setup: Harness, order: str, fast: bool) -> None:
    abortable = Abortable(backend=StubBackend())
    _add(setup, abortable, order)
    ran: list[bool] = []

    @dramatiq.actor(fast_path=fast)
    def cancelled() -> None:
        ran.append(True)

    message = cancelled.send()
    abort(message.message_id, middleware=abortable, mode=AbortMode.CANCEL)
    setup.run()

    job = setup.store.get(message.message_id)
    assert job.status is JobStatus.CANCELLED and ran == []
    last = _last(setup, job.job_id)
    assert last.event == "skipped" and last.detail == {"middleware": "Abortable", "reason": None}
    # Before reliable's claim (other middleware first, or the fast path) nothing was claimed.
    claimed = order == "after" and not fast
    assert (last.from_status == "RUNNING") == claimed and setup.events(job.job_id).count("claim") == int(claimed)
    _never_published_again(setup, job.job_id, JobStatus.CANCELLED)


@pytest.mark.parametrize("order", ORDERS)
def test_a_message_agelimit_expired_ends_failed(setup: Harness, order: str) -> None:
    _add(setup, AgeLimit(), order)
    ran: list[bool] = []

    @dramatiq.actor
    def expiring() -> None:
        ran.append(True)

    old = expiring.message_with_options(max_age=60_000)
    message = setup.broker.enqueue(old.copy(message_timestamp=current_millis() - 120_000))
    setup.run()

    job = setup.store.get(message.message_id)
    assert job.status is JobStatus.FAILED and ran == []
    last = _last(setup, job.job_id)
    assert last.event == "skipped_failed"
    assert last.detail == {"middleware": "AgeLimit", "reason": "Message age limit exceeded"}
    assert [m.message_id for m in setup.broker.dead_letters] == [job.job_id]  # failed: nacked, as in Dramatiq
    _never_published_again(setup, job.job_id, JobStatus.FAILED)


def test_a_forged_delivery_another_middleware_skips_first_leaves_the_real_job_alone(setup: Harness) -> None:
    """AgeLimit runs before reliable's claim: an old forged message with a PENDING job's id is skipped
    there, and must not end the job it is not the message of (its digest differs)."""
    _add(setup, AgeLimit(), "before")
    ran: list[int] = []

    @dramatiq.actor(max_age=60_000)
    def charge(amount: int) -> None:
        ran.append(amount)

    genuine = charge.send_with_options(args=(1,), delay=1_000)  # registered now, delivered in a second
    forged = charge.message(666).copy(message_id=genuine.message_id, message_timestamp=current_millis() - 120_000)
    setup.broker.queues["default"].put(forged.encode())  # published by a producer without reliable
    setup.run()
    setup.join("default.DQ")
    setup.join("default")

    job = setup.store.get(genuine.message_id)
    assert job.status is JobStatus.SUCCEEDED and ran == [1]
    assert "skipped" not in setup.events(job.job_id) and "skipped_failed" not in setup.events(job.job_id)


class SkipDuplicates(Middleware):
    """An app's own de-duplication: skips the messages whose `dedup` key it has seen."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    @property
    def actor_options(self) -> set[str]:
        return {"dedup"}

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        key = message.options.get("dedup")
        if key in self.seen:
            raise SkipMessage(f"duplicate of {key}")
        if key is not None:
            self.seen.add(key)


@pytest.mark.parametrize("order", ORDERS)
def test_an_apps_own_skip_ends_cancelled_and_a_finished_job_is_untouched(setup: Harness, order: str) -> None:
    dedup = SkipDuplicates()
    dedup.seen.add("k1")
    _add(setup, dedup, order)
    ran: list[int] = []

    @dramatiq.actor
    def work(n: int) -> None:
        ran.append(n)

    skipped = work.send_with_options(args=(1,), dedup="k1")
    done = work.send_with_options(args=(2,), dedup="k2")
    setup.run()
    assert ran == [2]
    assert setup.store.get(skipped.message_id).status is JobStatus.CANCELLED
    assert _last(setup, skipped.message_id).detail == {"middleware": "SkipDuplicates", "reason": "duplicate of k1"}

    # A duplicate delivery of a finished job, skipped: the job keeps its outcome.
    history = setup.events(done.message_id)
    setup.broker.enqueue(done)
    setup.join()
    assert setup.store.get(done.message_id).status is JobStatus.SUCCEEDED
    # reliable refuses it first when it comes first (claim_refused); nothing else is written.
    assert [e for e in setup.events(done.message_id) if e != "claim_refused"] == history
    _never_published_again(setup, skipped.message_id, JobStatus.CANCELLED)


def test_reliables_own_skip_is_not_final(setup: Harness) -> None:
    """A refused claim (here: the job is paused) leaves the job as it was."""
    ran: list[bool] = []

    @dramatiq.actor
    def paused() -> None:
        ran.append(True)

    message = paused.send()
    setup.store.transition(message.message_id, Event.PAUSE)
    setup.run()
    assert ran == [] and setup.store.get(message.message_id).status is JobStatus.PAUSED
    assert "skipped" not in setup.events(message.message_id)


def test_a_running_job_aborted_with_dramatiq_abort_ends_cancelled(setup: Harness) -> None:
    abortable = Abortable(backend=StubBackend())
    _add(setup, abortable, "after")
    started, finished = threading.Event(), threading.Event()

    @dramatiq.actor
    def long_running() -> None:
        started.set()
        while not finished.wait(0.01):  # interrupted here by dramatiq-abort's Abort
            pass

    message = long_running.send()
    setup.worker.start()
    try:
        assert started.wait(30), "the actor never started"
        abort(message.message_id, middleware=abortable, mode=AbortMode.ABORT)
        job = wait_for(lambda: (j := setup.store.get(message.message_id)).status.value in ("CANCELLED", "RETRY_WAIT",
                                                                                          "FAILED") and j,
                       "the aborted job's outcome", timeout=30)
    finally:
        finished.set()
    assert job.status is JobStatus.CANCELLED, setup.events(message.message_id)
    last = _last(setup, job.job_id)
    assert last.event == "aborted" and last.detail == {"interrupt": "Abort", "middleware": "Abortable"}
    _never_published_again(setup, job.job_id, JobStatus.CANCELLED)


@pytest.mark.parametrize("order", ORDERS)
def test_results_of_a_skip_are_dramatiqs(setup: Harness, order: str) -> None:
    """As without reliable: None for a cancelled message, the failure for a failed one."""
    backend = ResultsStub()
    setup.broker.add_middleware(Results(backend=backend))
    dedup = SkipDuplicates()
    dedup.seen.add("k1")
    _add(setup, dedup, order)
    _add(setup, AgeLimit(), order)

    @dramatiq.actor(store_results=True)
    def answer() -> int:
        return 42

    cancelled = answer.send_with_options(dedup="k1")
    expired = setup.broker.enqueue(answer.message_with_options(max_age=60_000).copy(
        message_timestamp=current_millis() - 120_000))
    setup.run()
    assert setup.store.get(cancelled.message_id).status is JobStatus.CANCELLED
    assert cancelled.get_result(backend=backend) is None
    assert setup.store.get(expired.message_id).status is JobStatus.FAILED
    with pytest.raises(ResultFailure):
        expired.get_result(backend=backend)


def test_a_retrys_delivery_skipped_before_the_claim_ends_the_job(setup: Harness) -> None:
    """The job waits in RETRY_WAIT for its retry's message: that delivery's skip ends it."""
    dedup = SkipDuplicates()
    _add(setup, dedup, "before")
    ran: list[int] = []

    @dramatiq.actor
    def flaky() -> None:
        ran.append(1)
        dedup.seen.add("again")  # the retry's delivery carries the same options: it is skipped
        raise TimeoutError("once")

    message = flaky.send_with_options(dedup="again")
    setup.run()
    job = wait_for(lambda: (j := setup.store.get(message.message_id)).status is JobStatus.CANCELLED and j,
                   "the retry's skip", timeout=30)
    assert ran == [1]
    last = _last(setup, job.job_id)
    assert (last.event, last.from_status) == ("skipped", "RETRY_WAIT")
    _never_published_again(setup, job.job_id, JobStatus.CANCELLED)
