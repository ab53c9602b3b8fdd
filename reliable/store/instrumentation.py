"""reliable's own statements kept out of the application's traces (docs/observability.md, "Your
SQLAlchemy instrumentation").

Sentry's SQLAlchemy integration listens on every Engine (the class) and records each statement as
a span of the current transaction: a task's transaction showed reliable's claim, reads and finishes
as if the task had run them. OpenTelemetry's SQLAlchemy instrumentation wraps `create_engine` and
`Engine.connect` and does the same. `outside_app_traces` runs a block of the store's work where
neither records anything: Sentry's current and isolation scopes are forked with no span (a
statement's span then belongs to no transaction and is never sent; its breadcrumb is dropped with
the fork), and OpenTelemetry's instrumentation is suppressed (`suppress_instrumentation`, which
every instrumentation checks). Both are public APIs, used only when the library is already loaded:
nothing is imported here.

The store's reads and transactions through SQLAlchemy (`db.read_connection`, `db.write_transaction`,
every one of them) run inside it. The hot path (sqlrunner.py) needs nothing: its statements go
through raw DB-API cursors, which neither SQLAlchemy's events nor `Engine.connect` see.

The switch: ``RELIABLE_TRACE_STORE=1`` in the environment keeps reliable's statements in the
application's traces (to see what the store costs a task). Listeners registered on the store's own
engine (`event.listen(store.engine, ...)`, `SQLAlchemyInstrumentor().instrument(engine=...)`)
run either way; they record spans when the switch is on.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["TRACE_STORE_ENV", "outside_app_traces"]

#: The environment variable that keeps reliable's statements in the application's traces ("1").
TRACE_STORE_ENV = "RELIABLE_TRACE_STORE"


@contextlib.contextmanager
def outside_app_traces() -> Iterator[None]:
    """Run the block where Sentry and OpenTelemetry record no span or breadcrumb of its
    statements (unless RELIABLE_TRACE_STORE=1); a no-op when neither library is loaded."""
    sentry = sys.modules.get("sentry_sdk")
    otel = sys.modules.get("opentelemetry.instrumentation.utils")
    if (sentry is None and otel is None) or os.environ.get(TRACE_STORE_ENV) == "1":
        yield
        return
    with contextlib.ExitStack() as stack:
        if sentry is not None and hasattr(sentry, "isolation_scope"):  # sentry-sdk 2
            _without_sentry_spans(stack, sentry)
        if otel is not None:
            stack.enter_context(otel.suppress_instrumentation())
        yield


def _without_sentry_spans(stack: contextlib.ExitStack, sentry: Any) -> None:
    """Fork Sentry's scopes for the block (its breadcrumbs go with the fork) with a no-op span
    current: a statement's span is then its no-op child, in span streaming mode too (where a span
    without a parent would start a trace of its own)."""
    stack.enter_context(sentry.isolation_scope())  # forks the current scope too
    scope = sentry.get_current_scope()
    traces, utils = sys.modules.get("sentry_sdk.traces"), sys.modules.get("sentry_sdk.tracing_utils")
    streaming = getattr(utils, "has_span_streaming_enabled", None)
    if traces is not None and streaming is not None and streaming(sentry.get_client().options):
        scope.streamed_span = traces.NoOpStreamedSpan()
    else:
        scope.span = sys.modules["sentry_sdk.tracing"].NoOpSpan()
