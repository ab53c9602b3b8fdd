"""Options checked at registration and at every delivery (issue 38), on both stores.

The options that choose what a delivery does (reliable.options.DELIVERY_OPTIONS) each have one rule
(`option_problem`): `send()` refuses a message that breaks one (MessageRefused naming the option,
nothing registered or published); a foreign message that breaks one is dead-lettered as a delivery
that is not a job's message; a job whose own message breaks one, or whose claim fails the same way
every time, ends DEAD with an `unrunnable` event instead of waiting forever for the sweeper.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.common import current_millis
from dramatiq.middleware import AgeLimit

from reliable.errors import MessageRefused, PolicyError, RegistrationFailed
from reliable.middleware import ReliableMiddleware
from reliable.options import DELIVERY_OPTIONS, OPTION_RULES, option_problem
from reliable.recovery import Recovery
from reliable.states import JobStatus
from reliable.store import NewJob

from middleware_harness import Harness, make_harness

#: Per option, values `send()` must refuse (Dramatiq would have crashed or done something else).
MALFORMED: list[tuple[str, Any]] = [
    ("max_retries", "3"), ("max_retries", -5), ("max_retries", math.nan), ("max_retries", True),
    ("min_backoff", "x"), ("min_backoff", math.nan), ("min_backoff", -1), ("max_backoff", math.inf),
    ("time_limit", "10s"), ("max_age", -1), ("result_ttl", 10**20), ("throws", "ValueError"),
    ("on_success", 42), ("on_failure", ""), ("on_retry_exhausted", ["x"]), ("pipe_target", "next"),
    ("pipe_ignore", "yes"), ("group_completion_uuid", 7), ("group_completion_callbacks", {"a": 1}),
    ("workflow_node", 3), ("notify_shutdown", 1), ("store_results", "true"),
]


@pytest.fixture
def one_thread(store_url: str, policy_file: Path) -> Iterator[Harness]:
    """A harness on each store whose worker runs one message at a time, in queue order."""
    made = make_harness(store_url, policy_file, threads=1, metrics=False, json_logs=False)
    yield made
    made.close()


def _never_published_again(setup: Harness, job_id: str, status: JobStatus) -> None:
    report = Recovery(setup.store, setup.broker, setup.middleware.policy, sweep_after=0.0, retry_grace=0.0).run_once()
    assert job_id not in report.redispatched and job_id not in report.retried, report
    assert setup.store.get(job_id).status is status


def test_every_behaviour_choosing_option_has_a_rule() -> None:
    assert set(OPTION_RULES) == set(DELIVERY_OPTIONS)
    assert {name for name, _ in MALFORMED} == set(DELIVERY_OPTIONS)  # each rule is tried below
    assert option_problem({"max_retries": 3, "min_backoff": 10.5, "max_backoff": 0, "time_limit": 60_000,
                           "throws": (ValueError, KeyError), "on_success": "done", "pipe_ignore": True,
                           "pipe_target": {"actor_name": "next"}, "group_completion_callbacks": [{}],
                           "max_retries_unknown": "anything", "eta": "anything"}) is None


@pytest.mark.parametrize(("option", "value"), MALFORMED, ids=[f"{o}={v!r}" for o, v in MALFORMED])
def test_send_refuses_a_malformed_option_naming_it(setup: Harness, option: str, value: Any) -> None:
    ran: list[bool] = []

    @dramatiq.actor
    def plain() -> None:
        ran.append(True)

    # As `send_with_options` builds it (which checks the callbacks' types only).
    message = dramatiq.Message(queue_name="default", actor_name="plain", args=(), kwargs={}, options={option: value})
    with pytest.raises(MessageRefused, match=rf"options\.{option}: ") as refused:
        setup.broker.enqueue(message)
    assert refused.value.field == f"options.{option}" and refused.value.actor == "plain"
    assert setup.store.find(message.message_id) is None  # nothing registered
    assert setup.broker.queues["default"].qsize() == 0  # nothing published


def test_a_foreign_message_with_a_malformed_option_is_dead_lettered(setup: Harness) -> None:
    ran: list[bool] = []

    @dramatiq.actor
    def plain() -> None:
        ran.append(True)

    foreign = plain.message_with_options(max_retries="3")  # published by a producer without reliable
    setup.broker.queues["default"].put(foreign.encode())
    setup.run()

    assert ran == [] and setup.store.find(foreign.message_id) is None
    assert [m.message_id for m in setup.broker.dead_letters] == [foreign.message_id]


@pytest.mark.parametrize("options", [{"max_retries": "3"}, {"min_backoff": math.nan}, {"max_retries": -5}],
                         ids=["string", "nan", "negative"])
def test_a_job_whose_own_message_breaks_an_option_rule_ends_dead(setup: Harness, options: dict[str, Any]) -> None:
    """A job registered before the rule existed (its stored message carries the option): it ends DEAD
    with an event, its message dead-lettered, and the sweeper never publishes it again."""
    ran: list[bool] = []

    @dramatiq.actor
    def plain() -> None:
        ran.append(True)

    message = plain.message_with_options(**options)
    setup.store.register(NewJob(message.message_id, "default", "plain", message.asdict()))
    setup.broker.queues["default"].put(message.encode())
    setup.run()

    job = setup.store.get(message.message_id)
    assert job.status is JobStatus.DEAD and ran == []
    last = setup.store.events(job.job_id)[-1]
    assert last.event == "unrunnable" and last.from_status == "PENDING"
    assert last.reason is not None and f"its option {next(iter(options))} is refused" in last.reason
    assert [m.message_id for m in setup.broker.dead_letters] == [job.job_id]
    _never_published_again(setup, job.job_id, JobStatus.DEAD)


def test_a_claim_that_fails_the_same_way_every_time_ends_the_job_dead(setup: Harness,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever else makes the policy refuse a message's contract (a PolicyError in the claim) ends
    the job DEAD, never a skip the sweeper repeats."""
    ran: list[bool] = []

    @dramatiq.actor
    def refused_by_policy() -> None:
        ran.append(True)

    plans = setup.middleware.plans
    contract = plans.contract

    def strict(actor_name: str, queue: str, message_options: Any = None) -> Any:
        if actor_name == "refused_by_policy" and message_options is not None:  # a delivery's, not send()'s
            raise PolicyError("actor 'refused_by_policy' option max_retries: refused", field="max_retries")
        return contract(actor_name, queue, message_options)

    monkeypatch.setattr(plans, "contract", strict)
    message = refused_by_policy.send()
    setup.run()

    job = setup.store.get(message.message_id)
    assert job.status is JobStatus.DEAD and ran == []
    assert setup.store.events(job.job_id)[-1].event == "unrunnable"
    assert [m.message_id for m in setup.broker.dead_letters] == [job.job_id]
    _never_published_again(setup, job.job_id, JobStatus.DEAD)


