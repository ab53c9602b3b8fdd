"""Schedule declarations (code or YAML) and the misfire decision. Pure: no I/O but reading a YAML file.

A YAML file holds one top-level key, `schedules`, a list of schedules with the fields of `Schedule`::

    schedules:
      - name: nightly-export          # unique; the key of its slots and its alerts
        actor: export                 # a tracked actor (not reliable=False)
        cron: "0 2 * * *"             # or every: 5m (a duration: 90, 90s, 5m, 1h)
        timezone: Europe/Paris        # IANA; cron only; default UTC
        args: [1]
        kwargs: {account_id: a1}
        misfire: catch_up             # skip (default) | run_once | catch_up
        catch_up_max: 3               # catch_up: at most this many missed slots fire
        misfire_grace: 5m             # a slot this late or less is on time (default 1m)
        paused: false                 # the state a new schedule starts in
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..durations import parse_duration
from ..errors import PolicyError
from .cron import Every, Timing, parse_cron, parse_zone

__all__ = ["DEFAULT_GRACE", "MAX_CATCH_UP", "MISFIRE_POLICIES", "MisfirePlan", "Schedule", "load_schedules",
           "plan_misfire"]

MISFIRE_POLICIES = ("skip", "run_once", "catch_up")
#: A slot at most this late is on time, unless a schedule says otherwise.
DEFAULT_GRACE = 60.0
#: The most missed slots `catch_up` may fire.
MAX_CATCH_UP = 1000
#: The most slots a schedule's misfire_grace may cover (what one decision fires on time, at most).
MAX_ON_TIME = 1000
#: How many due slots one decision enumerates from the watermark on; past it, a second stretch
#: ending now is enumerated and the slots between the two are dropped uncounted (bounded work
#: after a long downtime of a frequent schedule).
_MAX_SLOTS = 10_000
_FIELDS = ("name", "actor", "cron", "every", "timezone", "args", "kwargs", "misfire", "catch_up_max",
           "misfire_grace", "paused")


def _fail(message: str, name: str) -> PolicyError:
    return PolicyError(message, field=name)


@dataclass(frozen=True)
class Schedule:
    """A recurring job: `actor` called with `args` / `kwargs` once per slot of `cron` or `every`.

    Fields:
      name: unique among schedules; the slots and alerts of the schedule carry it.
      actor: the name of a tracked actor (declared without ``reliable=False``).
      cron: a 5-field cron expression or a macro (@hourly, @daily...), in `timezone`.
      every: or a fixed interval: seconds or a duration ("90s", "5m", "1h"), whole seconds,
        aligned on the Unix epoch (UTC).
      timezone: the IANA zone `cron` is read in (default UTC).
      args, kwargs: the actor's arguments (JSON values).
      misfire: what a scheduler does with slots missed by more than `misfire_grace` (downtime):
        "skip" drops them, "run_once" fires the most recent one, "catch_up" fires the last
        `catch_up_max` of them. Slots within the grace fire in any case.
      catch_up_max: with "catch_up", how many missed slots at most fire (default 1).
      misfire_grace: seconds or a duration (default 1m).
      paused: the state the schedule starts in when first stored (later, only `pause` / `resume`
        change it).
    """

    name: str
    actor: str
    cron: str | None = None
    every: float | str | None = None
    timezone: str = "UTC"
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    misfire: str = "skip"
    catch_up_max: int = 1
    misfire_grace: float | str = DEFAULT_GRACE
    paused: bool = False

    def __post_init__(self) -> None:
        for name in ("name", "actor"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or value != value.strip():
                raise _fail(f"{name} must be a non-empty string without surrounding spaces, got {value!r}", name)
        if len(self.name) > 200:
            raise _fail("name is longer than 200 characters", "name")
        if (self.cron is None) == (self.every is None):
            raise _fail(f"schedule {self.name!r} needs exactly one of cron and every", "cron")
        try:
            parse_zone(self.timezone)
        except ValueError as exc:
            raise _fail(str(exc), "timezone") from None
        if self.cron is not None:
            if not isinstance(self.cron, str):
                raise _fail(f"cron must be a string such as '*/5 * * * *', got {type(self.cron).__name__}", "cron")
            try:
                parse_cron(self.cron, self.timezone)
            except ValueError as exc:
                raise _fail(f"bad cron expression: {exc}", "cron") from None
        else:
            if self.timezone != "UTC":
                raise _fail("timezone applies to cron only: an interval is counted in UTC seconds", "timezone")
            object.__setattr__(self, "every", _interval(self.every))
        if not isinstance(self.args, list | tuple):
            raise _fail(f"args must be a list, got {type(self.args).__name__}", "args")
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise _fail("kwargs must be a mapping with string keys", "kwargs")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "kwargs", dict(self.kwargs))
        for name in ("args", "kwargs"):
            try:
                json.dumps(getattr(self, name), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise _fail(f"{name} must hold JSON values only: {exc}", name) from None
        if self.misfire not in MISFIRE_POLICIES:
            raise _fail(f"misfire must be one of {', '.join(MISFIRE_POLICIES)}, got {self.misfire!r}", "misfire")
        count = self.catch_up_max
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_CATCH_UP:
            raise _fail(f"catch_up_max must be a whole number from 1 to {MAX_CATCH_UP}, got {self.catch_up_max!r}",
                        "catch_up_max")
        if self.catch_up_max != 1 and self.misfire != "catch_up":
            raise _fail("catch_up_max applies to misfire: catch_up only", "catch_up_max")
        try:
            object.__setattr__(self, "misfire_grace", parse_duration(self.misfire_grace))
        except ValueError as exc:
            raise _fail(str(exc), "misfire_grace") from None
        # One decision fires at most the slots within the grace (plus catch_up_max): bounded here.
        _, bounded = _due(self.timing, 0.0, self.grace, MAX_ON_TIME)
        if not bounded:
            raise _fail(f"misfire_grace of {self.grace:g}s covers more than {MAX_ON_TIME} slots of this schedule; "
                        "shorten it (or fire less often)", "misfire_grace")
        if not isinstance(self.paused, bool):
            raise _fail(f"paused must be true or false, got {self.paused!r}", "paused")

    @property
    def timing(self) -> Timing:
        """When it fires: a Cron or an Every."""
        if self.cron is not None:
            return parse_cron(self.cron, self.timezone)
        assert isinstance(self.every, int)
        return Every(self.every)

    @property
    def grace(self) -> float:
        """`misfire_grace` in seconds."""
        assert isinstance(self.misfire_grace, float)
        return self.misfire_grace

    def definition(self) -> dict[str, Any]:
        """The declaration as JSON values (what the store keeps; `from_definition` reads it back)."""
        return {name: (list(value) if name == "args" else value)
                for name in _FIELDS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_definition(cls, data: Mapping[str, Any]) -> Schedule:
        """The Schedule a stored definition describes."""
        return cls(**{name: data[name] for name in _FIELDS if name in data})

    def describe(self) -> str:
        """The timing in a few words: "cron 0 2 * * * (Europe/Paris)" or "every 300s"."""
        if self.cron is not None:
            return f"cron {self.cron} ({self.timezone})"
        return f"every {self.every}s"


def _interval(value: Any) -> int:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise _fail(str(exc), "every") from None
    if seconds < 1 or seconds != int(seconds):
        raise _fail(f"every must be a whole number of seconds, at least 1, got {value!r}", "every")
    return int(seconds)


def load_schedules(source: Iterable[Schedule] | str | os.PathLike[str] | None) -> tuple[Schedule, ...]:
    """Schedules from code (Schedule objects) or a YAML file; PolicyError naming file, line and field.

    Names must be unique.
    """
    if source is None:
        return ()
    if isinstance(source, str | os.PathLike):
        schedules = _from_yaml(Path(source))
    else:
        schedules = tuple(source)
        for item in schedules:
            if not isinstance(item, Schedule):
                raise PolicyError(f"schedules must be Schedule objects or a YAML file, got {type(item).__name__}",
                                  field="schedules")
        seen: set[str] = set()
        for item in schedules:
            if item.name in seen:
                raise PolicyError(f"two schedules are named {item.name!r}", field="name")
            seen.add(item.name)
    return schedules


def _from_yaml(path: Path) -> tuple[Schedule, ...]:
    # Imported here: PyYAML is not needed by schedules declared in code.
    from ..yamlfile import LocatedMap, LocatedSeq, load

    doc = load(path, "schedules file")
    if not isinstance(doc, LocatedMap) or set(doc) != {"schedules"}:
        raise PolicyError("a schedules file holds one key, schedules: a list of schedules", path=str(path),
                          line=doc.where.line if isinstance(doc, LocatedMap) else None, field="schedules")
    items = doc["schedules"]
    if not isinstance(items, LocatedSeq):
        raise doc.at("schedules").error("schedules must be a list", "schedules")
    out: list[Schedule] = []
    lines: dict[str, int] = {}
    for index, raw in enumerate(items):
        where = items.at(index)
        if not isinstance(raw, LocatedMap):
            raise where.error("each schedule is a mapping (name, actor, cron or every, ...)", "schedules")
        for key in raw:
            if key not in _FIELDS:
                raise raw.at(key).error(f"unknown key {key!r} (known: {', '.join(_FIELDS)})", key)
        try:
            schedule = Schedule(**dict(raw))
        except TypeError:
            missing = [key for key in ("name", "actor") if key not in raw]
            raise where.error(f"a schedule needs {' and '.join(missing)}", missing[0]) from None
        except PolicyError as exc:
            raise raw.at(exc.field or "name").error(str(exc).removesuffix(f" (field: {exc.field})"),
                                                    exc.field) from None
        if schedule.name in lines:
            raise raw.at("name").error(f"two schedules are named {schedule.name!r} (the other at line "
                                       f"{lines[schedule.name]})", "name")
        lines[schedule.name] = raw.at("name").line
        out.append(schedule)
    return tuple(out)


@dataclass(frozen=True)
class MisfirePlan:
    """What a scheduler does at `now` with the slots after the schedule's watermark.

    fire: the slots to fire, oldest first. missed: how many due slots were later than the grace;
    skipped: how many of them are dropped (first_skipped and last_skipped: the oldest and newest);
    counted: False when a long downtime left more slots than one decision enumerates (the counts
    are then those of the slots looked at). watermark: every slot up to it is decided (None: none
    was due).
    """

    fire: tuple[int, ...]
    missed: int = 0
    skipped: int = 0
    first_skipped: int | None = None
    last_skipped: int | None = None
    counted: bool = True
    watermark: int | None = None


def _due(timing: Timing, since: float, now: float, limit: int) -> tuple[list[int], bool]:
    """Up to `limit` slots in (since, now], and whether that is all of them."""
    out: list[int] = []
    slot = timing.next_after(since)
    while slot <= now:
        if len(out) == limit:
            return out, False
        out.append(slot)
        slot = timing.next_after(slot)
    return out, True


def plan_misfire(schedule: Schedule, since: float, now: float) -> MisfirePlan:
    """Decide the slots after `since` (exclusive) up to `now` (inclusive), by the misfire policy.

    A slot at most `misfire_grace` old is on time and fires. Older ones were missed: "skip" drops
    them, "run_once" fires the most recent of them, "catch_up" the last `catch_up_max` of them.
    """
    timing = schedule.timing
    due, counted = _due(timing, since, now, _MAX_SLOTS)
    if not counted:
        # The stretch just before now, about as long as the one enumerated: it holds the newest slots.
        tail, _ = _due(timing, max(due[-1], now - (due[-1] - since)), now, 2 * _MAX_SLOTS)
        due += tail
    if not due:
        return MisfirePlan(())
    missed = [s for s in due if now - s > schedule.grace]
    on_time = due[len(missed):]
    keep = {"skip": 0, "run_once": 1, "catch_up": schedule.catch_up_max}[schedule.misfire]
    caught = missed[max(0, len(missed) - keep):] if keep else []
    dropped = missed[:len(missed) - len(caught)]
    return MisfirePlan(tuple(caught + on_time), len(missed), len(dropped), dropped[0] if dropped else None,
                       dropped[-1] if dropped else None, counted, due[-1])
