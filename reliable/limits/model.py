"""An actor's limits: what `@dramatiq.actor(limits=...)` declares, validated once at declaration. Pure.

    @dramatiq.actor(limits=reliable.Limits(concurrency=4, rate="10/s", key="account_id"))

- `concurrency`: at most N attempts of the actor (per key) run at once across every worker process;
- `rate`: N starts per period (``"10/s"``, ``"600/1m"``, ``"5/1h30m"``) across every worker, a token
  bucket: a burst of up to N at once, then one every period/N (at most 2N in any one period);
- `key`: the limits hold per key instead of per actor: the name of one of the actor's arguments, or a
  callable given the message's arguments (``key=lambda account_id, **_: account_id``);
- `shards`: rate buckets (default min(N, 8)): each holds 1/shards of the tokens, so starts do not
  queue on one row;
- `adaptive`, `quiet`, `step`: on sustained rate limiting (the policy's `rate_limit.alert_after`
  rate-limited failures of the actor in a row, each within `quiet` of the last) the effective
  concurrency is halved (floor 1); after `quiet` without one it grows back by `step` at a time;
- `delay`: the base of the jittered delay a job waits when no slot is free.

Errors are `ConfigError`s naming the actor and the field.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..durations import parse_duration
from ..errors import ConfigError, ReliableError

__all__ = ["MAX_KEY_LENGTH", "LimitKeyError", "LimitSpec", "Limits", "limit_error", "limit_spec"]

#: Keys longer than this are cut (the slot and bucket rows keep at most 255 characters).
MAX_KEY_LENGTH = 200
_DEFAULT_SHARDS = 8


@dataclass(frozen=True)
class Limits:
    """Concurrency and rate limits of an actor, held across all worker processes in the store."""

    concurrency: int | None = None
    rate: str | None = None
    key: str | Callable[..., Any] | None = None
    shards: int | None = None
    adaptive: bool = True
    quiet: float | str = 60.0
    step: int | None = None
    delay: float | str = 1.0


@dataclass(frozen=True)
class LimitSpec:
    """Validated limits: rate as `rate_count` starts per `rate_period` seconds, split over `shards`."""

    actor: str
    concurrency: int | None
    rate_count: int | None
    rate_period: float | None
    shards: int
    key: Callable[[tuple[Any, ...], Mapping[str, Any]], str] | None
    adaptive: bool
    quiet: float
    step: int
    delay: float

    @property
    def bucket_capacity(self) -> float:
        """Tokens one rate bucket holds when full (its share of the burst)."""
        assert self.rate_count is not None
        return self.rate_count / self.shards

    @property
    def bucket_refill(self) -> float:
        """Tokens one rate bucket gains per second."""
        assert self.rate_count is not None and self.rate_period is not None
        return self.rate_count / self.rate_period / self.shards

    def key_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The key a message's arguments fall under ("" when the limits are per actor)."""
        if self.key is None:
            return ""
        try:
            return self.key(args, kwargs)[:MAX_KEY_LENGTH]
        except Exception as exc:
            raise LimitKeyError(f"actor {self.actor!r}: limits.key {self.key.__name__} raised "
                                f"{type(exc).__name__}: {exc}") from exc


class LimitKeyError(ReliableError):
    """A limits key could not be computed from a message's arguments: its job cannot run (it fails)."""


def limit_error(actor: str, field: str, problem: str) -> ConfigError:
    """The ConfigError for a bad `limits.<field>` of `actor`."""
    return ConfigError(f"actor {actor!r}: limits.{field}: {problem}")


def _positive_int(actor: str, field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise limit_error(actor, field, f"expected a whole number of 1 or more, got {value!r}")
    return value


def _seconds(actor: str, field: str, value: object, *, positive: bool = True) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise limit_error(actor, field, str(exc)) from None
    if positive and not seconds > 0:
        raise limit_error(actor, field, f"expected more than zero, got {value!r}")
    return seconds


def _rate(actor: str, value: object) -> tuple[int, float]:
    if not isinstance(value, str) or value.count("/") != 1:
        raise limit_error(actor, "rate", f"expected 'N/period' such as '10/s' or '600/1m', got {value!r}")
    count_text, period_text = (part.strip() for part in value.split("/"))
    if not count_text.isdigit() or int(count_text) < 1:
        raise limit_error(actor, "rate", f"the count in {value!r} must be a whole number of 1 or more")
    period = period_text if period_text[:1].isdigit() else f"1{period_text}"
    return int(count_text), _seconds(actor, "rate", period)


def _key(actor: str, value: object, fn: Callable[..., Any] | None
         ) -> Callable[[tuple[Any, ...], Mapping[str, Any]], str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        index = _argument_index(actor, value, fn)

        def by_argument(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
            if value in kwargs:
                return str(kwargs[value])
            return str(args[index]) if index is not None and index < len(args) else ""

        by_argument.__name__ = f"(argument {value!r})"
        return by_argument
    if callable(value):
        compute = value

        def by_callable(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
            return str(compute(*args, **kwargs))

        by_callable.__name__ = f"callable {getattr(value, '__qualname__', None) or repr(value)}"
        return by_callable
    raise limit_error(actor, "key", f"expected an argument name or a callable, got {value!r}")


def _argument_index(actor: str, name: str, fn: Callable[..., Any] | None) -> int | None:
    """The position of argument `name` of the actor's function (None: keyword-only)."""
    if fn is None:
        return None
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for index, parameter in enumerate(parameters):
        if parameter.name == name:
            positional = parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
            return index if positional else None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    known = ", ".join(p.name for p in parameters) or "none"
    raise limit_error(actor, "key", f"the actor has no argument {name!r} (its arguments: {known})")


def limit_spec(actor: str, value: object, fn: Callable[..., Any] | None = None) -> LimitSpec | None:
    """The validated limits of `actor` from its `limits` option (a Limits or a mapping; None: none).

    `fn` is the actor's function, for checking a `key` that names an argument.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        known = [f.name for f in fields(Limits)]
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise limit_error(actor, unknown[0], f"unknown field (known: {', '.join(known)})")
        value = Limits(**value)
    if not isinstance(value, Limits):
        raise ConfigError(f"actor {actor!r}: limits: expected reliable.Limits(...) or a mapping, got {value!r}")
    concurrency = None if value.concurrency is None else _positive_int(actor, "concurrency", value.concurrency)
    count, period = _rate(actor, value.rate) if value.rate is not None else (None, None)
    if concurrency is None and count is None:
        raise limit_error(actor, "concurrency", "declare a concurrency or a rate (or both)")
    if value.shards is not None and count is None:
        raise limit_error(actor, "shards", "applies to a rate limit: declare a rate")
    shards = _positive_int(actor, "shards", value.shards) if value.shards is not None \
        else min(count or 1, _DEFAULT_SHARDS)
    if count is not None and shards > count:
        raise limit_error(actor, "shards", f"{shards} buckets for {count} tokens: at most one bucket per token")
    if not isinstance(value.adaptive, bool):
        raise limit_error(actor, "adaptive", f"expected true or false, got {value.adaptive!r}")
    step = _positive_int(actor, "step", value.step) if value.step is not None \
        else max(1, math.ceil((concurrency or 1) / 4))
    return LimitSpec(actor=actor, concurrency=concurrency, rate_count=count, rate_period=period, shards=shards,
                     key=_key(actor, value.key, fn), adaptive=value.adaptive,
                     quiet=_seconds(actor, "quiet", value.quiet), step=step,
                     delay=_seconds(actor, "delay", value.delay))