@pytest.mark.parametrize("order", ["before", "after"])
def test_an_old_timestamp_copy_agelimit_expires_does_not_end_the_job(one_thread: Harness, order: str) -> None:
    """A copy of a waiting job's message that differs only in `message_timestamp` (the digest leaves
    it out) is expired by AgeLimit: the job is left waiting (before reliable's claim), or the claim
    is handed back (after it), and its real message runs."""
    setup = one_thread
    broker = setup.broker
    broker.middleware[:] = [m for m in broker.middleware if not isinstance(m, AgeLimit)]
    age_limit = AgeLimit()
    if order == "before":
        broker.add_middleware(age_limit, before=ReliableMiddleware)
    else:
        broker.add_middleware(age_limit)
    ran: list[int] = []

    @dramatiq.actor(max_age=60_000)
    def charge(amount: int) -> None:
        ran.append(amount)

    genuine = charge.send(1)
    copy = genuine.copy(message_timestamp=current_millis() - 120_000)
    queue = broker.queues["default"]
    published = queue.get()  # the copy goes ahead of the real message
    queue.task_done()
    queue.put(copy.encode())
    queue.put(published)
    setup.run()

    job = setup.store.get(genuine.message_id)
    assert job.status is JobStatus.SUCCEEDED and ran == [1], setup.events(job.job_id)
    assert "skipped_failed" not in setup.events(job.job_id)
    assert [m.message_timestamp for m in broker.dead_letters] == [copy.message_timestamp]  # AgeLimit failed it


def test_a_registration_that_fails_unexpectedly_fails_the_send_and_publishes_nothing(
        setup: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dramatiq logs any error of a before_enqueue but a MiddlewareError and publishes the message anyway;
    a policy that cannot decide must fail the send, not publish a message no job row backs."""

    @dramatiq.actor
    def plain() -> None:
        pass

    def cannot_decide(*args: Any, **kwargs: Any) -> None:
        raise PolicyError("policy.yaml:3: cannot decide")

    monkeypatch.setattr(setup.middleware.registration, "new_job", cannot_decide)
    message = plain.message()
    with pytest.raises(RegistrationFailed, match=r"PolicyError: policy\.yaml:3: cannot decide") as failed:
        setup.broker.enqueue(message)
    assert isinstance(failed.value.__cause__, PolicyError) and failed.value.actor == "plain"
    assert setup.store.find(message.message_id) is None
    assert setup.broker.queues["default"].qsize() == 0  # nothing published
