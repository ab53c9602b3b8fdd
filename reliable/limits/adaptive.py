"""When an actor's effective concurrency goes down and back up: multiplicative decrease on
sustained rate limiting, additive increase after a quiet period. Pure: state and time in, state out.

- A rate-limited failure within `quiet` seconds of the previous one lengthens the streak; a longer
  gap starts a new streak at 1.
- When the streak reaches `streak_to_reduce` (the policy's `rate_limit.alert_after`), the
  effective concurrency is halved (floor 1) and the streak starts again from 0: a fleet still
  rate limited after that halves again, one streak later.
- Once neither a rate-limited failure nor a change has happened for `quiet` seconds, the effective
  concurrency grows by `step`, at most to the declared one; each step waits another `quiet`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["Adaptation", "AdaptiveSettings", "Change", "LimitState", "after_quiet", "after_rate_limited",
           "restore_due"]


@dataclass(frozen=True)
class AdaptiveSettings:
    """How fast concurrency reacts: the streak that halves it, the quiet period, the step back up."""

    streak_to_reduce: int
    quiet: float
    step: int

    def __post_init__(self) -> None:
        if self.streak_to_reduce < 1 or self.step < 1 or not self.quiet > 0:
            raise ValueError("streak_to_reduce and step must be 1 or more, quiet more than zero")


@dataclass(frozen=True)
class LimitState:
    """An actor's concurrency as stored: declared, effective now, the current rate-limited streak."""

    declared: int
    effective: int
    streak: int = 0
    last_rate_limited_at: float | None = None
    changed_at: float | None = None


@dataclass(frozen=True)
class Change:
    """A change of the effective concurrency (what the event records)."""

    kind: Literal["concurrency_reduced", "concurrency_restored"]
    before: int
    after: int


@dataclass(frozen=True)
class Adaptation:
    """The new state, and the change it makes (None: the effective concurrency stays)."""

    state: LimitState
    change: Change | None = None


def after_rate_limited(state: LimitState, now: float, settings: AdaptiveSettings) -> Adaptation:
    """The state after a rate-limited failure of the actor at `now`."""
    fresh = state.last_rate_limited_at is None or now > state.last_rate_limited_at + settings.quiet
    streak = 1 if fresh else state.streak + 1
    if streak < settings.streak_to_reduce or state.effective <= 1:
        return Adaptation(replace(state, streak=streak, last_rate_limited_at=now))
    lowered = max(1, state.effective // 2)
    return Adaptation(replace(state, effective=lowered, streak=0, last_rate_limited_at=now, changed_at=now),
                      Change("concurrency_reduced", state.effective, lowered))


def restore_due(state: LimitState, now: float, settings: AdaptiveSettings) -> bool:
    """Whether a step back up is due at `now` (cheap: the hot path asks before taking a lock)."""
    if state.effective >= state.declared:
        return False
    last = max(t for t in (state.last_rate_limited_at, state.changed_at, float("-inf")) if t is not None)
    return now >= last + settings.quiet


def after_quiet(state: LimitState, now: float, settings: AdaptiveSettings) -> Adaptation:
    """One step back up if one is due at `now`; the state unchanged otherwise."""
    if not restore_due(state, now, settings):
        return Adaptation(state)
    raised = min(state.declared, state.effective + settings.step)
    return Adaptation(replace(state, effective=raised, streak=0, changed_at=now),
                      Change("concurrency_restored", state.effective, raised))
