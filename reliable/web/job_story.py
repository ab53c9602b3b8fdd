"""How the job page tells a long job's story: runs of repeated events folded, effects grouped by
attempt, event details as fields, and the last command's operator and reason. Pure: no I/O.

A job that checkpoints every few seconds writes thousands of `checkpoint` events, and one that
records an operation key per row thousands of effects; shown one row each, its page is metres long.
The page shows, newest first:

- a run of consecutive events of the same name (at least `FOLD_FROM`) as one row, `checkpoint
  x13`, first and last time, the rows behind a disclosure (at most `FOLD_SHOWN` of them: the CLI's
  `reliable jobs show --json` has them all);
- the effects grouped by the attempt that recorded them, a group of `FOLD_FROM` or more folded;
- an event's `detail` as `key: value` fields (a nested value as compact JSON), not raw JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FOLD_FROM", "FOLD_SHOWN", "EffectGroup", "EventRun", "detail_fields", "group_effects", "runs"]

#: The shortest run of same-name events (or group of one attempt's effects) that is folded.
FOLD_FROM = 3
#: The most rows a folded run shows when opened (its count and times cover the rest).
FOLD_SHOWN = 50


@dataclass(frozen=True)
class EventRun:
    """Consecutive events of one name, newest first; `folded` when there are FOLD_FROM or more."""

    event: str
    items: tuple[Mapping[str, Any], ...]

    @property
    def count(self) -> int:
        """How many events the run holds."""
        return len(self.items)

    @property
    def folded(self) -> bool:
        """Whether the page shows it as one row with its rows behind a disclosure."""
        return self.count >= FOLD_FROM

    @property
    def newest(self) -> Mapping[str, Any]:
        """Its newest event."""
        return self.items[0]

    @property
    def oldest(self) -> Mapping[str, Any]:
        """Its oldest event."""
        return self.items[-1]

    @property
    def shown(self) -> tuple[Mapping[str, Any], ...]:
        """The rows shown when it is opened (the newest FOLD_SHOWN)."""
        return self.items[:FOLD_SHOWN]


def runs(events: Iterable[Mapping[str, Any]]) -> list[EventRun]:
    """`events` (newest first) as runs of the same event name; an event with an operator or an error
    is never folded into a run (each command and each failure keeps its own row)."""
    out: list[EventRun] = []
    current: list[Mapping[str, Any]] = []

    def close() -> None:
        if current:
            out.append(EventRun(str(current[0]["event"]), tuple(current)))
            current.clear()

    for event in events:
        alone = bool(event.get("operator") or event.get("error_type"))
        if alone or (current and current[0]["event"] != event["event"]):
            close()
        current.append(event)
        if alone:
            close()
    close()
    return out


@dataclass(frozen=True)
class EffectGroup:
    """The effects one attempt recorded, in the order recorded."""

    attempt_id: str | None
    items: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    @property
    def count(self) -> int:
        """How many operation keys the attempt recorded."""
        return len(self.items)

    @property
    def folded(self) -> bool:
        """Whether the page shows it behind a disclosure."""
        return self.count >= FOLD_FROM

    @property
    def replays(self) -> int:
        """The replays detected over the group's keys."""
        return sum(int(item.get("duplicates") or 0) for item in self.items)

    @property
    def shown(self) -> tuple[Mapping[str, Any], ...]:
        """The rows shown when it is opened (the first FOLD_SHOWN)."""
        return self.items[:FOLD_SHOWN]


def group_effects(effects: Sequence[Mapping[str, Any]]) -> list[EffectGroup]:
    """`effects` in runs of the same attempt (as recorded: an attempt's keys are consecutive)."""
    groups: list[tuple[str | None, list[Mapping[str, Any]]]] = []
    for effect in effects:
        if groups and groups[-1][0] == effect.get("attempt_id"):
            groups[-1][1].append(effect)
        else:
            groups.append((effect.get("attempt_id"), [effect]))
    return [EffectGroup(attempt_id, tuple(items)) for attempt_id, items in groups]

def detail_fields(detail: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """An event's detail as (key, value text) pairs, keys sorted: a string as it is, a number or a
    boolean as JSON writes it, a list or mapping as compact JSON."""
    if not detail:
        return []
    return [(str(key), value if isinstance(value, str) else
             json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str))
            for key, value in sorted(detail.items())]
