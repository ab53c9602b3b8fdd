"""Error-budget burn rates (SRE workbook, multi-window multi-burn-rate). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .conditions import BurnWindow

__all__ = ["BurnResult", "burn_rate", "evaluate_burn"]


def burn_rate(good: int, bad: int, slo: float) -> float:
    """How fast the error budget burns: the error ratio over the allowed one (1 - slo). 0 with no events."""
    total = good + bad
    if total == 0:
        return 0.0
    return (bad / total) / (1.0 - slo)


@dataclass(frozen=True)
class BurnResult:
    """The first window pair that burns too fast, with both rates."""

    window: BurnWindow
    long_rate: float
    short_rate: float


def evaluate_burn(counts: Mapping[float, tuple[int, int]], slo: float, windows: tuple[BurnWindow, ...],
                  min_events: int = 1) -> BurnResult | None:
    """Check each window pair: both the long and the short window must burn at >= factor.

    `counts` maps a window length (seconds) to (good, bad) events within it. A long window with
    fewer than `min_events` events never fires (too little traffic to judge).
    """
    for window in windows:
        long_good, long_bad = counts.get(window.long, (0, 0))
        short_good, short_bad = counts.get(window.short, (0, 0))
        if long_good + long_bad < min_events:
            continue
        long_rate = burn_rate(long_good, long_bad, slo)
        short_rate = burn_rate(short_good, short_bad, slo)
        if long_rate >= window.factor and short_rate >= window.factor:
            return BurnResult(window, long_rate, short_rate)
    return None
