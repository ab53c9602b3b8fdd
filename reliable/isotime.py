"""The one way reliable writes and reads ISO 8601 times. Pure.

Written: UTC with a ``Z``, to the second for people (``2026-12-03T12:08:10Z``: the CLI, the
console, runbook pages) or to the millisecond for machines (``2026-12-03T12:08:46.123Z``: JSON log
lines, Alertmanager's startsAt/endsAt). Read: Python's ISO 8601 forms (``2026-06-01``,
``2026-06-01T12:00:00``, ``...Z``, ``...+02:00``), UTC unless the text has an offset.

`tests/unit/test_one_rule.py` fails when another module formats or parses an ISO time itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

__all__ = ["FORMS", "format_time", "parse_time_text"]

#: The accepted forms of a time read, as error messages state them.
FORMS = "an ISO 8601 time (2026-06-01T12:00:00Z; UTC unless an offset is given)"


@overload
def format_time(epoch: float | str, *, ms: bool = False) -> str: ...
@overload
def format_time(epoch: None, *, ms: bool = False) -> None: ...
def format_time(epoch: float | str | None, *, ms: bool = False) -> str | None:
    """Epoch seconds (a number, or a string of one) as ISO 8601 UTC with a ``Z``; None stays None.

    To the second, or to the millisecond with `ms`.
    """
    if epoch is None:
        return None
    moment = datetime.fromtimestamp(float(epoch), UTC)
    if ms:
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time_text(text: str) -> datetime:
    """The aware datetime `text` names (UTC unless it has an offset); ValueError stating FORMS."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not {FORMS}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
