"""OpenTelemetry spans, one per attempt: the optional extra ``pip install reliable[otel]``.

Enabled by ``install(broker, ..., tracing=True)`` (or a TracerProvider instead of True). Only
then is ``opentelemetry`` imported. Each attempt becomes one CONSUMER span named
``<actor> process``, a child of the message's ``traceparent`` (`reliable.tracecontext`), current
while the actor runs (so the actor's own spans and the messages it sends are its children), and
ended after the outcome is committed. A failed attempt's span has status ERROR and the exception
recorded. At enqueue, the active span (an HTTP request's, say) is the parent of the message.
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, JobInterrupted, LeaseLostInterrupt
from .tracecontext import TraceParent, span_id_for

__all__ = ["AttemptSpan", "Tracing", "outcome_of"]

logger = logging.getLogger("reliable.tracing")

#: The name of the tracer (the instrumentation scope) the spans come from.
TRACER_NAME = "reliable"


def outcome_of(exception: BaseException | None) -> str:
    """What an attempt's span says happened: ``succeeded``, ``failed``, ``lease_lost``, or the
    interrupt (``paused``, ``stopped``, ``cancelled``, ``force_stopped``). The store's events say
    what followed (a retry, the dead letter...)."""
    if exception is None:
        return "succeeded"
    if isinstance(exception, LeaseLostInterrupt):
        return "lease_lost"
    if isinstance(exception, JobInterrupted):
        name = type(exception).__name__.removeprefix("Job")
        return {"Paused": "paused", "Stopped": "stopped", "Cancelled": "cancelled",
                "ForceStopped": "force_stopped"}.get(name, "interrupted")
    return "failed"


@dataclass
class AttemptSpan:
    """A started attempt span and the context token to detach when it ends."""

    span: Any
    token: Any
    #: The trace context messages sent by this attempt carry (the span's own ids).
    traceparent: TraceParent


class Tracing:
    """Starts and ends the attempt spans, one at a time per worker thread; ConfigError when
    opentelemetry is not installed. A tracing error is logged, never raised into the job."""

    def __init__(self, tracer_provider: Any = None) -> None:
        if tracer_provider is not None and not callable(getattr(tracer_provider, "get_tracer", None)):
            raise ConfigError(f"tracing: expected True or an OpenTelemetry TracerProvider, got "
                              f"{type(tracer_provider).__name__}")
        try:
            self._trace: Any = importlib.import_module("opentelemetry.trace")
            self._context: Any = importlib.import_module("opentelemetry.context")
        except ImportError:
            raise ConfigError("tracing=True needs OpenTelemetry: pip install 'reliable[otel]'") from None
        self._tracer = self._trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self._running = threading.local()

    def current(self) -> TraceParent | None:
        """The active span's context as a traceparent (None without a valid active span)."""
        context = self._trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return TraceParent(format(context.trace_id, "032x"), format(context.span_id, "016x"),
                           bool(context.trace_flags & 1))

    def start(self, parent: TraceParent, *, job_id: str, actor: str, queue: str, attempt: int | None,
              attempt_id: str | None) -> str | None:
        """Start the attempt's span as a child of `parent` and make it current in this thread; its
        span id (None when it could not start)."""
        try:
            attempt_span = self._start(parent, job_id=job_id, actor=actor, queue=queue, attempt=attempt,
                                       attempt_id=attempt_id)
        except Exception:  # a broken tracing setup must not fail the job
            logger.warning("job %s: could not start its span", job_id, exc_info=True)
            return None
        self._running.span = attempt_span
        return attempt_span.traceparent.span_id

    def _start(self, parent: TraceParent, *, job_id: str, actor: str, queue: str, attempt: int | None,
               attempt_id: str | None) -> AttemptSpan:
        trace = self._trace
        remote = trace.SpanContext(int(parent.trace_id, 16), int(parent.span_id, 16), is_remote=True,
                                   trace_flags=trace.TraceFlags(1 if parent.sampled else 0))
        attributes: dict[str, Any] = {
            "messaging.operation": "process", "messaging.destination.name": queue, "messaging.message.id": job_id,
            "reliable.job_id": job_id, "reliable.actor": actor, "reliable.queue": queue,
        }
        if attempt is not None:
            attributes["reliable.attempt"] = attempt
        if attempt_id is not None:
            attributes["reliable.attempt_id"] = attempt_id
            attributes["reliable.span_id"] = span_id_for(attempt_id)
        span = self._tracer.start_span(f"{actor} process", context=trace.set_span_in_context(
            trace.NonRecordingSpan(remote)), kind=trace.SpanKind.CONSUMER, attributes=attributes)
        token = self._context.attach(trace.set_span_in_context(span))
        own = span.get_span_context()
        traceparent = TraceParent(parent.trace_id, format(own.span_id, "016x"), parent.sampled) \
            if own.is_valid else parent
        return AttemptSpan(span, token, traceparent)

    def end(self, exception: BaseException | None, *, outcome: str | None = None) -> None:
        """End this thread's attempt span, if any: its outcome (`outcome_of` unless given), ERROR
        status for a failure; the context as it was before `start`."""
        attempt: AttemptSpan | None = getattr(self._running, "span", None)
        self._running.span = None
        if attempt is None:
            return
        try:
            self._end(attempt, exception, outcome or outcome_of(exception))
        except Exception:
            logger.warning("could not end an attempt's span", exc_info=True)

    def _end(self, attempt: AttemptSpan, exception: BaseException | None, outcome: str) -> None:
        span = attempt.span
        span.set_attribute("reliable.outcome", outcome)
        if outcome == "failed" and exception is not None:
            span.record_exception(exception)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{type(exception).__name__}"))
        try:
            span.end()
        finally:
            self._context.detach(attempt.token)
