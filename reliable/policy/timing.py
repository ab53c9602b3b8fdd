"""Backoff with jitter and Retry-After parsing. Pure: the clock and the randomness are passed in."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from .model import BackoffSettings

__all__ = ["backoff_ceiling", "backoff_delay", "parse_retry_after", "retry_after_of"]

_MAX_EXPONENT = 1000  # 2.0**1000 is finite; the cap applies long before


def backoff_ceiling(settings: BackoffSettings, retry: int) -> float:
    """The most retry `retry` (0-based) may wait: min(cap, base * 2**retry)."""
    exponent = min(max(retry, 0), _MAX_EXPONENT)
    try:
        raw = settings.base * 2.0**exponent
    except OverflowError:  # pragma: no cover - guarded by _MAX_EXPONENT
        raw = math.inf
    return min(settings.cap, raw)


def backoff_delay(settings: BackoffSettings, retry: int, rand: Callable[[], float] | None = None) -> float:
    """The delay before retry `retry` (0-based): full jitter U(0, ceiling), equal jitter, or the ceiling.

    With a floor, the jittered value is spread over [floor, ceiling] instead: no retry comes back
    sooner than the floor (a floor above the cap yields the cap).
    """
    ceiling = backoff_ceiling(settings, retry)
    if settings.jitter == "none":
        return max(ceiling, min(settings.floor, settings.cap))
    r = (rand or random.random)()
    r = min(max(r, 0.0), 1.0)
    share = 0.5 + r / 2 if settings.jitter == "equal" else r
    floor = min(settings.floor, settings.cap)
    if floor >= ceiling:
        return floor
    return floor + share * (ceiling - floor)


def parse_retry_after(value: object, now: float) -> float | None:
    """Seconds to wait from a Retry-After value, or None when it is absent or garbage.

    Accepts delta-seconds ("120", 120, 1.5), an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT"; a date in the
    past means 0), a timedelta or an aware datetime. Negative, NaN and infinite values are ignored.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1", "replace")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, int | float):
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    if isinstance(value, datetime):
        return _until(value, now)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return _until(when, now)


def _until(when: datetime, now: float) -> float | None:
    if when.tzinfo is None:  # RFC 9110 dates are GMT; a naive one is read as UTC
        when = when.replace(tzinfo=UTC)
    try:
        return max(0.0, when.timestamp() - now)
    except (OverflowError, OSError, ValueError):
        return None


def _header(headers: object, name: str) -> Any:
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    try:
        value = getter(name)
        if value is None and isinstance(headers, Mapping):  # a plain dict is case-sensitive
            lowered = name.lower()
            value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == lowered), None)
        return value
    except Exception:  # odd header containers simply carry no Retry-After
        return None


def retry_after_of(exc: BaseException, now: float) -> float | None:
    """The Retry-After an exception carries: its response's header, else its `retry_after` attribute."""
    response = getattr(exc, "response", None)
    if response is not None:
        seconds = parse_retry_after(_header(getattr(response, "headers", None), "Retry-After"), now)
        if seconds is not None:
            return seconds
    return parse_retry_after(getattr(exc, "retry_after", None), now)
