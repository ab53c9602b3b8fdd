"""The API's filter parameters (selection.filter_from_params) and the rate limiter a bulk run paces with. Pure."""

from __future__ import annotations

import pytest

from reliable.bulk import RateLimiter
from reliable.errors import ConfigError
from reliable.states import JobStatus
from reliable.store.selection import FILTER_PARAMS, JobFilter, filter_from_params, parse_time


def test_every_parameter_sets_its_field() -> None:
    flt = filter_from_params({"state": ["failed", "DEAD"], "queue": "billing", "actor": "charge", "owner": "team-a",
                              "error_class": "transient", "workflow": "wf-1", "changed_since": "1700000000",
                              "changed_until": 1700003600, "q": "Acme", "ids": ["a", "b"]})
    assert flt == JobFilter(job_ids=("a", "b"), statuses=(JobStatus.FAILED, JobStatus.DEAD), queue="billing",
                            actor="charge", error_class="transient", owner="team-a", workflow_id="wf-1",
                            changed_since=1_700_000_000.0, changed_until=1_700_003_600.0, search="Acme")
    assert set(FILTER_PARAMS) == {"state", "queue", "actor", "owner", "error_class", "workflow", "changed_since",
                                  "changed_until", "q", "ids"}


def test_lists_are_repeated_or_comma_separated_and_empty_values_mean_any() -> None:
    assert filter_from_params({"state": "failed,dead"}).statuses == (JobStatus.FAILED, JobStatus.DEAD)
    assert filter_from_params({"ids": ["a,b", "b", " c "]}).job_ids == ("a", "b", "c")
    assert filter_from_params({"queue": "", "state": [], "q": None}).is_empty
    assert filter_from_params({"queue": ["billing", "billing"]}).queue == ("billing",)  # a query string's repeat
    assert filter_from_params({"queue": ["a", "b"], "actor": "x,y"}).queue == ("a", "b")  # repeated filters combine
    assert filter_from_params({"actor": "x,y"}).actor == ("x", "y")


def test_times_are_epoch_seconds_or_iso_8601_utc_unless_offset() -> None:
    assert parse_time("2026-06-01T12:00:00Z") == parse_time("2026-06-01T12:00:00") == 1_780_315_200.0
    assert parse_time("2026-06-01T14:00:00+02:00") == 1_780_315_200.0
    assert parse_time(1.5) == 1.5 and parse_time(" 12 ") == 12.0


@pytest.mark.parametrize(("params", "message"), [
    ({"queues": "billing"}, "unknown filter parameter 'queues'"),
    ({"state": "sleeping"}, "unknown status 'sleeping'"),
    ({"q": ["a", "b"]}, "'q' is given 2 different values"),
    ({"queue": 3}, "'queue': expected strings"),
    ({"changed_since": "yesterday"}, "'changed_since': 'yesterday' is neither epoch seconds nor an ISO 8601"),
    ({"changed_until": True}, "'changed_until': expected epoch seconds"),
    ({"changed_until": "nan"}, "not a finite time"),
    ({"ids": [1]}, "'ids': expected strings"),
])
def test_mistakes_are_refused_naming_the_parameter(params: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        filter_from_params(params)


def test_the_callers_own_parameters_may_be_set_aside() -> None:
    assert filter_from_params({"queue": "q", "cursor": "x", "limit": "5"}, ignore={"cursor", "limit"}).queue == ("q",)


def test_the_rate_limiter_does_not_spin_on_a_clock_far_from_zero() -> None:
    now = [1_000_000.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(100.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.acquire()
    assert sum(slept) == pytest.approx(0.04) and len(slept) <= 8
