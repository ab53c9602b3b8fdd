"""How Dramatiq's own actor options map to the policy: throws, retry_when, per-message retry
options, and min_backoff as a floor of the jittered backoff."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable.options import contract_options
from reliable.policy import BackoffSettings, Decision, Failure, JobContract, Policy, backoff_ceiling, backoff_delay

NOW = 1_800_000_000.0


def fail(policy: Policy, exc: BaseException, *, attempt: int = 1, contract: JobContract | None = None,
         **extra: object) -> Decision:
    failure = Failure(exception=exc, actor="a", queue="q", attempt=attempt, retry_count=attempt - 1,
                      contract=contract or policy.contract("a", "q"), now=NOW, rand=lambda: 0.5,
                      **extra)  # type: ignore[arg-type]
    return policy.decide(failure)


@pytest.fixture
def default() -> Policy:
    return Policy.load(None)


def test_throws_fails_at_once_whatever_the_class(default: Policy) -> None:
    decision = fail(default, TimeoutError("slow"), throws=(TimeoutError,))
    assert (decision.action, decision.rule, decision.error_class) == ("fail", "actor option throws", "transient")
    assert fail(default, TimeoutError("slow"), throws=KeyError).action == "retry", "not declared: retried"


def test_retry_when_replaces_max_attempts(default: Policy) -> None:
    calls: list[tuple[int, str]] = []

    def retry_when(retries: int, exc: BaseException) -> bool:
        calls.append((retries, type(exc).__name__))
        return retries < 7

    contract = default.contract("a", "q", {"max_retries": 1})
    beyond = fail(default, TimeoutError(), attempt=5, contract=contract, retry_when=retry_when)
    assert beyond.action == "retry" and "retry_when" in beyond.reason
    exhausted = fail(default, TimeoutError(), attempt=8, contract=contract, retry_when=retry_when)
    assert (exhausted.action, exhausted.retries_exhausted) == ("dead", True)
    assert calls == [(4, "TimeoutError"), (7, "TimeoutError")], "Dramatiq passes the retries so far"


def test_retry_when_does_not_retry_what_the_policy_never_retries(default: Policy) -> None:
    decision = fail(default, ValueError("bad"), retry_when=lambda retries, exc: True)
    assert decision.action == "fail"


def test_exhausting_max_attempts_is_marked(default: Policy) -> None:
    contract = default.contract("a", "q", {"max_retries": 2})
    assert fail(default, TimeoutError(), attempt=2, contract=contract).action == "retry"
    last = fail(default, TimeoutError(), attempt=3, contract=contract)
    assert (last.action, last.retries_exhausted) == ("dead", True)


def test_message_retry_options_win_over_the_actor_and_contract_options_do_not() -> None:
    merged = contract_options({"max_retries": 5, "min_backoff": 100, "idempotent": False},
                              {"max_retries": 0, "max_backoff": 2_000, "idempotent": True, "min_backoff": None})
    assert merged == {"max_retries": 0, "min_backoff": 100, "max_backoff": 2_000, "idempotent": False}


def test_min_backoff_is_base_and_floor(default: Policy) -> None:
    backoff = default.contract("a", "q", {"min_backoff": 1_000, "max_backoff": 5_000}).backoff
    assert (backoff.base, backoff.floor, backoff.cap) == (1.0, 1.0, 5.0)
    first = [backoff_delay(backoff, 0, lambda r=r: r) for r in (0.0, 0.5, 0.999)]
    assert first == [1.0, 1.0, 1.0], "the first retry waits exactly min_backoff"


floors = st.floats(min_value=0.0, max_value=50.0)
bases = st.floats(min_value=0.001, max_value=100.0)
caps = st.floats(min_value=0.001, max_value=1_000.0)
retries = st.integers(min_value=0, max_value=200)
draws = st.floats(min_value=0.0, max_value=1.0)


@given(floors, bases, caps, retries, draws, st.sampled_from(["full", "equal", "none"]))
def test_a_floor_bounds_every_jitter(floor: float, base: float, cap: float, retry: int, draw: float,
                                     jitter: str) -> None:
    settings = BackoffSettings(base=base, cap=cap, jitter=jitter, floor=floor)  # type: ignore[arg-type]
    delay = backoff_delay(settings, retry, lambda: draw)
    assert min(floor, cap) <= delay <= max(backoff_ceiling(settings, retry), min(floor, cap))
    assert delay <= cap


@given(bases, caps, retries, draws)
def test_no_floor_keeps_full_jitter(base: float, cap: float, retry: int, draw: float) -> None:
    settings = BackoffSettings(base=base, cap=cap)
    assert backoff_delay(settings, retry, lambda: draw) == pytest.approx(draw * backoff_ceiling(settings, retry))
