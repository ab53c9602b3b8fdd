"""Durations in policy files: numbers are seconds; strings carry a unit ("500ms", "30s", "10m", "2h", "1d")."""

from __future__ import annotations

import math
import re

__all__ = ["UNITS", "format_duration", "parse_duration"]

#: Unit suffix -> seconds.
UNITS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like "500ms", "30s", "10m", "2h", "1d".

    Raises ValueError with a sentence saying what is expected (negative, NaN, booleans and unknown units refused).
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration (seconds, or a string like '30s', '10m'), got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"bad duration {value!r}: expected a number of seconds or a number with a unit "
                             "ms, s, m, h or d (e.g. '500ms', '30s', '10m')")
        seconds = float(match.group(1)) * UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"expected a duration (seconds, or a string like '30s', '10m'), got {type(value).__name__}")
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"bad duration {value!r}: expected a finite number")
    if seconds < 0:
        raise ValueError(f"bad duration {value!r}: expected zero or more")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form of `seconds` ("750ms", "30s", "10m", "1h30m")."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
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
