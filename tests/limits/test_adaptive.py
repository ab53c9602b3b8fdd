"""The adaptive decision (pure): examples, then properties over any sequence of events (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliable.limits.adaptive import (
    AdaptiveSettings,
    LimitState,
    after_quiet,
    after_rate_limited,
    restore_due,
)

S = AdaptiveSettings(streak_to_reduce=3, quiet=60.0, step=2)


def test_a_streak_halves_then_starts_again() -> None:
    state = LimitState(declared=8, effective=8)
    for at in (0.0, 10.0):
        adaptation = after_rate_limited(state, at, S)
        assert adaptation.change is None
        state = adaptation.state
    assert state.streak == 2
    adaptation = after_rate_limited(state, 20.0, S)
    assert adaptation.change is not None
    assert (adaptation.change.kind, adaptation.change.before, adaptation.change.after) == ("concurrency_reduced", 8, 4)
    assert adaptation.state.streak == 0 and adaptation.state.changed_at == 20.0


def test_a_gap_longer_than_quiet_starts_a_new_streak() -> None:
    state = after_rate_limited(LimitState(declared=8, effective=8), 0.0, S).state
    state = after_rate_limited(state, 10.0, S).state
    assert after_rate_limited(state, 71.0, S).state.streak == 1


def test_the_floor_is_one() -> None:
    state = LimitState(declared=3, effective=1, streak=5, last_rate_limited_at=0.0)
    adaptation = after_rate_limited(state, 1.0, S)
    assert adaptation.change is None and adaptation.state.effective == 1


def test_restoring_waits_for_quiet_then_steps_up_to_the_declaration() -> None:
    state = LimitState(declared=5, effective=1, last_rate_limited_at=100.0, changed_at=100.0)
    assert not restore_due(state, 159.9, S) and after_quiet(state, 159.9, S).change is None
    steps = []
    at = 160.0
    while (adaptation := after_quiet(state, at, S)).change is not None:
        steps.append(adaptation.change.after)
        state = adaptation.state
        assert after_quiet(state, at + 59, S).change is None  # each step waits another quiet period
        at += 60
    assert steps == [3, 5]
    assert state.effective == state.declared and not restore_due(state, at + 1e6, S)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        AdaptiveSettings(streak_to_reduce=0, quiet=1, step=1)
    with pytest.raises(ValueError):
        AdaptiveSettings(streak_to_reduce=1, quiet=0, step=1)


events = st.lists(st.tuples(st.sampled_from(["rate_limited", "quiet"]),
                            st.floats(min_value=0, max_value=200, allow_nan=False)), max_size=60)
adaptive_settings = st.builds(AdaptiveSettings, streak_to_reduce=st.integers(1, 6),
                              quiet=st.floats(min_value=0.5, max_value=120), step=st.integers(1, 5))


@settings(max_examples=400, deadline=None)
@given(declared=st.integers(1, 64), steps=events, s=adaptive_settings)
def test_invariants_over_any_history(declared: int, steps: list[tuple[str, float]], s: AdaptiveSettings) -> None:
    state = LimitState(declared=declared, effective=declared)
    now = 0.0
    for kind, gap in steps:
        now += gap
        before = state
        adaptation = after_rate_limited(state, now, s) if kind == "rate_limited" else after_quiet(state, now, s)
        state = adaptation.state
        assert 1 <= state.effective <= state.declared == declared
        change = adaptation.change
        if change is None:
            assert state.effective == before.effective
            continue
        assert (change.before, change.after) == (before.effective, state.effective)
        assert state.changed_at == now and state.streak == 0
        if change.kind == "concurrency_reduced":
            assert kind == "rate_limited" and before.effective > 1
            assert state.effective == max(1, before.effective // 2)
            # only at the end of a streak of the required length, each within `quiet` of the last
            assert before.streak + 1 >= s.streak_to_reduce or s.streak_to_reduce == 1
        else:
            assert kind == "quiet" and state.effective == min(declared, before.effective + s.step)
            last = max(t for t in (before.last_rate_limited_at, before.changed_at, float("-inf")) if t is not None)
            assert now >= last + s.quiet


@settings(max_examples=200, deadline=None)
@given(declared=st.integers(1, 64), s=adaptive_settings, hits=st.integers(0, 40))
def test_quiet_always_restores_the_declaration(declared: int, s: AdaptiveSettings, hits: int) -> None:
    state = LimitState(declared=declared, effective=declared)
    now = 0.0
    for _ in range(hits):
        now += s.quiet / 2
        state = after_rate_limited(state, now, s).state
    rounds = 0
    while state.effective < declared:
        now += s.quiet
        state = after_quiet(state, now, s).state
        rounds += 1
        assert rounds <= declared  # every quiet period makes progress
    assert not restore_due(state, now + s.quiet, s)


@settings(max_examples=200, deadline=None)
@given(declared=st.integers(2, 64), s=adaptive_settings)
def test_sustained_rate_limiting_reaches_the_floor(declared: int, s: AdaptiveSettings) -> None:
    state = LimitState(declared=declared, effective=declared)
    now = 0.0
    for _ in range(s.streak_to_reduce * declared.bit_length() + 1):
        now += s.quiet / 2
        state = after_rate_limited(state, now, s).state
    assert state.effective == 1
