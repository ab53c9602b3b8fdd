"""W3C trace context (``traceparent``) for jobs: parsing, generation and the enqueue-time choice.

One notion of trace id: the 32-hex W3C trace id. Every tracked message carries the option
``traceparent`` (``00-<trace id>-<parent span id>-<flags>``) and ``trace_id`` (the same trace id,
also stored on the job and every event). The parent span id names the span that sent the message:
the running attempt for a message sent from inside an actor, a pipeline step or callback; the
caller's span when the producer gave one; else a fresh id.

An attempt's own span id is derived from its attempt id (`span_id_for`), so a log line of any
event with an ``attempt_id`` names its span without storing anything more.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "TRACEPARENT",
    "TRACE_OPTIONS",
    "TraceParent",
    "new_span_id",
    "new_trace_id",
    "span_id_for",
    "trace_id_from",
]

logger = logging.getLogger("reliable.tracecontext")

#: The message option carrying the W3C trace context.
TRACEPARENT = "traceparent"
#: The message options that carry a trace: the W3C context and its trace id (`TraceParent.as_options`).
TRACE_OPTIONS = (TRACEPARENT, "trace_id")

_INVALID_TRACE_ID = "0" * 32
_INVALID_SPAN_ID = "0" * 16
_HEX32 = re.compile(r"[0-9a-f]{32}")
# version 00 exactly; a future version may append fields after the flags ("-..."), read as 00.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_MAX_TRACEPARENT = 512


def new_trace_id() -> str:
    """A random W3C trace id: 32 lower-case hex digits, never all zeros."""
    while True:
        trace_id = secrets.token_hex(16)
        if trace_id != _INVALID_TRACE_ID:
            return trace_id


def new_span_id() -> str:
    """A random W3C span (parent) id: 16 lower-case hex digits, never all zeros."""
    while True:
        span_id = secrets.token_hex(8)
        if span_id != _INVALID_SPAN_ID:
            return span_id


def _new_ids() -> tuple[str, str]:
    """A new trace id and span id (`new_trace_id`, `new_span_id`) from one read of the system's
    random source: a new trace's two ids for one system call, not two."""
    while True:
        both = secrets.token_hex(24)
        trace_id, span_id = both[:32], both[32:]
        if trace_id != _INVALID_TRACE_ID and span_id != _INVALID_SPAN_ID:
            return trace_id, span_id


def span_id_for(attempt_id: str) -> str:
    """The span id of an attempt: the first 16 hex digits of SHA-256 of its attempt id (stable,
    so the same attempt always has the same span id in every log line)."""
    digest = hashlib.sha256(attempt_id.encode()).hexdigest()
    return digest[:16] if digest[:16] != _INVALID_SPAN_ID else digest[16:32]


def trace_id_from(value: str) -> str:
    """The W3C trace id for a producer's ``trace_id`` option.

    32 hex digits (any case, not all zeros) are the trace id itself, lower-cased. Any other
    text (a request id, say) maps to the first 32 hex digits of its SHA-256, so the same text
    always gives the same trace.
    """
    text = value.strip()
    if _HEX32.fullmatch(text.lower()) and text.lower() != _INVALID_TRACE_ID:
        return text.lower()
    digest = hashlib.sha256(text.encode()).hexdigest()
    return digest[:32] if digest[:32] != _INVALID_TRACE_ID else digest[32:]


@dataclass(frozen=True)
class TraceParent:
    """A W3C ``traceparent``: trace id (32 hex), parent span id (16 hex), sampled flag."""

    trace_id: str
    span_id: str
    sampled: bool = True

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    def as_options(self) -> dict[str, str]:
        """The message options that carry this context: ``traceparent`` and ``trace_id``."""
        return dict(zip(TRACE_OPTIONS, (str(self), self.trace_id), strict=True))

    def child(self, span_id: str | None = None) -> TraceParent:
        """The context a message sent from span `span_id` (default: a new one) carries."""
        return TraceParent(self.trace_id, span_id or new_span_id(), self.sampled)

    @classmethod
    def parse(cls, value: Any) -> TraceParent | None:
        """The trace context in `value`, or None when it is not a valid ``traceparent``.

        Accepted as the W3C Trace Context spec says a receiver must: version ``00`` exactly, or a
        later version (not ``ff``) whose extra fields are ignored; trace id and span id not all
        zeros. Upper-case hex is invalid (the spec's own rule).
        """
        if not isinstance(value, str) or len(value) > _MAX_TRACEPARENT:
            return None
        match = _TRACEPARENT.fullmatch(value.strip())
        if match is None:
            return None
        version, trace_id, span_id, flags, rest = match.groups()
        if version == "ff" or (version == "00" and rest is not None):
            return None
        if trace_id == _INVALID_TRACE_ID or span_id == _INVALID_SPAN_ID:
            return None
        return cls(trace_id, span_id, bool(int(flags, 16) & 1))

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, job_id: str = "") -> TraceParent | None:
        """The message's valid ``traceparent`` option; an invalid one is logged (WARNING) and ignored."""
        given = options.get(TRACEPARENT)
        if given is None:
            return None
        parsed = cls.parse(given)
        if parsed is None:
            shown = given[:80] if isinstance(given, str) else type(given).__name__
            logger.warning("message %s: option traceparent %r is not a valid W3C traceparent; ignored",
                           job_id, shown)
        return parsed

    @classmethod
    def for_message(cls, options: Mapping[str, Any], *, sender: TraceParent | None = None,
                    job_id: str = "") -> TraceParent:
        """The trace context of a message with these options: its own valid ``traceparent``; else
        its ``trace_id`` option (`trace_id_from`), as `sender` when that is the same trace, else
        with a new span id; else `sender` (the running attempt, the active span); else a new trace.
        """
        given = cls.from_options(options, job_id=job_id)
        if given is not None:
            return given
        trace_id = options.get("trace_id")
        if isinstance(trace_id, str) and trace_id.strip():
            mapped = trace_id_from(trace_id)
            if sender is not None and sender.trace_id == mapped:
                return sender
            return cls(mapped, new_span_id())
        return sender if sender is not None else cls(*_new_ids())
