"""Cron and interval timing: the grammar, day matching, and the DST rules (pure, no I/O)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable.schedules.cron import Cron, Every, parse_cron

PARIS, NEW_YORK = "Europe/Paris", "America/New_York"


def at(text: str) -> float:
    """An ISO time with its offset as epoch seconds."""
    return datetime.fromisoformat(text).timestamp()


def slots(cron: Cron, start: float, count: int) -> list[int]:
    out, t = [], start
    for _ in range(count):
        t = cron.next_after(t)
        out.append(t)
    return out


def local(slot: int, zone: str) -> str:
    return datetime.fromtimestamp(slot, ZoneInfo(zone)).isoformat()


def day_slots(expression: str, zone: str, day: str) -> list[str]:
    """Every slot whose instant falls on the local date `day` (from its midnight to the next)."""
    tz = ZoneInfo(zone)
    start = datetime.fromisoformat(day).replace(tzinfo=tz)
    end = (start + timedelta(days=1)).replace(tzinfo=tz)
    cron, out, t = parse_cron(expression, zone), [], start.timestamp() - 1
    while (t := cron.next_after(t)) < end.timestamp():
        out.append(local(t, zone))
    return out


# -- grammar -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("expression", "field", "values"), [
    ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
    ("5-20/5 * * * *", "minutes", {5, 10, 15, 20}),
    ("50/4 * * * *", "minutes", {50, 54, 58}),
    ("1,2,30-32 * * * *", "minutes", {1, 2, 30, 31, 32}),
    ("0 9-17/4 * * *", "hours", {9, 13, 17}),
    ("0 0 * JAN,mar-May *", "months", {1, 3, 4, 5}),
    ("0 0 * * MON-FRI", "weekdays", {1, 2, 3, 4, 5}),
    ("0 0 * * 7", "weekdays", {0}),
    ("0 0 * * 5-7", "weekdays", {5, 6, 0}),
    ("0 0 1,15 * *", "days", {1, 15}),
])
def test_fields(expression: str, field: str, values: set[int]) -> None:
    assert getattr(parse_cron(expression), field) == values


@pytest.mark.parametrize(("macro", "same_as"), [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
    ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@ANNUALLY", "0 0 1 1 *"),
])
def test_macros(macro: str, same_as: str) -> None:
    start = at("2026-05-17T10:20:00+00:00")
    assert slots(parse_cron(macro), start, 5) == slots(parse_cron(same_as), start, 5)


@pytest.mark.parametrize(("expression", "message"), [
    ("* * * *", "has 4 fields"),
    ("* * * * * *", "has 6 fields"),
    ("60 * * * *", "minute: 60 is out of range 0-59"),
    ("* 24 * * *", "hour: 24 is out of range 0-23"),
    ("* * 0 * *", "day of month: 0 is out of range 1-31"),
    ("* * * 13 *", "month: 13 is out of range 1-12"),
    ("* * * * 8", "day of week: 8 is out of range 0-7"),
    ("*/0 * * * *", "step '0'"),
    ("5-1 * * * *", "range '5-1' goes backwards"),
    ("1,,2 * * * *", "empty item"),
    ("* * * FOO *", "'FOO' is not a number or a name (JAN"),
    ("x * * * *", "'x' is not a number"),
    ("@often", "unknown macro '@often'"),
    ("0 0 30 2 *", "never fires"),
    ("0 0 31 4,6 *", "never fires"),
])
def test_bad_expressions_say_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_cron(expression)


def test_unknown_zone() -> None:
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        parse_cron("* * * * *", "Mars/Olympus")


def test_day_fields_either_when_both_restricted_both_otherwise() -> None:
    # 13th of the month OR a Friday (Vixie cron)
    either = slots(parse_cron("0 0 13 * FRI"), at("2026-11-01T00:00:00+00:00"), 4)
    assert [local(s, "UTC")[:10] for s in either] == ["2026-11-06", "2026-11-13", "2026-11-20", "2026-11-27"]
    # every other day of the month that is also a Monday
    both = slots(parse_cron("0 0 */2 * MON"), at("2026-11-01T00:00:00+00:00"), 2)
    assert [local(s, "UTC")[:10] for s in both] == ["2026-11-09", "2026-11-23"]


def test_leap_day() -> None:
    assert [local(s, "UTC")[:10] for s in slots(parse_cron("0 12 29 2 *"), at("2026-01-01T00:00:00+00:00"), 2)] \
        == ["2028-02-29", "2032-02-29"]


def test_next_after_is_strictly_after() -> None:
    cron = parse_cron("*/5 * * * *")
    five = at("2026-05-17T10:05:00+00:00")
    assert cron.next_after(five) == five + 300
    assert cron.next_after(five - 0.001) == five


def test_interval_is_aligned_on_the_epoch() -> None:
    every = Every(90)
    assert every.next_after(0) == 90
    assert every.next_after(89.9) == 90
    assert every.next_after(90) == 180
    assert Every(3600).next_after(at("2026-05-17T10:20:00+02:00")) == at("2026-05-17T09:00:00+00:00")


# -- daylight saving time -----------------------------------------------------------------------

@pytest.mark.parametrize(("zone", "day", "expected"), [
    (PARIS, "2026-03-29", "2026-03-29T03:00:00+02:00"),  # 02:00 -> 03:00
    (NEW_YORK, "2026-03-08", "2026-03-08T03:00:00-04:00"),
])
def test_a_wall_time_in_the_spring_gap_fires_once_at_the_first_instant_after_it(zone: str, day: str,
                                                                                expected: str) -> None:
    assert day_slots("30 2 * * *", zone, day) == [expected]
    # several wall times in the gap: one slot
    assert day_slots("0,15,45 2 * * *", zone, day) == [expected]
    # a wall time right after the gap is the same instant: one slot
    assert day_slots("0 3 * * *", zone, day) == [expected]
    assert day_slots("30 2,3 * * *", zone, day) == [expected, expected.replace("03:00:00", "03:30:00")]


@pytest.mark.parametrize(("zone", "day", "expected"), [
    (PARIS, "2026-10-25", "2026-10-25T02:30:00+02:00"),  # 03:00 CEST -> 02:00 CET
    (NEW_YORK, "2026-11-01", "2026-11-01T01:30:00-04:00"),  # 02:00 EDT -> 01:00 EST
])
def test_a_wall_time_that_occurs_twice_fires_once_at_its_first_occurrence(zone: str, day: str, expected: str) -> None:
    hour = expected[11:13]
    assert day_slots(f"30 {int(hour)} * * *", zone, day) == [expected]
    assert day_slots(f"*/30 {int(hour)} * * *", zone, day) == [expected.replace(":30:", ":00:"), expected]


@pytest.mark.parametrize(("zone", "spring", "autumn"), [
    (PARIS, "2026-03-29", "2026-10-25"), (NEW_YORK, "2026-03-08", "2026-11-01"),
])
def test_hourly_counts_real_hours(zone: str, spring: str, autumn: str) -> None:
    for expression in ("0 * * * *", "@hourly"):
        short = day_slots(expression, zone, spring)
        long = day_slots(expression, zone, autumn)
        assert len(short) == 23 and len(long) == 25
        for day in (short, long):  # every 3600 s in UTC terms
            instants = [datetime.fromisoformat(s).timestamp() for s in day]
            assert {b - a for a, b in itertools.pairwise(instants)} == {3600}
    assert len(day_slots("0 * * * *", zone, "2026-06-15")) == 24
    # An expression naming its hours is wall-clock: one slot per named hour, whatever the day.
    assert len(day_slots("0 0-23 * * *", zone, autumn)) == 24
    assert len(day_slots("0 0-23 * * *", zone, spring)) == 23  # 02:00 and 03:00 are the same instant


def test_a_daily_schedule_across_both_transitions_fires_once_a_day() -> None:
    for zone, start in ((PARIS, "2026-03-27T00:00:00+01:00"), (PARIS, "2026-10-23T00:00:00+02:00"),
                        (NEW_YORK, "2026-03-06T00:00:00-05:00"), (NEW_YORK, "2026-10-30T00:00:00-04:00")):
        fired = slots(parse_cron("0 9 * * *", zone), at(start), 5)
        assert [local(s, zone)[11:19] for s in fired] == ["09:00:00"] * 5
        assert len({local(s, zone)[:10] for s in fired}) == 5


def test_a_half_hour_shift() -> None:
    # Lord Howe Island moves its clocks by 30 min: 02:00 -> 01:30 on 2026-04-05.
    assert day_slots("45 1 * * *", "Australia/Lord_Howe", "2026-04-05") == ["2026-04-05T01:45:00+11:00"]
    assert day_slots("45 * * * *", "Australia/Lord_Howe", "2026-04-05")[1:3] == \
        ["2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30"]


# -- against a brute-force oracle -----------------------------------------------------------------

def oracle(cron: Cron, start: float, end: float) -> list[int]:
    """The slots in (start, end] found by looking at every minute's local wall time (the rules, read
    literally): a matching wall time fires at its first occurrence (every occurrence for an hour
    field starting with '*'); one skipped by a gap fires at the gap's end (none for '*' hours)."""
    zone = ZoneInfo(cron.zone)
    out: list[int] = []
    t = int(start // 60) * 60
    previous = datetime.fromtimestamp(t, zone).replace(tzinfo=None)
    while (t := t + 60) <= end:
        moment = datetime.fromtimestamp(t, zone)
        wall = moment.replace(tzinfo=None, fold=0)

        def matches(w: datetime) -> bool:
            return w.minute in cron.minutes and w.hour in cron.hours and cron.matches_day(w.date())

        fires = matches(wall) and (cron.elapsed or moment.fold == 0)
        if not fires and not cron.elapsed and wall - previous > timedelta(minutes=1):
            skipped = previous + timedelta(minutes=1)
            while skipped < wall and not fires:
                fires = matches(skipped)
                skipped += timedelta(minutes=1)
        if fires and t > start:
            out.append(t)
        previous = wall
    return out


PARTS = st.tuples(
    st.sampled_from(["*", "0", "*/15", "30", "0,45", "10-20/5", "59"]),
    st.sampled_from(["*", "*/2", "2", "1,2,3", "0-3", "23", "1-5/2"]),
    st.sampled_from(["*", "*", "1", "29", "*/3"]),
    st.sampled_from(["*", "*", "3,10,11", "MAR-APR"]),
    st.sampled_from(["*", "*", "SUN", "1-5"]),
)
TRANSITIONS = [  # a day before a transition, local midnight
    (PARIS, "2026-03-28"), (PARIS, "2026-10-24"), (NEW_YORK, "2026-03-07"), (NEW_YORK, "2026-10-31"),
    ("Australia/Lord_Howe", "2026-04-04"), ("UTC", "2026-03-28"), ("Asia/Kolkata", "2026-10-24"),
]


@settings(max_examples=60, deadline=None)
@given(PARTS, st.sampled_from(TRANSITIONS), st.integers(min_value=0, max_value=36 * 60))
def test_next_after_agrees_with_the_oracle(parts: tuple[str, ...], where: tuple[str, str], offset: int) -> None:
    zone, day = where
    cron = parse_cron(" ".join(parts), zone)
    start = datetime.fromisoformat(day).replace(tzinfo=ZoneInfo(zone)).timestamp() + offset * 60
    end = start + 3 * 86400
    expected = oracle(cron, start, end)
    found, t = [], start
    while (t := cron.next_after(t)) <= end:
        found.append(t)
    assert found == expected


@given(st.integers(min_value=1, max_value=10**6), st.floats(min_value=0, max_value=4e9))
def test_every_is_the_next_multiple(seconds: int, instant: float) -> None:
    slot = Every(seconds).next_after(instant)
    assert slot % seconds == 0 and instant < slot <= instant + seconds


def test_utc_instants_are_whole_seconds() -> None:
    assert all(isinstance(s, int) for s in slots(parse_cron("*/7 * * * *", PARIS), datetime.now(UTC).timestamp(), 20))
