"""A real StateStore with JsonLogSink (and Metrics): one JSON line per committed event, same fields."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reliable.errors import LeaseLost
from reliable.events import JsonFormatter, JsonLogSink
from reliable.metrics import Metrics
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore

TRANSITION_EVENTS = {e.value for e in Event} | {"enqueued"}
COMPARED = ("job_id", "event", "to_status", "version", "attempt", "attempt_id", "lease_id", "worker_id", "queue",
            "actor", "workflow_id", "trace_id", "error_class", "error_type", "error_message", "retry_count",
            "checkpoint", "operator", "reason")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    logger = logging.getLogger("test.reliable.events.store")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield out
    logger.removeHandler(handler)


def drive(store: StateStore) -> None:
    """A small but varied workload: success with checkpoint, retry then success, pause/resume, stale write."""
    store.register(NewJob("ok", "exports", "export", {"args": [1]}, trace_id="a" * 32, workflow_id="wf1"))
    first = store.claim("ok", worker_id="w1", lease_ttl=30)
    store.save_checkpoint("ok", first.lease_id, {"page": 2}, lease_ttl=30, worker_id="w1")
    store.finish("ok", first.lease_id, Event.SUCCEED, worker_id="w1")
    with pytest.raises(LeaseLost):  # another outcome of the same, finished attempt: a stale write
        store.finish("ok", first.lease_id, Event.FAIL, worker_id="w1")

    store.register(NewJob("flaky", "exports", "export", {}, trace_id="b" * 32))
    claim = store.claim("flaky", worker_id="w2", lease_ttl=30)
    store.finish("flaky", claim.lease_id, Event.RETRY, retry_delay=30.0, worker_id="w2",
                 error=ErrorInfo("transient", "TimeoutError", "line one\nline two"))
    store.transition("flaky", Event.RETRY_DUE, dispatch=True)
    again = store.claim("flaky", worker_id="w2", lease_ttl=30)
    store.finish("flaky", again.lease_id, Event.SUCCEED, worker_id="w2")

    store.register(NewJob("held", "reports", "report", {}))
    store.transition("held", Event.PAUSE, operator="alice", reason="maintenance window")
    store.transition("held", Event.RESUME, operator="alice", reason="done", dispatch=True)


def test_one_json_line_per_event_matches_the_event_table(store_url: str, stream: io.StringIO) -> None:
    registry = CollectorRegistry()
    sink = JsonLogSink(logging.getLogger("test.reliable.events.store"), events="all")  # claims and checkpoints too
    store = StateStore(store_url, listeners=[sink, Metrics(registry)])
    try:
        drive(store)
        rows = [e.as_dict() for job in ("ok", "flaky", "held") for e in store.events(job)]
    finally:
        store.close()
    assert stream.getvalue().endswith("\n")
    lines: list[dict[str, Any]] = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == len(rows)  # exactly one line per committed event, no more
    by_key = {(line["job_id"], line["version"], line["event"]): line for line in lines}
    assert len(by_key) == len(lines)
    for row in rows:
        line = by_key[(row["job_id"], row["version"], row["event"])]
        assert {k: line[k] for k in COMPARED} == {k: row[k] for k in COMPARED}, row["event"]
        # The store stamps the row and the listener record with separate reads of the database clock.
        assert datetime.fromisoformat(line["ts"]).timestamp() == pytest.approx(row["at"], abs=0.5)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"]) and line["level"] == "INFO"
        if row["event"] in TRANSITION_EVENTS:
            assert line["from_status"] == row["from_status"], row["event"]

    events = [(line["job_id"], line["event"]) for line in lines]
    assert events.count(("ok", "stale_commit_rejected")) == 1
    transitions = [line for line in lines if line["event"] in TRANSITION_EVENTS]
    assert len(transitions) == 3 + 6 + 3  # ok: enqueued/claim/succeed; flaky: 6; held: 3
    retry = by_key[("flaky", 3, "retry_scheduled")]
    assert retry["error_class"] == "transient" and retry["error_message"] == "line one\nline two"
    assert retry["detail"] == {"delay": 30.0} and retry["trace_id"] == "b" * 32
    assert retry["started_at"] is not None and retry["scheduled_at"] is not None
    pause = next(line for line in lines if line["event"] == "pause")
    assert (pause["operator"], pause["reason"], pause["from_status"]) == ("alice", "maintenance window", "PENDING")
    checkpoint = next(line for line in lines if line["event"] == "checkpoint")
    assert checkpoint["checkpoint"] == {"page": 2} and checkpoint["workflow_id"] == "wf1"

    def count(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert count("reliable_attempts_total", actor="export", queue="exports", outcome="succeed") == 2
    assert count("reliable_retries_total", actor="export", queue="exports", error_class="transient") == 1
    assert count("reliable_stale_commits_total", actor="export", queue="exports") == 1
    assert count("reliable_checkpoints_total", actor="export", queue="exports") == 1
    assert count("reliable_control_commands_total", command="pause") == 1
    assert count("reliable_transitions_total", event="enqueued", to_state="PENDING", actor="export",
                 queue="exports") == 2
    assert count("reliable_dispatch_latency_seconds_count", actor="export", queue="exports") == 3
    assert count("reliable_recoveries_total", kind="retry_due") == 1
    assert count("reliable_recovery_seconds_count", kind="retry_due") == 1  # this process saw both
    assert count("reliable_attempt_duration_seconds_count", actor="export", queue="exports", outcome="succeed") == 2
