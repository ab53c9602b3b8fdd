"""reliable's own statements are not the application's spans (reliable/store/instrumentation.py):
with Sentry's Dramatiq and SQLAlchemy integrations, a task's transaction holds the app's own query
and none of reliable's (a retried attempt reads the retry budget through SQLAlchemy); with
RELIABLE_TRACE_STORE=1 reliable's are kept. The same with OpenTelemetry's SQLAlchemy
instrumentation, which wraps every engine created after `instrument()`, reliable's included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import text

from reliable.store import NewJob, StateStore
from reliable.store import engine as engine_module
from reliable.store.instrumentation import TRACE_STORE_ENV

APP = Path(__file__).with_name("sentry_app.py")


def sentry_spans(store_url: str, tmp_path: Path, **env: str) -> list[tuple[str, list[str]]]:
    """(transaction, its spans' descriptions) of each transaction the app's run sent to Sentry."""
    done = subprocess.run([sys.executable, str(APP)], capture_output=True, text=True, timeout=90, check=False,
                          env={**os.environ, "STORE": store_url, "APP_DB": f"sqlite:///{tmp_path / 'app.db'}",
                               "POLICY_DIR": str(tmp_path), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return [(t["name"], [description for _, description in t["spans"]]) for t in found]


@pytest.mark.slow
def test_sentry_sees_the_apps_query_in_a_task_and_none_of_reliables(store_url: str, tmp_path: Path) -> None:
    transactions = sentry_spans(store_url, tmp_path)
    tasks = [spans for name, spans in transactions if name == "task"]
    assert len(tasks) == 2  # the failed attempt and its retry
    for spans in tasks:
        assert spans == ["SELECT 42 AS the_apps_own_query"], spans


@pytest.mark.slow
def test_in_span_streaming_mode_no_span_of_reliables_is_sent_either(pg_database: str, tmp_path: Path) -> None:
    # A span with no parent would start a trace of its own there: reliable's get a no-op parent.
    names = [name for name, _ in sentry_spans(pg_database, tmp_path, SENTRY_STREAM="1")]
    assert sorted(names) == ["SELECT 42 AS the_apps_own_query"] * 2 + ["follow_up"] * 2 + ["task"] * 2, names


@pytest.mark.slow
def test_the_switch_keeps_reliables_statements_in_the_apps_traces(pg_database: str, tmp_path: Path) -> None:
    transactions = sentry_spans(pg_database, tmp_path, **{TRACE_STORE_ENV: "1"})
    spans = [span for name, spans in transactions if name == "task" for span in spans]
    assert any("reliable_job_events" in span for span in spans), spans


@pytest.fixture
def otel_spans() -> Iterator[Callable[[], list[tuple[str, str]]]]:
    """OpenTelemetry's SQLAlchemy instrumentation on, exporting to memory; (name, db statement) of
    each span exported so far."""
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = SQLAlchemyInstrumentor()
    instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)  # it declares sqlalchemy < 2.1
    try:
        yield lambda: [(span.name, str((span.attributes or {}).get("db.statement", "")))
                       for span in exporter.get_finished_spans()]
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def test_opentelemetry_sees_the_apps_query_and_none_of_reliables(
        pg_database: str, tmp_path: Path, otel_spans: Callable[[], list[tuple[str, str]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As under `opentelemetry-instrument`, which instruments before the app imports reliable: the
    # store's engine is made by the wrapped create_engine, and so is the app's.
    monkeypatch.setattr(engine_module, "create_engine", sqlalchemy.create_engine)
    store = StateStore(pg_database)
    app_engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        store.register(NewJob("otel-1", queue="q", actor="a", message={"args": []}))
        assert store.get("otel-1").job_id == "otel-1"
        assert [e.event for e in store.events("otel-1")] == ["enqueued"]
        with app_engine.connect() as conn:
            conn.execute(text("SELECT 42"))
    finally:
        store.close()
        app_engine.dispose()
    spans = [(name.split()[0], statement) for name, statement in otel_spans()]  # a name: verb and database
    assert spans == [("connect", ""), ("SELECT", "SELECT 42")], spans  # the app's connection and query only
