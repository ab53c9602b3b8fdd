"""The attempt's OpenTelemetry span (`reliable.tracing`), when tracing is on: nothing otherwise.

A claimed attempt's span is a child of the trace context its message carries; a fast-path run's
is started before the run, so the messages it sends name it. The span ends with the delivery.
"""

from __future__ import annotations

from typing import Any

from ..tracecontext import TraceParent
from ..tracing import Tracing

__all__ = ["end", "message_trace", "start"]


def message_trace(message: Any) -> TraceParent:
    """The trace context a delivered message carries (see `TraceParent.for_message`)."""
    return TraceParent.for_message(message.options, job_id=message.message_id)


def start(tracing: Tracing | None, message: Any, *, attempt: int | None, attempt_id: str | None,
          parent: TraceParent | None = None) -> str | None:
    """Start the attempt's span (a child of `parent`, default: the message's trace context) when
    tracing is on; its span id (None: no span)."""
    if tracing is None:
        return None
    return tracing.start(parent or message_trace(message), job_id=message.message_id, actor=message.actor_name,
                         queue=message.queue_name.removesuffix(".DQ"), attempt=attempt, attempt_id=attempt_id)


def end(tracing: Tracing | None, exception: BaseException | None, *, outcome: str | None = None) -> None:
    """End this thread's attempt span, if any."""
    if tracing is not None:
        tracing.end(exception, outcome=outcome)
