"""Metrics.together: a batch's counters written once at its end, the same samples as one by one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reliable.metrics import Metrics
from reliable.states import TRANSITIONS, Event, target


def ev(event: str, job: str = "j1", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"job_id": job, "event": event, "at": 1000.0, "actor": "export", "queue": "exports",
                            "from_status": "RUNNING", "to_status": None, "lease_id": 1, "error_class": None,
                            "detail": {}, "started_at": None, "scheduled_at": None, "dispatched_at": None}
    base.update(fields)
    return base


def every_kind() -> list[dict[str, Any]]:
    """Events of every kind, each twice (a plan used again), with the fields that change their labels."""
    events = []
    for event in Event:
        source = next(state for (state, e) in TRANSITIONS if e is event)
        events.append(ev(event.value, f"j-{event.value}", from_status=source.value, to_status=target(event).value,
                         started_at=990.0, scheduled_at=995.0, error_class="transient"))
    events += [
        ev("claim", "j2", from_status="PENDING", to_status="RUNNING", at=12.0, dispatched_at=10.0),
        ev("claim", "j3", from_status="RETRY_WAIT", to_status="RUNNING", at=12.0, scheduled_at=11.5),
        ev("retry_scheduled", "j4", to_status="RETRY_WAIT"),
        ev("dead_letter", "j5", to_status="DEAD", detail={"budget_exhausted": True}),
        ev("routed", "j6", queue="slow", detail={"from": "exports"}),
        ev("checkpoint", "j7", started_at=900.0), ev("checkpoint", "j7", at=1010.0),
        ev("lease_expired", "j8", at=500.0, started_at=400.0, to_status="PENDING"),
        ev("claim", "j8", at=530.0, from_status="PENDING", to_status="RUNNING"),
        ev("succeed", "j9", actor=None, queue="", to_status="SUCCEEDED"),
        ev("workflow_started", "j10"), {},
    ]
    return events + events


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples if not s.name.endswith("_created")}


def test_a_batchs_counters_are_written_at_its_end() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    labels = {"event": "succeed", "to_state": "SUCCEEDED", "actor": "export", "queue": "exports"}
    with m.together():
        for n in range(3):
            m(ev("succeed", f"j{n}", to_status="SUCCEEDED", started_at=999.5))
        assert not registry.get_sample_value("reliable_transitions_total", labels)  # held until the end
        # Histograms observe at once: each observation is counted as it comes.
        assert registry.get_sample_value("reliable_attempt_duration_seconds_count",
                                         {"actor": "export", "queue": "exports", "outcome": "succeed"}) == 3
    assert registry.get_sample_value("reliable_transitions_total", labels) == 3
    assert registry.get_sample_value("reliable_attempts_total",
                                     {"actor": "export", "queue": "exports", "outcome": "succeed"}) == 3


def test_together_gives_the_samples_of_one_by_one() -> None:
    one_by_one, batched = CollectorRegistry(), CollectorRegistry()
    a, b = Metrics(one_by_one), Metrics(batched)
    for event in every_kind():
        a(event)
    with b.together():
        for event in every_kind():
            b(event)
    assert samples(batched) == samples(one_by_one)
    assert samples(batched)[("reliable_retries_total", (("actor", "export"), ("error_class", "none"),
                                                        ("queue", "exports")))] == 2


def test_together_holds_only_its_own_threads_counters_and_nests() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    labels = {"actor": "export", "queue": "exports"}
    with m.together():
        other = threading.Thread(target=m, args=(ev("checkpoint", "j2"),))
        other.start()
        other.join()
        assert registry.get_sample_value("reliable_checkpoints_total", labels) == 1  # another thread: at once
        with m.together():
            m(ev("checkpoint"))
        assert registry.get_sample_value("reliable_checkpoints_total", labels) == 1  # the outer scope writes
    assert registry.get_sample_value("reliable_checkpoints_total", labels) == 2
    m(ev("checkpoint", "j3"))  # after the scope: at once again
    assert registry.get_sample_value("reliable_checkpoints_total", labels) == 3


def test_a_batch_that_raises_still_writes_its_counters() -> None:
    registry = CollectorRegistry()
    m = Metrics(registry)
    with pytest.raises(RuntimeError), m.together():
        m(ev("checkpoint"))
        raise RuntimeError("a callback")
    assert registry.get_sample_value("reliable_checkpoints_total", {"actor": "export", "queue": "exports"}) == 1


def test_an_event_without_its_times_creates_no_histogram_series() -> None:
    """Creating a labelled child exports its series (at 0): only an observation creates one."""
    registry = CollectorRegistry()
    m = Metrics(registry)
    m(ev("claim", from_status="RETRY_WAIT", to_status="RUNNING"))
    m(ev("fail", to_status="FAILED"))
    names = {name for name, _ in samples(registry)}
    assert not names & {"reliable_schedule_lateness_seconds_count", "reliable_attempt_duration_seconds_count"}
    m(ev("claim", "j2", from_status="RETRY_WAIT", to_status="RUNNING", scheduled_at=999.0))
    assert registry.get_sample_value("reliable_schedule_lateness_seconds_count",
                                     {"actor": "export", "queue": "exports"}) == 1


# Multiprocess mode: the batch's counters reach the process's value files at the scope's end.
MULTIPROCESS = """
import sys
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from reliable.metrics import Metrics

def read(directory):
    found = {}
    for family in MultiProcessCollector(CollectorRegistry(), directory).collect():
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found

key = ("reliable_transitions_total", (("actor", "a"), ("event", "succeed"), ("queue", "q"), ("to_state", "SUCCEEDED")))
m = Metrics(CollectorRegistry())
m({"event": "succeed", "to_status": "SUCCEEDED", "actor": "a", "queue": "q", "at": 2.0, "started_at": 1.0})
with m.together():
    for n in range(5):
        m({"event": "succeed", "to_status": "SUCCEEDED", "actor": "a", "queue": "q", "at": 2.0, "started_at": 1.0})
    inside = read(sys.argv[1])
after = read(sys.argv[1])
assert inside[key] == 1, inside[key]
assert after[key] == 6, after[key]
count = ("reliable_attempt_duration_seconds_count", (("actor", "a"), ("outcome", "succeed"), ("queue", "q")))
assert inside[count] == 6 and after[count] == 6, (inside[count], after[count])
"""


def test_a_batch_reaches_the_multiprocess_files_at_its_end(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", MULTIPROCESS, str(tmp_path)], env=env, check=True, timeout=60)
