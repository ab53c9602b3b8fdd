"""When a schedule fires: cron expressions in an IANA time zone, and fixed intervals. Pure.

A slot is identified by its UTC instant, in whole epoch seconds. Both kinds of timing answer one
question, `next_after(instant)`: the first slot strictly after an instant.

Cron: five fields, minute hour day-of-month month day-of-week, each ``*``, a value, a range
``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n`` (from a to the field's end), or a list of those
(``1,15,30-35``). Months take JAN-DEC, days of week SUN-SAT (0 and 7 are Sunday), any case. The
macros: @hourly, @daily (@midnight), @weekly, @monthly, @yearly (@annually). As in Vixie cron, when
both day fields are restricted (neither starts with ``*``) a day matches if either does; otherwise
both must match.

Daylight saving time (the rules docs/schedules.md states):
- A wall-clock expression (its hour field does not start with ``*``) fires once per matching local
  wall time. A wall time that does not exist (spring forward: 02:30 in Europe/Paris on the last
  Sunday of March) fires at the first instant after the gap (03:00 local). A wall time that occurs
  twice (fall back) fires at its first occurrence only. Several wall times falling in one gap fire
  once (the same instant).
- An expression whose hour field starts with ``*`` (``0 * * * *``, ``*/10 */2 * * *``, @hourly)
  counts hours as they pass: it fires in every real hour whose local hour matches, so
  ``0 * * * *`` fires every 3600 s in UTC terms, 23 times on a spring-forward day and 25 times on a
  fall-back day (02:00 twice, an hour apart); a minute inside a gap does not exist and fires no slot.

Interval: every N whole seconds, aligned on the Unix epoch (UTC): 1h fires on every UTC hour, 90s
at each multiple of 90 s since 1970-01-01T00:00Z, whatever the time zone and whenever declared.
"""

from __future__ import annotations

import bisect
import calendar
import functools
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["MACROS", "Cron", "Every", "Timing", "parse_cron", "parse_zone"]

MACROS: dict[str, str] = {
    "@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
}
_MONTHS = {name: i + 1 for i, name in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP",
                                                 "OCT", "NOV", "DEC"))}
_DAYS = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
#: (name, lowest, highest, names) of the five fields, in order.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
#: Long enough to find Feb 29 on a given weekday (28-year cycle, with a century's missing leap day).
_SEARCH_DAYS = 366 * 40
_MINUTE = timedelta(minutes=1)


class Timing(Protocol):
    """When a schedule fires."""

    def next_after(self, instant: float) -> int:
        """The first slot (UTC epoch seconds) strictly after `instant`."""


