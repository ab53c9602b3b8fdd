"""Attempt and transition events as structured JSON log lines, and trace ids.

The StateStore calls its listeners with every event row after the commit (see
`StateStore.add_listener`). `JsonLogSink` is such a listener: it emits one log record per event on
the ``reliable.events`` logger, at INFO for the events that tell a job's story and at DEBUG for the
routine ones (ROUTINE_EVENTS: claims, checkpoints, claims handed back), as its `events` mode says
(LOG_EVENT_MODES). The application chooses handlers; `JsonFormatter`
renders a record as exactly one JSON object per line, and `log_events_to_stderr` (what
``install(json_logs=True)`` calls) gives the logger its own stderr handler with it. Log lines are for
people and log pipelines: no decision in reliable ever reads log text (decisions read the store).

Times are ISO-8601 UTC with milliseconds (``2026-12-03T12:08:46.123Z``). Trace ids are W3C trace
ids (see `reliable.tracecontext`); an event of an attempt also names the attempt's ``span_id``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

from .disclosure import EVENT_FIELDS as EVENT_ROW_FIELDS
from .errors import ConfigError
from .isotime import format_time
from .states import Event
from .tracecontext import new_trace_id, span_id_for

__all__ = [
    "EVENT_FIELDS",
    "LOGGER_NAME",
    "LOG_EVENT_MODES",
    "ROUTINE_EVENTS",
    "JsonFormatter",
    "JsonLogSink",
    "event_record",
    "log_events_to_stderr",
    "new_trace_id",
]

#: The logger JsonLogSink writes to unless given another.
LOGGER_NAME = "reliable.events"

#: The event's epoch-seconds fields written as ISO-8601 times (its job's, carried by the event row).
_TIMES = ("started_at", "scheduled_at", "dispatched_at")

#: The fields of every event line, in order (missing ones are written as null): the event row's
#: (`reliable.store.JobEvent`, whose fields `disclosure.EVENT_FIELDS` lists) with ``ts`` for ``at``
#: first, without its database ``id`` and the ``traceback`` (the job's attempt page shows it), and
#: then the attempt's ``span_id`` and the job's times.
EVENT_FIELDS: tuple[str, ...] = (
    "ts", *(name for name in EVENT_ROW_FIELDS if name not in ("id", "at", "traceback")), "span_id", *_TIMES,
)
_DEFAULT_MAX_TEXT = 2000

#: The events logged at DEBUG in the "transitions" mode: each job's run has them, often many times
#: (a checkpoint per unit of work), and the INFO line of the attempt's end carries what they say
#: (`attempt`, `attempt_id`, `started_at`, the last `checkpoint`). Every other event (a state change:
#: enqueued, the attempt's outcome, retry_due, an operator's command, a lease expiry; or an anomaly
#: that changes no state: stale_commit_rejected, redispatched, routed, ...) is logged at INFO.
ROUTINE_EVENTS: frozenset[str] = frozenset({Event.CLAIM.value, Event.CLAIM_RETURNED.value, "checkpoint"})

#: JsonLogSink's modes: "transitions" (the default: ROUTINE_EVENTS at DEBUG, the rest at INFO),
#: "all" (every event at INFO), "none" (no line at all).
LOG_EVENT_MODES: tuple[str, ...] = ("transitions", "all", "none")


def check_log_events(mode: object) -> str:
    """`mode` if it is one of LOG_EVENT_MODES; ConfigError naming the accepted ones otherwise."""
    if mode not in LOG_EVENT_MODES:
        raise ConfigError(f"log_events must be one of {', '.join(LOG_EVENT_MODES)}, got {mode!r}")
    return str(mode)


def _clip(value: Any, limit: int) -> str | None:
    """Text cut to `limit` characters (code points, so never inside a UTF-8 sequence), marked."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [truncated {len(text) - limit} chars]"


