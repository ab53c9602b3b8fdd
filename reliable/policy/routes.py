"""Retry routing: which queue a retry waits on. Pure.

An error class, or a rule (overriding its class), may say `queue: <name>`: the retries it decides
wait on that queue (a slow lane, another worker pool) instead of the job's own queue, from the
retry after its first `queue_after` retries on (default 0: from the first retry). A retry whose
class and rule name no queue goes back to the job's own queue (the one it was enqueued on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .matching import Rule
from .model import ClassSpec

__all__ = ["MAX_QUEUE_NAME", "Route", "queue_name", "route_for"]

#: Dramatiq's own rule for queue names (dramatiq/actor.py), without its delay/dead-letter suffixes.
_QUEUE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9._-]*")
_BROKER_SUFFIXES = (".DQ", ".XQ")
#: RabbitMQ's limit (255 bytes) less the 3 of the suffix Dramatiq adds for `<lane>.DQ` and `<lane>.XQ`
#: (the names are ASCII: one byte a character).
MAX_QUEUE_NAME = 255 - len(".DQ")


def queue_name(value: Any) -> str:
    """A Dramatiq queue name: a letter or '_', then letters, digits, '.', '_' or '-' (not .DQ/.XQ),
    at most `MAX_QUEUE_NAME` characters."""
    if not isinstance(value, str) or not _QUEUE_NAME.fullmatch(value):
        raise ValueError("expected a queue name (a letter or '_', then letters, digits, '.', '_' or '-'), "
                         f"got {value!r}")
    if len(value) > MAX_QUEUE_NAME:
        raise ValueError(f"queue name of {len(value)} characters: at most {MAX_QUEUE_NAME} (RabbitMQ allows "
                         "255 bytes, and Dramatiq also declares the queue's .DQ and .XQ)")
    if value.endswith(_BROKER_SUFFIXES):
        raise ValueError(f"{value!r} names a broker's delay or dead-letter queue (.DQ/.XQ); name the queue itself")
    return value


@dataclass(frozen=True)
class Route:
    """Where the retries of a class (or of one rule) wait: `queue`, from retry `after + 1` on."""

    queue: str
    after: int = 0
    #: What set it: "class <name>" or the rule's label.
    source: str = ""

    def lane(self, retry: int) -> str | None:
        """The queue retry number `retry` (1-based) waits on: `queue`, or None (the job's own queue)."""
        return self.queue if retry > self.after else None

    def describe(self) -> str:
        """One line: "queue slow (from retry 3; class timeout)"."""
        return f"queue {self.queue} (from retry {self.after + 1}; {self.source})"


def route_for(spec: ClassSpec, rule: Rule | None) -> Route | None:
    """The route of a failure classified as `spec` by `rule` (None: no rule matched): the rule's
    own `queue` first, else its class's; None when neither names one."""
    if rule is not None and rule.queue is not None:
        return Route(rule.queue, rule.queue_after or 0, f"rule {rule.label}")
    if spec.queue is not None:
        return Route(spec.queue, spec.queue_after, f"class {spec.name}")
    return None
