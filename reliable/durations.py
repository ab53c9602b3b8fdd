"""The one duration grammar of reliable: policy files, alert rules and every CLI time option. Pure.

A duration is a number of seconds or, Prometheus-style, numbers with units from the largest to the
smallest, each unit at most once:

    90          seconds (a YAML number, or a string of digits: "90", "1.5")
    500ms       milliseconds        30s   seconds        5m   minutes
    2h          hours               3d    days           1w   weeks (7 days)
    1h30m       several units, largest first ("30m1h" and "1m1m" are refused)

Numbers may have a fraction ("1.5h"). Units are lowercase; no spaces inside ("5 m" is refused).
Negative, infinite and NaN values, booleans and other types are refused with a ValueError whose
message shows these forms; the caller adds the field or option it was reading. So is anything longer
than `MAX_DURATION` (100 years): no setting means more, and a time that far back or ahead is out of
the range of dates (`99999999999999999999d` would overflow wherever it is subtracted from now).
"""

from __future__ import annotations

import math
import re

__all__ = ["FORMS", "MAX_DURATION", "UNITS", "DurationTooLong", "format_duration", "format_prometheus",
           "parse_duration"]

#: Unit suffix -> seconds, largest first (the order units must be written in).
UNITS: dict[str, float] = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}

_YEAR = 365.25 * 86400.0
#: The longest duration accepted, in seconds: 100 years of 365.25 days.
MAX_DURATION = 100 * _YEAR


class DurationTooLong(ValueError):
    """A duration of the grammar, longer than MAX_DURATION."""


#: The accepted forms, as every error message states them.
FORMS = ("expected a number of seconds (90, 1.5) or numbers with units, largest first, from "
         "w, d, h, m, s, ms (1h30m, 90s, 500ms)")

_NUMBER = r"[0-9]+(?:\.[0-9]+)?"  # ASCII digits only (\d would take fullwidth and Arabic-Indic digits)
_SECONDS = re.compile(_NUMBER)
_WITH_UNITS = re.compile("".join(f"(?:(?P<{'u_' + unit}>{_NUMBER}){unit})?" for unit in UNITS))


def parse_duration(value: object) -> float:
    """Seconds in `value` (a number of seconds or a string of the grammar above); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"bad duration {value!r}: {FORMS}")
    if isinstance(value, str):
        text = value.strip()
        negative = text.startswith("-")
        seconds = _parse_text(text.removeprefix("-"))
        if seconds is None:
            raise ValueError(f"bad duration {value!r}: {FORMS}")
        if negative and seconds:
            raise ValueError(f"bad duration {value!r}: expected zero or more")
        return _bounded(value, seconds)
    try:
        seconds = float(value)
    except OverflowError:  # an int past float's range
        seconds = math.inf
    if math.isnan(seconds) or (math.isinf(seconds) and not isinstance(value, int)):
        raise ValueError(f"bad duration {value!r}: expected a finite number")
    if seconds < 0:
        raise ValueError(f"bad duration {value!r}: expected zero or more")
    return _bounded(value, seconds)


def _bounded(value: object, seconds: float) -> float:
    if seconds > MAX_DURATION:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:40]}..."
        raise DurationTooLong(f"bad duration {shown}: at most {MAX_DURATION:.0f} seconds "
                              f"({format_duration(MAX_DURATION)}, {MAX_DURATION / _YEAR:g} years)")
    return seconds


def _parse_text(text: str) -> float | None:
    if _SECONDS.fullmatch(text):
        seconds = float(text)
    else:
        match = _WITH_UNITS.fullmatch(text) if text else None
        if match is None:
            return None
        seconds = sum(float(amount) * UNITS[name[2:]] for name, amount in match.groupdict().items()
                      if amount is not None)
    return seconds if math.isfinite(seconds) else math.inf  # past the bound: refused by the caller


def format_duration(seconds: float) -> str:
    """A short human form of `seconds` that parse_duration reads back ("750ms", "1.5s", "10m", "1h30m")."""
    if seconds < 1:
        return f"{round(seconds * 1000, 3):f}".rstrip("0").rstrip(".") + "ms"  # never 1e-07ms
    if seconds < 60:
        return f"{seconds:g}s"
    parts = []
    rest = seconds
    for unit in ("d", "h", "m"):
        size = UNITS[unit]
        if rest >= size:
            count = int(rest // size)
            parts.append(f"{count}{unit}")
            rest -= count * size
    if rest >= 0.001:
        parts.append(f"{rest:g}s")
    return "".join(parts)


def format_prometheus(seconds: float) -> str:
    """A Prometheus duration for `seconds`, whole units down to milliseconds (90 -> "1m30s"; 0 -> "0s")."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