def parse_zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` (Europe/Paris, UTC); ValueError naming it otherwise."""
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"time zone must be an IANA name such as Europe/Paris or UTC, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}: expected an IANA name such as Europe/Paris or UTC") from None


def _value(text: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not text.isascii() or not text.isdigit():
        known = f" or a name ({', '.join(names)})" if names else ""
        raise ValueError(f"{field}: {text!r} is not a number{known}")
    number = int(text)
    if not low <= number <= high:
        raise ValueError(f"{field}: {number} is out of range {low}-{high}")
    return number


def _field(text: str, field: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isascii() or not step_text.isdigit() or int(step_text) < 1:
                raise ValueError(f"{field}: step {step_text!r} in {part!r} must be a whole number >= 1")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            start, _, end = base.partition("-")
            first, last = _value(start, field, low, high, names), _value(end, field, low, high, names)
            if first > last:
                raise ValueError(f"{field}: range {base!r} goes backwards")
        elif base:
            first = _value(base, field, low, high, names)
            last = high if slash else first
        else:
            raise ValueError(f"{field}: empty item in {text!r}")
        values.update(range(first, last + 1, step))
    return frozenset(values)


@functools.lru_cache(maxsize=256)
def parse_cron(expression: str, zone: str = "UTC") -> Cron:
    """The Cron for a 5-field expression or a macro in time zone `zone`; ValueError saying what is wrong.

    Parsed once per (expression, zone): a scheduler asks at every decision."""
    if not isinstance(expression, str):
        raise ValueError(f"a cron expression is a string, got {type(expression).__name__}")
    parse_zone(zone)
    text = " ".join(expression.split())
    text = MACROS.get(text.lower(), text)
    if text.startswith("@"):
        raise ValueError(f"unknown macro {expression!r} (known: {', '.join(MACROS)})")
    parts = text.split(" ")
    if len(parts) != 5:
        raise ValueError(f"{expression!r} has {len(parts)} fields: a cron expression has 5 "
                         "(minute hour day-of-month month day-of-week) or is a macro such as @daily")
    minutes, hours, days, months, weekdays = (_field(part, *spec) for part, spec in zip(parts, _FIELDS, strict=True))
    weekdays = frozenset(0 if d == 7 else d for d in weekdays)
    either_day = not parts[2].startswith("*") and not parts[4].startswith("*")
    if not either_day and not any(day <= _longest(month) for month in months for day in days):
        raise ValueError(f"{expression!r} never fires: no month in it has day {min(days)}")
    return Cron(expression=expression, zone=zone, minutes=minutes, hours=hours, days=days, months=months,
                weekdays=weekdays, either_day=either_day, elapsed=parts[1].startswith("*"))


def _longest(month: int) -> int:
    return calendar.monthrange(2000, month)[1]  # a leap year: February has 29 days


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression in a time zone (see the module's docstring for the DST rules)."""

    expression: str
    zone: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    either_day: bool  # both day fields restricted: a day matches if either does
    elapsed: bool  # the hour field starts with '*': hours are counted as they pass

    def matches_day(self, day: date) -> bool:
        """Whether the expression fires on this local date at all."""
        if day.month not in self.months:
            return False
        by_date, by_weekday = day.day in self.days, day.isoweekday() % 7 in self.weekdays
        return (by_date or by_weekday) if self.either_day else (by_date and by_weekday)

    def next_after(self, instant: float) -> int:
        """The first slot strictly after `instant` (UTC epoch seconds)."""
        zone = ZoneInfo(self.zone)
        day = datetime.fromtimestamp(instant, zone).date() - timedelta(days=1)
        best: int | None = None
        found_on: date | None = None
        for _ in range(_SEARCH_DAYS):
            if self.matches_day(day):
                slots = _day_slots(self, day)
                index = bisect.bisect_right(slots, instant)
                if index < len(slots) and (best is None or slots[index] < best):
                    best = slots[index]
            if best is not None:
                # A slot of the next local day can come before it (a gap or an overlap at midnight):
                # look at one more day, never further (no offset changes by a day).
                if found_on is not None and day > found_on:
                    return best
                found_on = found_on or day
            day += timedelta(days=1)
        raise AssertionError(f"{self.expression!r} found no slot in {_SEARCH_DAYS} days")  # parse_cron refuses those


@functools.lru_cache(maxsize=512)
def _day_slots(cron: Cron, day: date) -> tuple[int, ...]:
    """The slots of the local date `day`, sorted (a matching day only)."""
    zone = ZoneInfo(cron.zone)
    found: set[int] = set()
    for hour in cron.hours:
        for minute in cron.minutes:
            found.update(_instants(datetime(day.year, day.month, day.day, hour, minute), zone, cron.elapsed))
    return tuple(sorted(found))


def _instants(wall: datetime, zone: ZoneInfo, elapsed: bool) -> tuple[int, ...]:
    """The instants a local wall time fires at (see the DST rules above)."""
    first = int(wall.replace(tzinfo=zone, fold=0).timestamp())
    second = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    if _exists(wall, first, zone):
        return (first, second) if elapsed and second != first else (first,)
    if elapsed:
        return ()
    after = wall + _MINUTE
    while not _exists(after, int(after.replace(tzinfo=zone).timestamp()), zone):
        after += _MINUTE
    return (int(after.replace(tzinfo=zone, fold=0).timestamp()),)


def _exists(wall: datetime, instant: int, zone: ZoneInfo) -> bool:
    return datetime.fromtimestamp(instant, zone).replace(tzinfo=None) == wall


@dataclass(frozen=True)
class Every:
    """A fixed interval of whole seconds, aligned on the Unix epoch."""

    seconds: int

    def next_after(self, instant: float) -> int:
        """The first multiple of the interval strictly after `instant`."""
        return (int(instant // self.seconds) + 1) * self.seconds

