"""A real `dramatiq` CLI worker (two processes) with `install(json_logs=True)`: every event of
reliable is one JSON object on its own stderr line, written once, with ISO times and trace ids (by
default the routine ones, claims and checkpoints, at DEBUG: not written)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dramatiq
import pytest

from reliable.events import ROUTINE_EVENTS
from reliable.states import JobStatus
from reliable.tracecontext import span_id_for

from support import wait_for
from workers import WorkerProcess, send

pytestmark = pytest.mark.integration

HTTP_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_worker_stderr_has_one_json_line_per_event(producer: Any, worker_env: dict[str, str], queue_name: str,
                                                   tmp_path: Path) -> None:
    broker, store = producer
    traced = broker.enqueue(dramatiq.Message(queue_name=queue_name, actor_name="noop", args=(), kwargs={},
                                             options={"traceparent": f"00-{HTTP_TRACE}-00f067aa0ba902b7-01"}))
    jobs = [traced, *(send(broker, queue_name, "noop") for _ in range(5)),
            *(send(broker, queue_name, "units", 3, 0.0) for _ in range(2))]
    worker = WorkerProcess(worker_env, tmp_path / "worker.log", processes=2, threads=2)
    try:
        wait_for(lambda: store.count_by_status().get(JobStatus.SUCCEEDED, 0) == len(jobs), "every job done",
                 context=worker.output)
        # The succeed event is logged right after its commit: wait for its line, not a fixed time.
        wait_for(lambda: worker.output().count('"event":"succeed"') == len(jobs), "the succeed lines",
                 context=worker.output)
    finally:
        worker.stop()
    output = worker.output().splitlines()
    ours = [line for line in output if '"logger":"reliable.events"' in line]
    events = [json.loads(line) for line in ours]  # each line is the JSON object, no text prefix
    assert all(line.startswith("{") and line.endswith("}") for line in ours)
    # Dramatiq's own text lines are still there: the app's root logging was left alone.
    assert any("Worker process is ready for action." in line for line in output)
    assert not any("reliable.events" in line and not line.startswith("{") for line in output)

    # Exactly the store's events written by the workers (the producer's `enqueued` is logged by
    # the producer process), each once: the handler was not added twice in a worker process. The
    # routine ones (claims, checkpoints) are at DEBUG by default (log_events="transitions"): not shown.
    logged = sorted((e["job_id"], e["version"], e["event"]) for e in events)
    stored = sorted((e.job_id, e.version, e.event) for job in jobs for e in store.events(job.message_id)
                    if e.event != "enqueued" and e.event not in ROUTINE_EVENTS)

    assert logged == stored
    for event in events:
        assert ISO_MS.fullmatch(event["ts"]) and "at" not in event and event["level"] == "INFO"
        if event["event"] == "succeed":
            assert ISO_MS.fullmatch(event["started_at"])
        assert re.fullmatch(r"[0-9a-f]{32}", event["trace_id"])
        assert event["span_id"] == span_id_for(event["attempt_id"])
    assert {e["trace_id"] for e in events if e["job_id"] == traced.message_id} == {HTTP_TRACE}
    assert "succeed" in {e["event"] for e in events} and not {e["event"] for e in events} & ROUTINE_EVENTS
