"""Rule conditions: the store condition types with their parameters, and PromQL expressions. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..durations import parse_duration
from ..yamlfile import Located, LocatedMap, LocatedSeq

__all__ = [
    "DEFAULT_BURN_WINDOWS",
    "OWNER_JOIN_LABELS",
    "STORE_TYPES",
    "BurnWindow",
    "PromQLCondition",
    "StoreCondition",
    "parse_condition",
]

STUCK_STATES = ("RUNNING", "STOPPING", "PAUSED")


@dataclass(frozen=True)
class BurnWindow:
    """One multi-window burn-rate alert: fire when both windows burn at least `factor` x budget."""

    long: float
    short: float
    factor: float


#: The SRE workbook's paging pair for a 30-day SLO; a ticket rule usually sets 1x over 3d and 6h.
DEFAULT_BURN_WINDOWS = (BurnWindow(3600, 300, 14.4), BurnWindow(6 * 3600, 1800, 6.0))


@dataclass(frozen=True)
class StoreCondition:
    """A condition evaluated over facts from the state store (see STORE_TYPES for the types)."""

    type: str
    states: tuple[str, ...] = ()
    older_than: float | None = None
    window: float | None = None
    min_count: int = 1
    threshold: float | None = None
    min_events: int = 1
    slo: float | None = None
    burn_windows: tuple[BurnWindow, ...] = ()
    group_by: str = "actor"
    limit: int = 50


#: The labels a PromQL rule with `owner: from_job` may join its owner on (`owner_on`).
OWNER_JOIN_LABELS = ("queue", "actor")


@dataclass(frozen=True)
class PromQLCondition:
    """A PromQL expression, exported to a Prometheus rule file and evaluated by Prometheus.

    `owner_on`: the labels of the expression's result that name the jobs' actor (and queue); a rule
    with `owner: from_job` takes its `owner` label from ``reliable_actor_owner`` joined on them
    (`reliable.alerts.promql`). Empty for a rule that names its team.
    """

    expr: str
    owner_on: tuple[str, ...] = ()


#: type -> (required keys, optional keys). Every key is validated by _PARSERS.
STORE_TYPES: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    "stuck": (frozenset({"older_than"}), frozenset({"states", "limit"})),
    "checkpoint_lag": (frozenset({"older_than"}), frozenset({"limit"})),
    "review_age": (frozenset({"older_than"}), frozenset()),
    "queue_age": (frozenset({"older_than"}), frozenset()),
    "schedule_lateness": (frozenset({"late_by"}), frozenset()),
    "dead_letters": (frozenset({"window"}), frozenset({"min_count"})),
    "failure_rate": (frozenset({"window", "threshold"}), frozenset({"min_events"})),
    "repeated_failures": (frozenset({"window", "min_count"}), frozenset()),
    "lease_expiries": (frozenset({"window", "min_count"}), frozenset()),
    "retry_storm": (frozenset({"window", "min_count"}), frozenset()),
    "budget_exhausted": (frozenset({"window"}), frozenset({"min_count"})),
    "error_budget_burn": (frozenset({"slo"}), frozenset({"windows", "min_events", "group_by"})),
    "schedule_missed": (frozenset({"late_by"}), frozenset({"window"})),
}


def _duration(value: Any, where: Located, name: str, *, positive: bool = True) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise where.error(str(exc), name) from None
    if positive and seconds <= 0:
        raise where.error(f"{name} must be longer than 0s", name)
    return seconds


def _count(value: Any, where: Located, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise where.error(f"{name} must be a whole number >= 1, got {value!r}", name)
    return value


def _ratio(value: Any, where: Located, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise where.error(f"{name} must be a number between 0 and 1 (exclusive), got {value!r}", name)
    return float(value)


def _states(value: Any, where: Located, name: str) -> tuple[str, ...]:
    if not isinstance(value, LocatedSeq) or not value:
        raise where.error(f"{name} must be a non-empty list of {', '.join(STUCK_STATES)}", name)
    for i, item in enumerate(value):
        if item not in STUCK_STATES:
            raise value.at(i).error(f"{name} may only name {', '.join(STUCK_STATES)}, got {item!r}", name)
    return tuple(dict.fromkeys(value))


def _windows(value: Any, where: Located, name: str) -> tuple[BurnWindow, ...]:
    if not isinstance(value, LocatedSeq) or not value:
        raise where.error(f"{name} must be a non-empty list of {{long, short, factor}}", name)
    out = []
    for i, item in enumerate(value):
        at = value.at(i)
        if not isinstance(item, LocatedMap) or set(item) != {"long", "short", "factor"}:
            raise at.error(f"each of {name} needs exactly the keys long, short, factor", name)
        long = _duration(item["long"], item.at("long"), f"{name}.long")
        short = _duration(item["short"], item.at("short"), f"{name}.short")
        factor = item["factor"]
        if isinstance(factor, bool) or not isinstance(factor, int | float) or factor <= 0:
            raise item.at("factor").error(f"{name}.factor must be a number > 0, got {factor!r}", f"{name}.factor")
        if short >= long:
            raise at.error(f"{name}: short window must be shorter than long window", name)
        out.append(BurnWindow(long, short, float(factor)))
    return tuple(out)


def _group_by(value: Any, where: Located, name: str) -> str:
    if value not in ("actor", "queue"):
        raise where.error(f"{name} must be actor or queue, got {value!r}", name)
    return str(value)


def _owner_on(value: Any, where: Located) -> tuple[str, ...]:
    if value is None:
        return ()
    allowed = ", ".join(OWNER_JOIN_LABELS)
    if (not isinstance(value, LocatedSeq) or not value or any(v not in OWNER_JOIN_LABELS for v in value)
            or "actor" not in value):
        raise where.error(f"condition.owner_on must list actor and optionally queue (of {allowed}): an actor has "
                          f"one owner, a queue may have several; got {value!r}", "condition.owner_on")
    return tuple(label for label in OWNER_JOIN_LABELS if label in value)


_PARSERS: Mapping[str, tuple[str, Callable[[Any, Located, str], Any]]] = {
    "states": ("states", _states),
    "older_than": ("older_than", _duration),
    "late_by": ("older_than", _duration),
    "window": ("window", _duration),
    "min_count": ("min_count", _count),
    "threshold": ("threshold", _ratio),
    "min_events": ("min_events", _count),
    "slo": ("slo", _ratio),
    "windows": ("burn_windows", _windows),
    "group_by": ("group_by", _group_by),
    "limit": ("limit", _count),
}


def parse_condition(kind: str, raw: Any, where: Located) -> StoreCondition | PromQLCondition:
    """Validate the `condition` mapping of a rule of `kind`; PolicyError names the bad field."""
    if not isinstance(raw, LocatedMap):
        raise where.error("condition must be a mapping", "condition")
    if kind == "promql":
        unknown = sorted(set(raw) - {"expr", "owner_on"})
        if unknown:
            raise raw.at(unknown[0]).error(f"unknown key {unknown[0]!r} in a promql condition (allowed: expr, "
                                           "owner_on)", f"condition.{unknown[0]}")
        expr = raw.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            raise raw.at("expr").error("a promql condition needs a non-empty expr", "condition.expr")
        return PromQLCondition(expr=expr.strip(), owner_on=_owner_on(raw.get("owner_on"), raw.at("owner_on")))
    ctype = raw.get("type")
    if not isinstance(ctype, str) or ctype not in STORE_TYPES:
        raise raw.at("type").error(f"condition.type must be one of {', '.join(STORE_TYPES)}, got {ctype!r}",
                                   "condition.type")
    required, optional = STORE_TYPES[ctype]
    for key in sorted(set(raw) - required - optional - {"type"}):
        allowed = ", ".join(sorted(required | optional))
        raise raw.at(key).error(f"unknown key {key!r} for condition type {ctype} (allowed: {allowed})",
                                f"condition.{key}")
    for key in sorted(required - set(raw)):
        raise raw.where.error(f"condition type {ctype} needs {key!r}", f"condition.{key}")
    values: dict[str, Any] = {"type": ctype}
    for key, item in raw.items():
        if key == "type":
            continue
        attr, parse = _PARSERS[key]
        values[attr] = parse(item, raw.at(key), f"condition.{key}")
    if ctype == "stuck":
        values.setdefault("states", STUCK_STATES)
    if ctype == "error_budget_burn":
        values.setdefault("burn_windows", DEFAULT_BURN_WINDOWS)
    return StoreCondition(**values)
