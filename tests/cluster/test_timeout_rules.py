"""The pure consumer_timeout rules (reliable.rabbitmq.timeouts) and the broker's argument checks: no service needed."""

from __future__ import annotations

import pytest

from reliable.errors import ConfigError
from reliable.rabbitmq import DEFAULT_CONSUMER_TIMEOUT, ReliableRabbitmqBroker, held_unacked, hold_limit, timeout_issues


@pytest.mark.parametrize(("timeout", "limit"), [(DEFAULT_CONSUMER_TIMEOUT, 1740.0), (300.0, 270.0), (5.0, 3.0)])
def test_the_hold_limit_keeps_a_margin_of_a_tenth_between_2_and_60_seconds(timeout: float, limit: float) -> None:
    assert hold_limit(timeout) == limit


def test_a_timeout_shorter_than_twice_the_margin_is_refused() -> None:
    with pytest.raises(ConfigError, match="consumer_timeout 4s is too short"):
        hold_limit(4.0)


def _issues(**overrides: object) -> list[str]:
    settings: dict[str, object] = {"consumer_timeout": 1800.0, "lease_ttl": 30.0, "time_limits": {"a": 600.0},
                                   "broker_delay": 900.0, "rehold": False}
    return timeout_issues(**{**settings, **overrides})  # type: ignore[arg-type]


def test_timings_under_the_default_timeout_fit() -> None:
    assert _issues() == []


def test_each_misfit_is_named() -> None:
    issues = _issues(consumer_timeout=600.0, lease_ttl=600.0, time_limits={"a": 550.0, "b": None, "c": 60.0})
    assert len(issues) == 4, issues
    assert issues[0].startswith("lease_ttl 600s exceeds the consumer_timeout 600s less its margin (540s)")
    assert issues[1].startswith("actor 'a': time_limit 550s exceeds the consumer_timeout 600s less its margin (540s)")
    assert issues[2].startswith("actor 'b' has no time limit")
    assert issues[3].startswith("retries delayed up to 900s are held unacknowledged")


def test_the_lease_ttl_is_held_against_the_hold_limit_not_the_timeout() -> None:
    assert _issues(consumer_timeout=600.0, lease_ttl=540.0, time_limits={}, rehold=True) == []
    issues = _issues(consumer_timeout=600.0, lease_ttl=541.0, time_limits={}, rehold=True)
    assert issues[0].startswith("lease_ttl 541s exceeds")


def test_a_delivery_waits_behind_the_prefetch_before_it_runs() -> None:
    # Dramatiq's default: a prefetch of 2 x threads, so up to 3 x time_limit unacked.
    assert held_unacked(600.0, prefetch=16, threads=8) == 1800.0
    assert held_unacked(600.0, prefetch=0, threads=0) == 600.0  # worker unknown: the run only
    assert _issues(time_limits={"a": 600.0}) == []
    issues = _issues(time_limits={"a": 600.0}, prefetch=16, threads=8)
    assert len(issues) == 1, issues
    assert issues[0].startswith("actor 'a': time_limit 600s (waiting behind a prefetch of 16 on 8 threads, up to "
                                "1800s unacked) exceeds the consumer_timeout 1800s less its margin (1740s)")
    assert _issues(time_limits={"a": 580.0}, prefetch=16, threads=8) == []


def test_untracked_actors_are_checked_and_named_louder() -> None:
    issues = _issues(time_limits={}, untracked_limits={"plain": 2000.0, "open": None})
    assert len(issues) == 2, issues
    assert all("UNTRACKED (reliable=False): no claim stops the redelivered copy" in issue for issue in issues)
    assert issues[0].startswith("actor 'open' has no time limit")
    assert issues[1].startswith("actor 'plain': time_limit 2000s exceeds")


def test_a_broker_that_reholds_delays_has_no_delay_issue() -> None:
    assert _issues(consumer_timeout=600.0, time_limits={}, rehold=True) == []


@pytest.mark.parametrize(("options", "message"), [
    ({"max_priority": 5}, "quorum queues do not support x-max-priority"),
    ({"delivery_limit": 1}, "delivery_limit must be an integer of at least 2"),
    ({"queue_type": "stream"}, "queue_type must be 'quorum' or 'classic'"),
    ({"consumer_timeout": 1.0}, "consumer_timeout 1s is too short"),
])
def test_broker_arguments_are_checked(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ReliableRabbitmqBroker(url="amqp://127.0.0.1:1/", **options)  # type: ignore[arg-type]


def test_quorum_queue_arguments() -> None:
    broker = ReliableRabbitmqBroker(url="amqp://127.0.0.1:1/", delivery_limit=12)
    assert broker._build_queue_arguments("q") == {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q.XQ",
                                                   "x-queue-type": "quorum", "x-delivery-limit": 12}
    classic = ReliableRabbitmqBroker(url="amqp://127.0.0.1:1/", queue_type="classic")
    assert classic._build_queue_arguments("q") == {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "q.XQ"}
