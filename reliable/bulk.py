"""Running one operator command over many jobs: a cap, a rate limit (token bucket) and progress."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .commands import CommandResult
    from .store import Job

__all__ = ["BulkReport", "Progress", "RateLimiter", "run_bulk"]


class Progress(Protocol):
    """Called after each job with how many are done, the total, and that job's result."""

    def __call__(self, done: int, total: int, result: CommandResult) -> None:
        """Report progress."""


class RateLimiter:
    """A token bucket: at most `rate` acquisitions per second on average, bursts up to `burst`.

    `clock` and `sleep` are injectable so tests need not wait.
    """

    def __init__(self, rate: float, *, burst: float = 1.0, clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = max(1.0, burst)
        self._clock = clock or time.monotonic
        self._sleep = sleep or time.sleep
        self._tokens = self.burst
        self._last = self._clock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; return how long it slept."""
        slept = 0.0
        while True:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            # The tolerance: a wait computed from a clock far from zero may refill to 0.99999...
            # and a wait for the rest would be too small to move that clock at all (a spin).
            if self._tokens >= 1.0 - 1e-9:
                self._tokens = max(0.0, self._tokens - 1.0)
                return slept
            wait = (1.0 - self._tokens) / self.rate
            self._sleep(wait)
            slept += wait


@dataclass
class BulkReport:
    """The results of a bulk run, in order, and how many selected jobs the cap left out."""

    results: list[CommandResult] = field(default_factory=list)
    skipped: int = 0

    def count(self, outcome: str) -> int:
        """How many results have `outcome` (done, requested, dry_run, refused)."""
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def refused(self) -> int:
        """How many jobs the command was refused for."""
        return self.count("refused")

    def summary(self) -> dict[str, Any]:
        """Counts per outcome, plus `skipped` (left out by the limit)."""
        counts: dict[str, Any] = {}
        for r in self.results:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        counts["skipped_by_limit"] = self.skipped
        return counts


def run_bulk(jobs: Sequence[Job], one: Callable[[Job], CommandResult], *, limiter: RateLimiter | None = None,
             progress: Progress | None = None, skipped: int = 0) -> BulkReport:
    """Apply `one` to each job in order, pacing with `limiter` and reporting to `progress`."""
    report = BulkReport(skipped=skipped)
    total = len(jobs)
    items: Iterable[Job] = jobs
    for done, job in enumerate(items, start=1):
        if limiter is not None:
            limiter.acquire()
        result = one(job)
        report.results.append(result)
        if progress is not None:
            progress(done, total, result)
    return report
