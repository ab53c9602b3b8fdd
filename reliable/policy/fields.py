"""Value validators for policy fields, and the table of job-contract keys. Pure.

Every validator takes the YAML value and returns the checked value or raises ValueError with a
sentence saying what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..durations import parse_duration
from .model import JITTERS, BackoffSettings, JobContract, RateLimitSettings, RetryBudget

__all__ = [
    "CONTRACT_KEYS",
    "NESTED_CONTRACT_KEYS",
    "Validator",
    "as_bool",
    "as_int",
    "as_optional",
    "as_str",
    "build_contract",
    "choice",
    "class_name",
    "code_reference",
    "contract_defaults",
    "duration",
    "identifier_path",
]

Validator = Callable[[Any], Any]
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def as_bool(value: Any) -> bool:
    """true or false."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {_kind(value)} {value!r}")
    return value


def as_str(value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {_kind(value)} {value!r}")
    return value


def as_int(minimum: int) -> Validator:
    """An integer at least `minimum`."""

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer >= {minimum}, got {_kind(value)} {value!r}")
        if value < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {value}")
        return value

    return check


def duration(value: Any) -> float:
    """A duration: seconds, or a string like 500ms, 30s, 1h30m (reliable.durations)."""
    return parse_duration(value)


def choice(*options: str) -> Validator:
    """One of `options`."""

    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return str(value)

    return check


def as_optional(inner: Validator) -> Validator:
    """null, or what `inner` accepts."""

    def check(value: Any) -> Any:
        return None if value is None else inner(value)

    return check


def identifier_path(value: Any) -> str:
    """A dotted Python path such as `httpx.HTTPStatusError` or `TimeoutError`."""
    if not isinstance(value, str) or not _DOTTED.match(value.strip()):
        raise ValueError(f"expected a dotted exception class path like 'httpx.HTTPStatusError', got {value!r}")
    return value.strip()


def code_reference(value: Any) -> str:
    """A callable named as `package.module:function`."""
    module, sep, function = value.strip().partition(":") if isinstance(value, str) else ("", "", "")
    if not sep or not _DOTTED.match(module) or not re.match(r"^[A-Za-z_]\w*$", function):
        raise ValueError(f"expected 'package.module:function', got {value!r}")
    return f"{module}:{function}"


def class_name(value: Any) -> str:
    """An error class name: letters, digits, '_' and '-'."""
    if not isinstance(value, str) or not re.match(r"^[A-Za-z][\w-]*$", value):
        raise ValueError(f"expected an error class name (letters, digits, _ or -), got {value!r}")
    return value


#: Flat contract keys a `defaults`, `queues.<q>` or `actors.<a>` section may set.
CONTRACT_KEYS: dict[str, Validator] = {
    "owner": as_optional(as_str),
    "idempotent": as_bool,
    "resumable": as_bool,
    "fast_path": as_bool,
    "checkpoint_schema": as_optional(as_int(0)),
    "stop_grace": duration,
    "max_attempts": as_int(1),
    "retry_on_crash": as_optional(as_bool),
    "compensation": as_optional(as_str),
    "resume_validator": as_optional(code_reference),
    "default_class": as_optional(class_name),
    "on_crash": choice("requeue", "retry"),
}

#: Nested contract sections; their keys flatten to "<section>.<key>". retry_budget may be null (no budget).
NESTED_CONTRACT_KEYS: dict[str, dict[str, Validator]] = {
    "sla": {"running": as_optional(duration), "stopping": as_optional(duration), "paused": as_optional(duration)},
    "backoff": {"base": duration, "cap": duration, "jitter": choice(*JITTERS), "floor": duration},
    "rate_limit": {"max_wait": duration, "max_retries": as_int(0), "alert_after": as_int(1)},
    "retry_budget": {"per_minute": as_int(1), "on_exhausted": choice("dead", "delay"), "delay": duration},
}


def contract_defaults() -> dict[str, Any]:
    """The built-in contract as flat keys (retry_on_crash None: follow idempotent)."""
    base = JobContract()
    flat: dict[str, Any] = {key: getattr(base, key) for key in CONTRACT_KEYS}
    flat["retry_on_crash"] = None
    for key in ("running", "stopping", "paused"):
        flat[f"sla.{key}"] = getattr(base, f"sla_{key}")
    for name, obj in (("backoff", BackoffSettings()), ("rate_limit", RateLimitSettings()),
                      ("retry_budget", RetryBudget())):
        for key in NESTED_CONTRACT_KEYS[name]:
            flat[f"{name}.{key}"] = getattr(obj, key)
    flat["retry_budget"] = True  # enabled
    return flat


def build_contract(flat: Mapping[str, Any]) -> JobContract:
    """A JobContract from resolved flat keys."""
    budget = None
    if flat["retry_budget"]:
        budget = RetryBudget(per_minute=flat["retry_budget.per_minute"],
                             on_exhausted=flat["retry_budget.on_exhausted"], delay=flat["retry_budget.delay"])
    retry_on_crash = flat["retry_on_crash"]
    return JobContract(
        owner=flat["owner"], idempotent=flat["idempotent"], resumable=flat["resumable"], fast_path=flat["fast_path"],
        checkpoint_schema=flat["checkpoint_schema"], stop_grace=flat["stop_grace"],
        max_attempts=flat["max_attempts"],
        retry_on_crash=flat["idempotent"] if retry_on_crash is None else retry_on_crash,
        compensation=flat["compensation"], resume_validator=flat["resume_validator"],
        sla_running=flat["sla.running"], sla_stopping=flat["sla.stopping"],
        sla_paused=flat["sla.paused"],
        backoff=BackoffSettings(base=flat["backoff.base"], cap=flat["backoff.cap"], jitter=flat["backoff.jitter"],
                                floor=flat["backoff.floor"]),
        default_class=flat["default_class"],
        rate_limit=RateLimitSettings(max_wait=flat["rate_limit.max_wait"],
                                     max_retries=flat["rate_limit.max_retries"],
                                     alert_after=flat["rate_limit.alert_after"]),
        retry_budget=budget, on_crash=flat["on_crash"],
    )
