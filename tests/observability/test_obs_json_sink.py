"""JsonLogSink, JsonFormatter and trace ids, from synthetic events."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reliable.events import EVENT_FIELDS, JsonFormatter, JsonLogSink, log_events_to_stderr, new_trace_id
from reliable.tracecontext import span_id_for


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    logger = logging.getLogger("test.reliable.events.sink")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def event(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "job_id": "j1", "at": 1_700_000_000.25, "event": "retry_scheduled", "from_status": "RUNNING",
        "to_status": "RETRY_WAIT", "version": 3, "attempt": 1, "attempt_id": "a1", "lease_id": 1,
        "worker_id": "w1", "queue": "exports", "actor": "export", "workflow_id": None, "trace_id": "t" * 32,
        "error_class": "transient", "error_type": "TimeoutError", "error_message": "slow", "retry_count": 1,
        "checkpoint": {"page": 3}, "operator": None, "reason": None, "host": None, "detail": {"delay": 1.5},
        "started_at": 1_699_999_990.0, "scheduled_at": 1_700_000_001.75, "dispatched_at": None,
    }
    base.update(fields)
    return base


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_one_json_line_per_event_with_every_field(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    sink = JsonLogSink(logger)
    sink(event())
    sink(event(event="succeed", to_status="SUCCEEDED", error_class=None, error_message=None))
    first, second = lines(stream)
    assert set(EVENT_FIELDS) <= set(first)
    assert first["event"] == "retry_scheduled" and first["job_id"] == "j1" and first["attempt_id"] == "a1"
    assert first["ts"] == "2023-11-14T22:13:20.250Z" and "at" not in first and "time" not in first
    assert first["started_at"] == "2023-11-14T22:13:10.000Z" and first["scheduled_at"] == "2023-11-14T22:13:21.750Z"
    assert first["dispatched_at"] is None and first["span_id"] == span_id_for("a1")
    assert first["checkpoint"] == {"page": 3} and first["detail"] == {"delay": 1.5}
    assert first["workflow_id"] is None and "workflow_id" in first  # nulls are kept, not dropped
    assert first["level"] == "INFO" and first["logger"] == logger.name
    assert second["event"] == "succeed" and second["error_class"] is None and second["error_message"] is None


def test_error_message_is_truncated_and_newlines_stay_inside_the_line(
        capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    message = "Traceback (most recent call last):\n  boom ünïcode ✓\n" + "x" * 5000
    JsonLogSink(logger, max_text=100)(event(error_message=message, reason="r" * 300))
    assert stream.getvalue().count("\n") == 1
    [line] = lines(stream)
    assert line["error_message"].startswith(message[:100])
    assert line["error_message"].endswith(f"... [truncated {len(message) - 100} chars]")
    assert line["reason"].startswith("r" * 100) and len(line["reason"]) < 150


def test_unserialisable_values_and_extra_fields_do_not_lose_the_line(
        capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    JsonLogSink(logger)(event(checkpoint={"when": object()}, extra_field=7, detail=None))
    [line] = lines(stream)
    assert line["checkpoint"]["when"].startswith("<object") and line["extra_field"] == 7
    assert line["detail"] == {}


def test_default_logger_and_disabled_logger() -> None:
    sink = JsonLogSink()
    assert sink.logger.name == "reliable.events"
    quiet = logging.getLogger("test.reliable.events.quiet")
    quiet.setLevel(logging.WARNING)
    stream = io.StringIO()
    quiet.addHandler(logging.StreamHandler(stream))
    JsonLogSink(quiet)(event())
    assert stream.getvalue() == ""


def test_plain_formatter_still_gets_the_json_as_message() -> None:
    logger = logging.getLogger("test.reliable.events.plain")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    JsonLogSink(logger)(event())
    assert json.loads(stream.getvalue())["event"] == "retry_scheduled"


def test_formatter_renders_any_record_as_one_json_object() -> None:
    formatter = JsonFormatter()
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("now",), sys.exc_info())
    text = formatter.format(record)
    assert "\n" not in text
    parsed = json.loads(text)
    assert parsed["message"] == "failed now" and parsed["level"] == "ERROR"
    assert "ValueError: bad" in parsed["exception"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", parsed["ts"])


def test_new_trace_id_is_w3c_compatible() -> None:
    ids = {new_trace_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) and i != "0" * 32 for i in ids)


def test_log_events_to_stderr_adds_one_json_handler_and_stops_propagation(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    name = "test.reliable.events.stderr"
    logger = logging.getLogger(name)
    try:
        handler = log_events_to_stderr(name)
        assert handler is not None and logger.handlers == [handler]
        assert log_events_to_stderr(name) is None and logger.handlers == [handler]  # never twice
        assert logger.propagate is False and logger.level == logging.INFO
        with caplog.at_level(logging.INFO):
            JsonLogSink(logger)(event())
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and json.loads(err)["event"] == "retry_scheduled"
        assert caplog.records == []  # the root logger's handlers do not see it a second time
    finally:
        for added in list(logger.handlers):
            logger.removeHandler(added)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)


def test_log_events_to_stderr_leaves_an_application_handler_alone() -> None:
    name = "test.reliable.events.app"
    logger = logging.getLogger(name)
    own = logging.StreamHandler(io.StringIO())
    logger.addHandler(own)
    try:
        assert log_events_to_stderr(name) is None
        assert logger.handlers == [own] and logger.propagate is True and logger.level == logging.NOTSET
    finally:
        logger.removeHandler(own)


def test_only_a_process_that_works_jobs_writes_event_lines_to_stderr(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        import dramatiq
        from dramatiq import Worker
        from dramatiq.brokers.stub import StubBroker
        import reliable

        broker = StubBroker()
        store = "sqlite:///{tmp_path / 'j.db'}"
        reliable.StateStore(store).upgrade()
        reliable.install(broker, store=store, recovery=False)
        dramatiq.set_broker(broker)

        @dramatiq.actor
        def noop() -> None:
            pass

        noop.send()                      # a web app: sends, works nothing
        print("--- worker ---", file=sys.stderr, flush=True)
        worker = Worker(broker, worker_timeout=50)
        worker.start()
        noop.send()
        broker.join("default")
        worker.join()
        worker.stop()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sending, working = done.stderr.split("--- worker ---\n")
    assert '"event":"enqueued"' not in sending  # the app's logging decides (Python's default: nothing)
    events = [json.loads(line)["event"] for line in working.splitlines() if line.startswith("{")]
    assert events.count("enqueued") == 1 and events.count("succeed") == 2  # the second send, both runs
