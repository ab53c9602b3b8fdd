"""W3C traceparent on messages and OpenTelemetry spans per attempt (StubBroker, real Worker, SQLite)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import reliable
from reliable.errors import ConfigError
from reliable.states import JobStatus
from reliable.store import Job
from reliable.tracecontext import TraceParent, span_id_for, trace_id_from

from middleware_harness import make_harness
from support import wait_for

HTTP_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
HTTP_SPAN = "00f067aa0ba902b7"
HTTP_PARENT = f"00-{HTTP_TRACE}-{HTTP_SPAN}-01"

Harness = Any


def traceparent(job: Job) -> TraceParent:
    parsed = TraceParent.parse(job.message["options"]["traceparent"])
    assert parsed is not None, job.message["options"]
    return parsed


def attempt_ids(h: Harness, job_id: str) -> list[str]:
    return [e.attempt_id for e in h.store.events(job_id) if e.event == "claim"]


def test_enqueue_sets_a_traceparent_and_the_same_trace_id(harness: Harness) -> None:
    @dramatiq.actor
    def plain() -> None:
        pass

    message = plain.send()
    trace = TraceParent.parse(message.options["traceparent"])
    assert trace is not None and trace.sampled
    assert message.options["trace_id"] == trace.trace_id == harness.store.get(message.message_id).trace_id


def test_a_valid_incoming_traceparent_keeps_its_trace(harness: Harness) -> None:
    @dramatiq.actor
    def from_http() -> None:
        pass

    message = from_http.send_with_options(traceparent=HTTP_PARENT)
    harness.worker.start()
    harness.join()
    job = harness.store.get(message.message_id)
    assert job.status is JobStatus.SUCCEEDED and job.trace_id == HTTP_TRACE
    assert traceparent(job) == TraceParent(HTTP_TRACE, HTTP_SPAN)


def test_an_invalid_traceparent_is_replaced_with_a_warning_and_the_job_runs(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    @dramatiq.actor
    def sloppy() -> None:
        pass

    with caplog.at_level(logging.WARNING, logger="reliable.tracecontext"):
        message = sloppy.send_with_options(traceparent="00-not-a-trace-01")
    assert "option traceparent '00-not-a-trace-01' is not a valid W3C traceparent; ignored" in caplog.text
    harness.worker.start()
    harness.join()
    job = harness.store.get(message.message_id)
    assert job.status is JobStatus.SUCCEEDED and traceparent(job).trace_id == job.trace_id


def test_a_non_w3c_trace_id_option_maps_to_one_trace_id(harness: Harness) -> None:
    @dramatiq.actor
    def legacy() -> None:
        pass

    message = legacy.send_with_options(trace_id="request-123")
    job = harness.store.get(message.message_id)
    assert job.trace_id == trace_id_from("request-123") == traceparent(job).trace_id


def test_pipeline_steps_and_messages_sent_by_an_actor_are_children_of_the_attempt(harness: Harness) -> None:
    @dramatiq.actor
    def step(x: int) -> int:
        return x + 1

    @dramatiq.actor
    def spawned() -> None:
        pass

    @dramatiq.actor
    def spawner(x: int) -> None:
        spawned.send()

    pipe = dramatiq.pipeline([step.message_with_options(args=(1,), traceparent=HTTP_PARENT), step.message(),
                              spawner.message()])
    pipe.run()
    harness.worker.start()
    wait_for(lambda: len(harness.store.list_jobs(actor="spawned")) == 1, "the spawned job")
    harness.join()
    first, second, third = (harness.store.get(m.message_id) for m in pipe.messages)
    [child] = harness.store.list_jobs(actor="spawned")
    assert {job.trace_id for job in (first, second, third, child)} == {HTTP_TRACE}
    assert traceparent(first).span_id == HTTP_SPAN
    # Each message's parent span is the attempt that sent it; each attempt has its own span id.
    [first_attempt], [second_attempt], [third_attempt] = (attempt_ids(harness, j.job_id)
                                                          for j in (first, second, third))
    assert traceparent(second) == TraceParent(HTTP_TRACE, span_id_for(first_attempt))
    assert traceparent(third) == TraceParent(HTTP_TRACE, span_id_for(second_attempt))
    assert traceparent(child) == TraceParent(HTTP_TRACE, span_id_for(third_attempt))
    assert child.parent_job_id == third.job_id


def test_messages_sent_by_a_fast_path_run_name_its_attempt_span(harness: Harness) -> None:
    @dramatiq.actor
    def fast_child() -> None:
        pass

    @dramatiq.actor(fast_path=True)
    def fast_parent() -> None:
        fast_child.send()

    message = fast_parent.send()
    harness.worker.start()
    wait_for(lambda: len(harness.store.list_jobs(actor="fast_child")) == 1, "the child job")
    harness.join()
    [done] = [e for e in harness.store.events(message.message_id) if e.event == "fast_succeed"]
    [child] = harness.store.list_jobs(actor="fast_child")
    assert done.attempt_id is not None
    assert traceparent(child) == TraceParent(harness.store.get(message.message_id).trace_id,
                                             span_id_for(done.attempt_id))


# -- OpenTelemetry (the otel extra) ---------------------------------------------------------------

class Traced:
    """reliable installed with tracing on a private TracerProvider whose spans stay in memory."""

    def __init__(self, sqlite_url: str, policy: Path) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.harness = make_harness(sqlite_url, policy, threads=2, metrics=False, tracing=self.provider)
        self.store = self.harness.store
        self.run = self.harness.run

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)


@pytest.fixture
def traced(sqlite_url: str, policy_file: Path) -> Iterator[Traced]:
    made = Traced(sqlite_url, policy_file)
    yield made
    made.harness.worker.stop()
    made.harness.broker.close()


def test_one_span_per_attempt_child_of_the_traceparent_with_error_status(traced: Traced) -> None:
    calls: list[int] = []

    @dramatiq.actor
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError("slow upstream")

    message = flaky.send_with_options(traceparent=HTTP_PARENT)
    traced.run()
    wait_for(lambda: traced.store.get(message.message_id).status is JobStatus.SUCCEEDED, "the retry")
    wait_for(lambda: len(traced.spans()) == 2, "two attempt spans")
    failed, succeeded = traced.spans()
    for span, attempt, outcome in ((failed, 1, "failed"), (succeeded, 2, "succeeded")):
        assert span.name == "flaky process" and span.kind is SpanKind.CONSUMER
        assert format(span.context.trace_id, "032x") == HTTP_TRACE
        assert span.parent is not None and format(span.parent.span_id, "016x") == HTTP_SPAN
        attributes = dict(span.attributes or {})
        assert attributes["reliable.job_id"] == message.message_id and attributes["reliable.actor"] == "flaky"
        assert attributes["reliable.queue"] == "default" and attributes["reliable.attempt"] == attempt
        assert attributes["reliable.outcome"] == outcome
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    assert succeeded.status.status_code is StatusCode.UNSET


def test_messages_sent_in_an_attempt_span_are_its_children(traced: Traced) -> None:
    @dramatiq.actor
    def child() -> None:
        pass

    @dramatiq.actor
    def parent() -> None:
        child.send()

    message = parent.send()
    traced.run()
    wait_for(lambda: len(traced.spans()) == 2, "both attempt spans")
    parent_span, child_span = traced.spans()
    [child_job] = traced.store.list_jobs(actor="child")
    assert traceparent(child_job).span_id == format(parent_span.context.span_id, "016x")
    assert child_span.parent is not None and child_span.parent.span_id == parent_span.context.span_id
    assert traced.store.get(message.message_id).trace_id == child_job.trace_id == \
        format(parent_span.context.trace_id, "032x")


def test_a_failed_fast_path_runs_callback_is_a_child_of_its_span(traced: Traced) -> None:
    @dramatiq.actor
    def failure_seen(message_data: dict[str, Any], error: dict[str, Any]) -> None:
        pass

    @dramatiq.actor(fast_path=True, on_failure="failure_seen")
    def fast_bad() -> None:
        raise ValueError("bad input")

    message = fast_bad.send()
    traced.run()
    wait_for(lambda: len(traced.spans()) == 2, "the run's and the callback's spans")
    run_span, callback_span = traced.spans()
    assert dict(run_span.attributes or {})["reliable.outcome"] == "failed"
    assert traced.store.get(message.message_id).status is JobStatus.FAILED
    [callback] = traced.store.list_jobs(actor="failure_seen")
    assert traceparent(callback).span_id == format(run_span.context.span_id, "016x")
    assert callback_span.parent is not None and callback_span.parent.span_id == run_span.context.span_id


def test_the_active_span_at_enqueue_is_the_messages_parent(traced: Traced) -> None:
    @dramatiq.actor
    def requested() -> None:
        pass

    with traced.provider.get_tracer("web").start_as_current_span("GET /export") as request:
        message = requested.send()
    trace = TraceParent.parse(message.options["traceparent"])
    assert trace == TraceParent(format(request.get_span_context().trace_id, "032x"),
                                format(request.get_span_context().span_id, "016x"))


def test_tracing_without_opentelemetry_is_a_config_error(monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)  # the import now raises ImportError
    with pytest.raises(ConfigError, match=r"tracing=True needs OpenTelemetry: pip install 'reliable\[otel\]'"):
        reliable.ReliableMiddleware(sqlite_url, metrics=False, tracing=True)


def test_opentelemetry_is_not_imported_when_tracing_is_off(sqlite_url: str) -> None:
    code = ("import sys, dramatiq, reliable\n"
            "from dramatiq import Worker\n"
            "from dramatiq.brokers.stub import StubBroker\n"
            "broker = StubBroker(); broker.emit_after('process_boot'); dramatiq.set_broker(broker)\n"
            f"reliable.install(broker, store={sqlite_url!r}, recovery=False, metrics=False)\n"
            "@dramatiq.actor\n"
            "def b() -> None: pass\n"
            "@dramatiq.actor\n"
            "def a() -> None:\n"
            "    b.send()\n"
            "worker = Worker(broker, worker_timeout=50); worker.start()\n"
            "a.send(); broker.join('default'); worker.join(); worker.stop()\n"
            "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"event":"succeed"' in done.stderr  # both jobs ran (their events are JSON lines on stderr)


def test_tracing_with_something_else_than_a_tracer_provider_is_a_config_error(sqlite_url: str) -> None:
    with pytest.raises(ConfigError, match="tracing: expected True or an OpenTelemetry TracerProvider, got str"):
        reliable.ReliableMiddleware(sqlite_url, metrics=False, tracing="yes")
