"""Matching exceptions against classification rules, without importing anything. Pure.

A rule matches when every condition it names holds: the job's contract is (not) idempotent, the
exception is (a subclass of) one of the dotted paths, its HTTP status is one of the statuses, its
message matches the regex, its attributes equal the given values.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..patterns import UserPattern

__all__ = [
    "Rule",
    "class_path",
    "exception_message",
    "exception_paths",
    "http_status",
    "normalize_exception_path",
    "parse_statuses",
    "truncate",
]

MAX_MESSAGE = 1000
_MISSING = object()
_STATUS_RANGE = re.compile(r"^\s*(\d{3})\s*-\s*(\d{3})\s*$")
_STATUS_CLASS = re.compile(r"^\s*([1-5])xx\s*$", re.IGNORECASE)


def class_path(cls: type) -> str:
    """The dotted path of a class: module and qualified name (builtins keep the `builtins.` prefix)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def normalize_exception_path(path: str) -> str:
    """`TimeoutError` and `builtins.TimeoutError` are the same path; anything else is kept as written."""
    path = path.strip()
    return path if "." in path else f"builtins.{path}"


def exception_paths(exc: BaseException) -> list[str]:
    """The dotted paths of the exception's class and every base class, most specific first."""
    return [class_path(cls) for cls in type(exc).__mro__]


def _loaded_class(path: str) -> type | None:
    """The class at `path` if its module is already imported (aliases such as `asyncio.TimeoutError`)."""
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    obj = getattr(module, name, None) if module is not None else None
    return obj if isinstance(obj, type) else None


def is_instance_of_path(exc: BaseException, path: str) -> bool:
    """Whether `exc` is an instance of the class named `path` (or of a subclass), imported or not."""
    mro = type(exc).__mro__
    if any(class_path(cls) == path for cls in mro):
        return True
    loaded = _loaded_class(path)
    return loaded is not None and loaded in mro


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries: `.response.status_code` (httpx, requests), `.status_code`, `.status`."""
    response = getattr(exc, "response", None)
    candidates = (getattr(response, "status_code", None) if response is not None else None,
                  getattr(exc, "status_code", None), getattr(exc, "status", None))
    for value in candidates:
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
    return None


def exception_message(exc: BaseException) -> str:
    """str(exc), never raising."""
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not break failure handling
        return f"<unprintable {type(exc).__name__}>"


def truncate(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` cut to at most `limit` characters, with a visible mark and the original length when cut."""
    text = text.replace("\x00", "\\0")
    if len(text) <= limit:
        return text
    mark = f"... [truncated, {len(text)} chars]"
    return text[: max(0, limit - len(mark))] + mark


def parse_statuses(value: object) -> frozenset[int]:
    """HTTP statuses from an int, a "5xx" class, a "500-504" range, or a list of those. Raises ValueError."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError("expected at least one HTTP status")
    out: set[int] = set()
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"expected an HTTP status (100-599, '5xx' or '500-504'), got {item!r}")
        if isinstance(item, int):
            low = high = item
        elif isinstance(item, str) and (m := _STATUS_CLASS.match(item)):
            low, high = int(m.group(1)) * 100, int(m.group(1)) * 100 + 99
        elif isinstance(item, str) and (m := _STATUS_RANGE.match(item)):
            low, high = int(m.group(1)), int(m.group(2))
        elif isinstance(item, str) and item.strip().isdigit():
            low = high = int(item)
        else:
            raise ValueError(f"expected an HTTP status (100-599, '5xx' or '500-504'), got {item!r}")
        if not (100 <= low <= high <= 599):
            raise ValueError(f"HTTP status {item!r} is outside 100-599 or an empty range")
        out.update(range(low, high + 1))
    return frozenset(out)


def _get_attribute(obj: object, dotted: str) -> object:
    for part in dotted.split("."):
        try:
            obj = getattr(obj, part, _MISSING)
        except Exception:  # a property that raises simply does not match
            return _MISSING
        if obj is _MISSING:
            return _MISSING
    return obj


@dataclass(frozen=True)
class Rule:
    """One classification rule: conditions (all must hold) and the error class they lead to."""

    name: str
    error_class: str
    exceptions: tuple[str, ...] = ()
    statuses: frozenset[int] | None = None
    message: UserPattern | None = None
    attributes: tuple[tuple[str, Any], ...] = ()
    source: str = "<policy>"
    path: str | None = None
    line: int | None = None
    exception_line: int | None = None
    #: True / False: the rule only applies to jobs whose contract is / is not idempotent; None: to every job.
    idempotent: bool | None = None
    #: Retry routing set by the rule itself (it overrides its class's `queue`); see reliable.policy.routes.
    queue: str | None = None
    queue_after: int | None = None

    @property
    def label(self) -> str:
        """Where the rule is and its name, e.g. "policies/builtin/default.yaml:41 (http-429)"."""
        return f"{self.source} ({self.name})"

    def applies_to(self, idempotent: bool) -> bool:
        """Whether the rule's `idempotent` condition, if it has one, admits a job whose contract says `idempotent`."""
        return self.idempotent is None or self.idempotent is idempotent

    def matches(self, exc: BaseException, *, idempotent: bool) -> bool:
        """Whether every condition of the rule holds for `exc` raised by a job (`idempotent`: its contract's)."""
        if not self.applies_to(idempotent):
            return False
        if self.exceptions and not any(is_instance_of_path(exc, path) for path in self.exceptions):
            return False
        if self.statuses is not None and http_status(exc) not in self.statuses:
            return False
        if self.message is not None and not self.message.search(exception_message(exc)):
            return False
        return all(_get_attribute(exc, name) == expected for name, expected in self.attributes)

    def covers(self, other: Rule, subclass: Mapping[tuple[str, str], bool] | None = None) -> bool:
        """Whether this rule matches everything `other` matches (so `other`, placed later, is unreachable).

        `subclass[(child, parent)]` may tell that one path is a subclass of another (known when imported).
        """
        if self.idempotent is not None and self.idempotent is not other.idempotent:
            return False
        if self.exceptions:
            if not other.exceptions:
                return False
            for path in other.exceptions:
                if not any(path == mine or (subclass or {}).get((path, mine), False) for mine in self.exceptions):
                    return False
        if self.statuses is not None and (other.statuses is None or not other.statuses <= self.statuses):
            return False
        if self.message is not None and (other.message is None or other.message.pattern != self.message.pattern):
            return False
        return set(self.attributes) <= set(other.attributes)

    def describe(self) -> str:
        """The rule's conditions in one line."""
        parts = []
        if self.idempotent is not None:
            parts.append("job idempotent" if self.idempotent else "job not idempotent")
        if self.exceptions:
            parts.append("exception " + " | ".join(self.exceptions))
        if self.statuses is not None:
            parts.append("status " + _describe_statuses(self.statuses))
        if self.message is not None:
            parts.append(f"message ~ /{self.message.pattern}/")
        parts.extend(f"{name} == {value!r}" for name, value in self.attributes)
        lane = "" if self.queue is None else f", retries on queue {self.queue}" + (
            f" after {self.queue_after} retries" if self.queue_after else "")
        return " and ".join(parts) + f" -> {self.error_class}{lane}"


def _describe_statuses(statuses: frozenset[int]) -> str:
    ordered = sorted(statuses)
    ranges: list[str] = []
    start = prev = ordered[0]
    for code in [*ordered[1:], -1]:
        if code == prev + 1:
            prev = code
            continue
        if start % 100 == 0 and prev == start + 99:
            ranges.append(f"{start // 100}xx")
        else:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = code
    return ",".join(ranges)
