"""Attempt and transition events as structured JSON log lines, and trace ids.

The StateStore calls its listeners with every event row after the commit (see
`StateStore.add_listener`). `JsonLogSink` is such a listener: it emits exactly one log record per
event on the ``reliable.events`` logger at INFO. The application chooses handlers; `JsonFormatter`
renders a record as exactly one JSON object per line. Log lines are for people and log pipelines:
no decision in reliable ever reads log text (decisions read the store).

Trace ids: `current_trace_id` takes the id from the Dramatiq message options (``trace_id``), else
from the active OpenTelemetry span when ``opentelemetry`` is installed (imported lazily, optional),
else generates a W3C-compatible 32-hex id with `new_trace_id`.
"""

from __future__ import annotations

import importlib
import json
import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "EVENT_FIELDS",
    "LOGGER_NAME",
    "JsonFormatter",
    "JsonLogSink",
    "current_trace_id",
    "event_record",
    "new_trace_id",
]

#: The logger JsonLogSink writes to unless given another.
LOGGER_NAME = "reliable.events"

#: The fields of every event line, in order (missing ones are written as null).
EVENT_FIELDS: tuple[str, ...] = (
    "time", "at", "event", "job_id", "attempt_id", "attempt", "from_status", "to_status", "version",
    "lease_id", "worker_id", "queue", "actor", "workflow_id", "trace_id", "error_class", "error_type",
    "error_message", "retry_count", "checkpoint", "operator", "reason", "host", "detail",
    "started_at", "scheduled_at", "dispatched_at",
)

_DEFAULT_MAX_TEXT = 2000
_INVALID_TRACE_ID = "0" * 32
_TRACE_OPTION = "trace_id"
_MAX_TRACE_ID = 64  # the store's trace_id column


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


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

    Every field of EVENT_FIELDS is present (None when unknown); ``time`` is ``at`` as ISO-8601
    UTC; ``error_message`` and ``reason`` are cut to `max_text` characters. Extra keys of `event`
    follow the known ones.
    """
    record: dict[str, Any] = {name: event.get(name) for name in EVENT_FIELDS}
    at = event.get("at")
    record["time"] = _iso(float(at)) if at is not None else None
    record["error_message"] = _clip(event.get("error_message"), max_text)
    record["reason"] = _clip(event.get("reason"), max_text)
    if record["detail"] is None:
        record["detail"] = {}
    for key, value in event.items():
        if key not in record:
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
    """A store listener that logs one JSON record per event (logger ``reliable.events``, INFO).

    Use: ``StateStore(url, listeners=[JsonLogSink()])`` or ``store.add_listener(JsonLogSink())``.
    The record's message is the event as JSON, and the event dict is attached as the attribute
    ``reliable_event`` so `JsonFormatter` writes it as the line itself. Nothing is built when the
    logger is not enabled for INFO.
    """

    def __init__(self, logger: logging.Logger | None = None, *, max_text: int = _DEFAULT_MAX_TEXT) -> None:
        self.logger = logger if logger is not None else logging.getLogger(LOGGER_NAME)
        self.max_text = max_text

    def __call__(self, event: Mapping[str, Any]) -> None:
        """Emit `event` as one log record."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        record = event_record(event, max_text=self.max_text)
        self.logger.info(_LazyJson(record), extra={"reliable_event": record})


class JsonFormatter(logging.Formatter):
    """Format every log record as exactly one JSON object on one line.

    A record from JsonLogSink becomes its event fields plus ``level`` and ``logger``; any other
    record becomes ``time``, ``level``, ``logger``, ``message`` (and ``exception`` when there is
    one). Newlines inside values are escaped by JSON, so a record can never span lines.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        event = getattr(record, "reliable_event", None)
        if isinstance(event, dict):
            line: dict[str, Any] = {**event, "level": record.levelname, "logger": record.name}
        else:
            line = {"time": _iso(record.created), "level": record.levelname, "logger": record.name,
                    "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _dumps(line)


def new_trace_id() -> str:
    """A random W3C trace-context trace id: 32 lower-case hex digits, never all zeros."""
    while True:
        trace_id = secrets.token_hex(16)
        if trace_id != _INVALID_TRACE_ID:
            return trace_id


def _otel_trace_id() -> str | None:
    try:
        trace: Any = importlib.import_module("opentelemetry.trace")
    except ImportError:
        return None
    try:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return format(int(context.trace_id), "032x")
    except Exception:  # a broken tracing setup must not break job processing
        return None


def current_trace_id(message_options: Mapping[str, Any]) -> str:
    """The trace id for a job: the message's ``trace_id`` option, the active span's, or a new one.

    `message_options` is a Dramatiq message's ``options``. A producer propagates the id to child
    jobs by putting the running job's trace id into the child message's options. A given id longer
    than the store's column (64 characters) is ignored rather than cut.
    """
    given = message_options.get(_TRACE_OPTION)
    if isinstance(given, str) and 0 < len(given.strip()) <= _MAX_TRACE_ID:
        return given.strip()
    return _otel_trace_id() or new_trace_id()
