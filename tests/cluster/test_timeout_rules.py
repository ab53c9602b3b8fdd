"""The pure consumer_timeout rules (reliable.rabbitmq.timeouts) and the broker's argument checks: no service needed."""

from __future__ import annotations

import pytest

from reliable.errors import ConfigError
from reliable.rabbitmq import (
    DEFAULT_CONSUMER_TIMEOUT,
    ReliableRabbitmqBroker,
    TimeoutReport,
    held_unacked,
    hold_limit,
    timeout_issues,
    timeout_report,
)


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


def _report(**overrides: object) -> TimeoutReport:
    settings: dict[str, object] = {"consumer_timeout": 1800.0, "lease_ttl": 30.0, "broker_delay": 900.0,
                                   "rehold": False, "prefetch": 16, "threads": 8}
    return timeout_report(**{**settings, **overrides})  # type: ignore[arg-type]


def test_dramatiqs_default_time_limit_under_the_default_prefetch_is_one_line_not_a_warning_per_actor() -> None:
    report = _report(time_limits={f"actor{i}": 600.0 for i in range(12)})
    assert report.risks == ()
    assert len(report.possible) == 12
    assert report.summary == (
        "timeouts: RabbitMQ consumer_timeout 1800s (a delivery is held unacknowledged 1740s at most), lease_ttl 30s, "
        "time limits: 600s (12 actors); 12 actors could stay unacknowledged up to 1800s only if the 16 deliveries "
        "prefetched on 8 threads all ran to their time limit (lower time_limit or dramatiq_queue_prefetch if jobs "
        "run that long)")


def test_a_timing_that_exceeds_the_limit_by_itself_is_a_risk_and_counted_in_the_line() -> None:
    report = _report(time_limits={"ok": 60.0, "long": 2000.0, "open": None}, untracked_limits={"plain": 600.0})
    assert [risk.split(":")[0] for risk in report.risks] == ["actor 'long'", "actor 'open' has no time limit (no "
                                                                           "TimeLimit middleware)", "actor 'plain'"]
    assert "waiting behind a prefetch of 16 on 8 threads" in report.risks[0]  # the warning keeps its detail
    assert report.possible == ()
    assert report.summary.startswith("timeouts: RabbitMQ consumer_timeout 1800s")
    assert "time limits: 2000s (1 actor), 600s (1 actor), 60s (1 actor), none (1 actor)" in report.summary
    assert report.summary.endswith("; 3 risks (warnings follow)")


def test_everything_fitting_is_a_quiet_line() -> None:
    report = _report(time_limits={"a": 60.0})
    assert (report.risks, report.possible) == ((), ())
    assert report.summary.endswith("time limits: 60s (1 actor)")
