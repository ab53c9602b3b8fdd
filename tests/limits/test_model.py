"""Declaring limits: what is accepted, and errors that name the actor and the field. Pure."""

from __future__ import annotations

from typing import Any

import pytest

from reliable.errors import ConfigError
from reliable.limits import Limits, limit_spec
from reliable.limits.gate import MAX_DEFERRAL, deferral_delay, records_deferral


def _fn(account_id: str, amount: int, *, region: str = "eu") -> None:
    return None


def test_a_full_declaration() -> None:
    spec = limit_spec("charge", Limits(concurrency=6, rate="600/1m", key="account_id", quiet="30s", delay="500ms"),
                      _fn)
    assert spec is not None
    assert (spec.concurrency, spec.rate_count, spec.rate_period, spec.shards) == (6, 600, 60.0, 8)
    assert (spec.quiet, spec.delay, spec.step) == (30.0, 0.5, 2)
    assert spec.bucket_capacity == 75 and spec.bucket_refill == pytest.approx(1.25)
    assert spec.key_of(("acme", 3), {}) == "acme" and spec.key_of((), {"account_id": 7}) == "7"


def test_a_mapping_is_accepted_and_a_rate_unit_alone_means_one() -> None:
    spec = limit_spec("charge", {"rate": "3/s"})
    assert spec is not None and (spec.rate_count, spec.rate_period, spec.shards, spec.concurrency) == (3, 1.0, 3, None)
    assert spec.key_of((1,), {}) == ""


def test_a_key_callable_gets_the_messages_arguments() -> None:
    spec = limit_spec("charge", Limits(concurrency=1, key=lambda account_id, amount, **_: f"{account_id}/{amount}"))
    assert spec is not None and spec.key_of(("acme", 3), {"region": "us"}) == "acme/3"
    assert spec.key_of(("x" * 500, 1), {}) == ("x" * 500 + "/1")[:200]


def test_keyword_only_argument_key() -> None:
    spec = limit_spec("charge", Limits(concurrency=1, key="region"), _fn)
    assert spec is not None and spec.key_of(("a", 1), {"region": "us"}) == "us" and spec.key_of(("a", 1), {}) == ""


def test_none_declares_nothing() -> None:
    assert limit_spec("charge", None) is None


@pytest.mark.parametrize(("limits", "field", "words"), [
    (Limits(), "concurrency", "declare a concurrency or a rate"),
    (Limits(concurrency=0), "concurrency", "1 or more"),
    (Limits(concurrency=True), "concurrency", "1 or more"),
    (Limits(rate="10"), "rate", "N/period"),
    (Limits(rate="0/s"), "rate", "1 or more"),
    (Limits(rate="ten/s"), "rate", "1 or more"),
    (Limits(rate="10/fortnight"), "rate", "bad duration"),
    (Limits(rate="10/0s"), "rate", "more than zero"),
    (Limits(concurrency=1, shards=2), "shards", "declare a rate"),
    (Limits(rate="2/s", shards=3), "shards", "at most one bucket per token"),
    (Limits(concurrency=1, key="acount_id"), "key", "no argument 'acount_id' (its arguments: account_id, amount"),
    (Limits(concurrency=1, key=3), "key", "an argument name or a callable"),
    (Limits(concurrency=1, quiet="-1s"), "quiet", "zero or more"),
    (Limits(concurrency=1, quiet=0), "quiet", "more than zero"),
    (Limits(concurrency=1, step=0), "step", "1 or more"),
    (Limits(concurrency=1, adaptive="yes"), "adaptive", "true or false"),  # type: ignore[arg-type]
    ({"concurency": 2}, "concurency", "unknown field"),
])
def test_errors_name_the_actor_and_the_field(limits: Any, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        limit_spec("charge", limits, _fn)
    assert str(info.value).startswith(f"actor 'charge': limits.{field}: ")
    assert words in str(info.value)


def test_a_wrong_type_is_named() -> None:
    with pytest.raises(ConfigError, match=r"actor 'charge': limits: expected reliable.Limits"):
        limit_spec("charge", 4)


@pytest.mark.parametrize(("base", "wait", "rand", "expected"), [
    (1.0, 0.0, 0.0, 0.5), (1.0, 0.0, 0.999, 1.499), (1.0, 4.0, 0.5, 4.0), (1.0, 1000.0, 0.5, MAX_DEFERRAL),
])
def test_deferral_delay(base: float, wait: float, rand: float, expected: float) -> None:
    assert deferral_delay(base, wait, rand) == pytest.approx(expected)


def test_deferrals_recorded_at_powers_of_two() -> None:
    assert [n for n in range(0, 70) if records_deferral(n)] == [1, 2, 4, 8, 16, 32, 64]
