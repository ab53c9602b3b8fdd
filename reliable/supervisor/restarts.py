"""When to restart a crashed child, and when crashes become a crash loop. Pure: times are passed in."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from ..durations import parse_duration
from ..errors import ConfigError

__all__ = ["Backoff", "CrashLoop", "CrashWindow", "parse_crash_loop"]


@dataclass(frozen=True)
class Backoff:
    """Delay before restarting a slot after its `streak`-th crash in a row: initial * 2^(streak-1), capped.

    A streak ends when a child of the slot has run `stable_after` seconds (its next crash is a first
    one again) or exits for a reason other than a crash.
    """

    initial: float = 0.5
    maximum: float = 30.0
    stable_after: float = 30.0

    def delay(self, streak: int) -> float:
        """Seconds to wait before the restart that follows the `streak`-th crash in a row (streak >= 1)."""
        if streak <= 0:
            return 0.0
        return float(min(self.maximum, self.initial * 2 ** min(streak - 1, 32)))


@dataclass(frozen=True)
class CrashWindow:
    """A crash loop: `crashes` crashes (of any children) within `seconds`."""

    crashes: int = 5
    seconds: float = 60.0

    def describe(self) -> str:
        """`5 crashes within 60s`."""
        return f"{self.crashes} crashes within {self.seconds:g}s"


class CrashLoop:
    """Counts crashes in a sliding window; `record` says when the window is full."""

    def __init__(self, window: CrashWindow) -> None:
        self.window = window
        self._times: deque[float] = deque()

    def record(self, at: float) -> bool:
        """Record a crash at `at` (monotonic seconds); True when this makes a crash loop."""
        self._times.append(at)
        while self._times and at - self._times[0] > self.window.seconds:
            self._times.popleft()
        return len(self._times) >= self.window.crashes


_CRASH_LOOP = re.compile(r"\s*(?P<crashes>[0-9]+)\s*/\s*(?P<seconds>\S+)\s*")


def parse_crash_loop(text: str) -> CrashWindow:
    """`K/SECONDS` (`5/60`, `5/1m`, `3/30s`) as a CrashWindow; ConfigError naming the form otherwise."""
    match = _CRASH_LOOP.fullmatch(text)
    if match is None:
        raise ConfigError(f"bad crash loop {text!r}: expected K/DURATION, K crashes within DURATION (5/60s, 3/1m)")
    crashes = int(match["crashes"])
    try:
        seconds = parse_duration(match["seconds"])
    except ValueError as exc:
        raise ConfigError(f"bad crash loop {text!r}: {exc}") from None
    if crashes < 1 or seconds <= 0:
        raise ConfigError(f"bad crash loop {text!r}: expected at least 1 crash within more than zero seconds")
    return CrashWindow(crashes, seconds)