def event_record(event: Mapping[str, Any], *, max_text: int = _DEFAULT_MAX_TEXT) -> dict[str, Any]:
    """The JSON-ready dict one log line carries for `event` (a store listener's event row).

    Every field of EVENT_FIELDS is present (None when unknown). ``ts`` is the event's ``at`` (the
    database clock's epoch seconds) and ``started_at``, ``scheduled_at``, ``dispatched_at`` are
    ISO-8601 UTC with milliseconds; ``span_id`` is the attempt's (`span_id_for`); ``error_message``
    and ``reason`` are cut to `max_text` characters. Extra keys of `event` follow the known ones.
    """
    record: dict[str, Any] = {name: event.get(name) for name in EVENT_FIELDS}
    record["ts"] = format_time(event.get("at"), ms=True)
    for name in _TIMES:
        record[name] = format_time(event.get(name), ms=True)
    attempt_id = event.get("attempt_id")
    record["span_id"] = span_id_for(str(attempt_id)) if attempt_id else None
    record["error_message"] = _clip(event.get("error_message"), max_text)
    record["reason"] = _clip(event.get("reason"), max_text)
    if record["detail"] is None:
        record["detail"] = {}
    for key, value in event.items():
        if key not in record and key != "at":
            record[key] = value
    return record


def _dumps(value: Any) -> str:
    # default=str: an exotic value in a checkpoint or detail must not lose the line.
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


class _LazyJson:
    """A log message rendered only if a handler formats it without JsonFormatter."""

    __slots__ = ("record",)

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def __str__(self) -> str:
        return _dumps(self.record)


class JsonLogSink:
    """A store listener that logs one JSON record per event (logger ``reliable.events``).

    Use: ``StateStore(url, listeners=[JsonLogSink()])`` or ``store.add_listener(JsonLogSink())``.
    `events`: "transitions" (default) logs ROUTINE_EVENTS at DEBUG and every other event at INFO;
    "all" logs every event at INFO; "none" logs nothing. The record's message is the event as JSON,
    and the event dict is attached as the attribute ``reliable_event`` so `JsonFormatter` writes it
    as the line itself. Nothing is built when the logger is not enabled for the event's level.
    """

    def __init__(self, logger: logging.Logger | None = None, *, max_text: int = _DEFAULT_MAX_TEXT,
                 events: str = "transitions") -> None:
        self.logger = logger if logger is not None else logging.getLogger(LOGGER_NAME)
        self.max_text = max_text
        self.events = check_log_events(events)
        self._routine = ROUTINE_EVENTS if self.events == "transitions" else frozenset()

    def level(self, event: Mapping[str, Any]) -> int | None:
        """The level `event` is logged at (None: not logged)."""
        if self.events == "none":
            return None
        return logging.DEBUG if event.get("event") in self._routine else logging.INFO

    def __call__(self, event: Mapping[str, Any]) -> None:
        """Emit `event` as one log record (at `level(event)`)."""
        level = self.level(event)
        if level is None or not self.logger.isEnabledFor(level):
            return
        record = event_record(event, max_text=self.max_text)
        self.logger.log(level, _LazyJson(record), extra={"reliable_event": record})


class JsonFormatter(logging.Formatter):
    """Format every log record as exactly one JSON object on one line.

    A record from JsonLogSink becomes its event fields plus ``level`` and ``logger``; any other
    record becomes ``ts``, ``level``, ``logger``, ``message`` (and ``exception`` when there is
    one). Newlines inside values are escaped by JSON, so a record can never span lines. Attach it
    to any handler: ``handler.setFormatter(reliable.JsonFormatter())``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        event = getattr(record, "reliable_event", None)
        if isinstance(event, dict):
            line: dict[str, Any] = {**event, "level": record.levelname, "logger": record.name}
        else:
            line = {"ts": format_time(record.created, ms=True), "level": record.levelname, "logger": record.name,
                    "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _dumps(line)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler writing to whatever ``sys.stderr`` is when a record is emitted.

    Dramatiq's worker processes replace ``sys.stderr`` with their logging pipe, and pytest swaps
    it per test: a stream captured once would be the wrong one.
    """

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record to the current stderr."""
        self.stream = sys.stderr
        super().emit(record)


def log_events_to_stderr(name: str = LOGGER_NAME) -> logging.Handler | None:
    """Give the event logger `name` a stderr handler with JsonFormatter: one JSON object per line.

    The logger stops propagating (so the events are not written a second time inside the root
    handler's text format) and is set to INFO unless it has a level. Nothing changes when the
    logger has a handler already: the application's own (it decides where events go), or this
    one from an earlier call (a second `install`, the same code in a forked process). Returns the
    handler added, or None.
    """
    target = logging.getLogger(name)
    if target.handlers:
        return None
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter())
    target.addHandler(handler)
    target.propagate = False
    if target.level == logging.NOTSET:
        target.setLevel(logging.INFO)
    return handler
