"""Backoff bounds and jitter, Retry-After parsing (durations: tests/unit/test_durations.py)."""

from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable.policy import BackoffSettings, backoff_ceiling, backoff_delay, parse_retry_after
from reliable.policy.timing import retry_after_of

NOW = 1_800_000_000.0

bases = st.floats(min_value=0.001, max_value=100.0)
caps = st.floats(min_value=0.001, max_value=100_000.0)
retries = st.integers(min_value=0, max_value=5000)
draws = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(bases, caps, retries, draws)
def test_full_jitter_bounds(base: float, cap: float, retry: int, draw: float) -> None:
    settings = BackoffSettings(base=base, cap=cap, jitter="full")
    delay = backoff_delay(settings, retry, lambda: draw)
    assert 0.0 <= delay <= min(cap, base * 2.0 ** min(retry, 1000))


@given(bases, caps, retries, draws)
def test_equal_jitter_and_none_bounds(base: float, cap: float, retry: int, draw: float) -> None:
    ceiling = backoff_ceiling(BackoffSettings(base=base, cap=cap), retry)
    equal = backoff_delay(BackoffSettings(base=base, cap=cap, jitter="equal"), retry, lambda: draw)
    assert ceiling / 2 <= equal <= ceiling
    assert backoff_delay(BackoffSettings(base=base, cap=cap, jitter="none"), retry, lambda: draw) == ceiling


@given(bases, caps, retries)
def test_ceiling_grows_then_caps(base: float, cap: float, retry: int) -> None:
    settings = BackoffSettings(base=base, cap=cap)
    assert backoff_ceiling(settings, retry) <= backoff_ceiling(settings, retry + 1) <= cap


@given(st.integers(min_value=0, max_value=12), st.integers(min_value=0, max_value=2**32 - 1))
def test_full_jitter_is_spread_over_the_whole_range(retry: int, seed: int) -> None:
    settings = BackoffSettings(base=0.5, cap=60.0, jitter="full")
    rng = random.Random(seed)
    samples = [backoff_delay(settings, retry, rng.random) for _ in range(2000)]
    ceiling = min(60.0, 0.5 * 2**retry)
    assert abs(statistics.fmean(samples) / ceiling - 0.5) < 0.05
    assert min(samples) < 0.05 * ceiling and max(samples) > 0.95 * ceiling


def test_out_of_range_draws_are_clamped() -> None:
    settings = BackoffSettings(base=1.0, cap=10.0)
    assert backoff_delay(settings, 0, lambda: 7.0) == 1.0
    assert backoff_delay(settings, 0, lambda: -1.0) == 0.0


@pytest.mark.parametrize(("value", "expected"), [
    ("120", 120.0), (" 7 ", 7.0), (3, 3.0), (2.5, 2.5), ("0", 0.0), (timedelta(seconds=9), 9.0), (b"4", 4.0),
    ("-5", None), (-5, None), ("soon", None), ("", None), (None, None), (True, None), ("nan", None),
    ("inf", None), (float("nan"), None), ("Thu, 99 Foo 2024 99:99:99 GMT", None), (object(), None),
])
def test_retry_after_values(value: object, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_retry_after_http_date() -> None:
    when = datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=90)
    assert parse_retry_after(format_datetime(when, usegmt=True), NOW) == pytest.approx(90.0)
    assert parse_retry_after(when, NOW) == pytest.approx(90.0)
    past = datetime.fromtimestamp(NOW, UTC) - timedelta(hours=1)
    assert parse_retry_after(format_datetime(past, usegmt=True), NOW) == 0.0


class Response:
    """A response with headers."""

    def __init__(self, headers: object) -> None:
        self.headers = headers
        self.status_code = 429


class Throttled(Exception):
    """Carries a response and/or a retry_after attribute."""

    def __init__(self, headers: object = None, retry_after: object = None) -> None:
        super().__init__("throttled")
        if headers is not None:
            self.response = Response(headers)
        if retry_after is not None:
            self.retry_after = retry_after


def test_retry_after_sources() -> None:
    assert retry_after_of(Throttled({"Retry-After": "30"}), NOW) == 30.0
    assert retry_after_of(Throttled({"retry-after": "31"}), NOW) == 31.0  # a plain dict, other case
    assert retry_after_of(Throttled(retry_after=12), NOW) == 12.0
    assert retry_after_of(Throttled({"Retry-After": "garbage"}, retry_after="5"), NOW) == 5.0
    assert retry_after_of(Throttled({}), NOW) is None
    assert retry_after_of(Throttled(headers=["not", "a", "mapping"]), NOW) is None
    assert retry_after_of(ValueError(), NOW) is None
