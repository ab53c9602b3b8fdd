"""Durations as written in rule files ("30s", "5m", "1h30m", "3d", or a number of seconds). Pure."""

from __future__ import annotations

import re

__all__ = ["format_prometheus", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> float:
    """Seconds in `value`; ValueError (with the accepted forms) when it is not a duration >= 0."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 30s, 5m, 1h or seconds, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value!r}")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text and "".join(m.group(0) for m in _PART.finditer(text)) == text:
            return sum(float(num) * _UNITS[unit] for num, unit in _PART.findall(text))
    raise ValueError(f"expected a duration like 30s, 5m, 1h30m, 3d or seconds, got {value!r}")


def format_prometheus(seconds: float) -> str:
    """A Prometheus duration string for `seconds` (e.g. 90 -> "1m30s"; 0 -> "0s")."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
