"""The one duration grammar (reliable.durations): what it reads, what it refuses, and its two formatters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable.durations import (
    FORMS,
    MAX_DURATION,
    UNITS,
    DurationTooLong,
    format_duration,
    format_prometheus,
    parse_duration,
)


@pytest.mark.parametrize(("value", "seconds"), [
    (30, 30.0), (1.5, 1.5), (0, 0.0), ("45", 45.0), ("1.5", 1.5), ("0", 0.0), (" 90 ", 90.0),
    ("500ms", 0.5), ("30s", 30.0), ("10m", 600.0), ("2h", 7200.0), ("1d", 86400.0), ("1w", 604800.0),
    ("1h30m", 5400.0), ("1m30s", 90.0), ("30s500ms", 30.5), ("1w2d3h4m5s6ms", 604800 + 172800 + 10800 + 245.006),
    ("1.5h", 5400.0), ("0s", 0.0), ("-0s", 0.0), ("250ms", 0.25),
])
def test_reads(value: object, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [
    "", " ", "s", "ms", "5 m", "1h 30m", "5 minutes", "m5", "5mx", "30m1h", "1m1m", "500ms1s", "1H", "5M",
    "1y", "1.s", ".5s", "1e3", "5s-", "--5s", "nan", "inf", "1_000", "+5s", True, False, None, [], {}, b"5s",
])
def test_refuses_with_the_accepted_forms(value: object) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert str(caught.value) == f"bad duration {value!r}: {FORMS}"


@pytest.mark.parametrize("value", ["-1s", "-5", "-1h30m", -3, -0.5])
def test_refuses_negative(value: object) -> None:
    with pytest.raises(ValueError, match="expected zero or more"):
        parse_duration(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_refuses_non_finite_numbers(value: float) -> None:
    with pytest.raises(ValueError, match="expected a finite number"):
        parse_duration(value)


def test_refuses_a_number_too_large_for_a_float() -> None:
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration("9" * 400 + "s")


@pytest.mark.parametrize("value", ["99999999999999999999d", "9999999999w", "36526d", "3155760001", 3155760001,
                                   10**400, 1e300, "5218w"])
def test_a_duration_past_the_bound_is_refused_naming_it(value: object) -> None:
    # Issue 38: `db prune --older-than 99999999999999999999d` was an OverflowError deeper down.
    with pytest.raises(DurationTooLong, match=r"at most 3155760000 seconds \(36525d, 100 years\)"):
        parse_duration(value)


def test_the_bound_itself_is_accepted() -> None:
    assert parse_duration("36525d") == parse_duration("5217w6d") == MAX_DURATION
    assert parse_duration(MAX_DURATION) == MAX_DURATION


@given(st.dictionaries(st.sampled_from(list(UNITS)), st.integers(0, 2_000), min_size=1))
def test_any_units_largest_first_sum_up(amounts: dict[str, int]) -> None:
    text = "".join(f"{amounts[unit]}{unit}" for unit in UNITS if unit in amounts)
    assert parse_duration(text) == pytest.approx(sum(n * UNITS[u] for u, n in amounts.items()))


@given(st.lists(st.sampled_from(list(UNITS)), min_size=2, max_size=4, unique=True))
def test_units_out_of_order_are_refused(units: list[str]) -> None:
    order = list(UNITS)
    if units == sorted(units, key=order.index):
        units.reverse()
    with pytest.raises(ValueError):
        parse_duration("".join(f"1{unit}" for unit in units))


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_numbers_and_numeric_strings_are_seconds(seconds: float) -> None:
    assert parse_duration(seconds) == seconds
    assert parse_duration(f"{seconds:.6f}") == pytest.approx(seconds, abs=1e-6)


@given(st.text(max_size=12))
def test_any_text_parses_or_raises_value_error(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        assert "bad duration" in str(exc)
    else:
        assert seconds >= 0 and math.isfinite(seconds)


@given(st.integers(0, 10**12))
def test_prometheus_form_reads_back_exactly(millis: int) -> None:
    text = format_prometheus(millis / 1000)
    assert parse_duration(text) == pytest.approx(millis / 1000, abs=1e-9)


@given(st.floats(min_value=0.001, max_value=1e8, allow_nan=False))
def test_human_form_reads_back(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-5, abs=1e-3)


def test_formats() -> None:
    assert [format_duration(s) for s in (0.25, 30, 600, 5400, 90061)] == ["250ms", "30s", "10m", "1h30m", "1d1h1m1s"]
    assert [format_prometheus(s) for s in (0, 30, 90, 3600, 86400 * 3, 0.25)] == ["0s", "30s", "1m30s", "1h", "3d",
                                                                                   "250ms"]


def test_alerts_and_policy_use_the_same_parser() -> None:
    from reliable.alerts.durations import parse_duration as alerts_parse
    from reliable.policy import parse_duration as policy_parse

    assert alerts_parse is parse_duration and policy_parse is parse_duration


def test_only_ascii_digits_and_tiny_values_read_back() -> None:
    for value in ("\uff11\uff12s", "\u0663m", "\uff11\uff12"):  # fullwidth 12, Arabic-Indic 3
        with pytest.raises(ValueError):
            parse_duration(value)
    for seconds in (1e-10, 0.0005, 0.1234567):
        assert abs(parse_duration(format_duration(seconds)) - seconds) < 1e-6
