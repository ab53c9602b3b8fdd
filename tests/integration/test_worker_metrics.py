"""Real multi-process workers with reliable's metrics; the exporter's /metrics matches the store."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reliable.states import JobStatus

from workers import WorkerProcess, send, wait_until

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(v for (n, lbls), v in values.items()
               if n == name and all((k, want) in lbls for k, want in labels.items()))


def test_two_worker_processes_export_metrics_that_match_the_store(producer: Any, worker_env: dict[str, str],
                                                                  queue_name: str, tmp_path: Path) -> None:
    broker, store = producer
    metrics_dir = tmp_path / "prom"
    metrics_dir.mkdir()
    env = {**worker_env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "RELIABLE_TEST_LEASE_TTL": "2",
           "RELIABLE_TEST_HEARTBEAT": "0.3"}
    noops = [send(broker, queue_name, "noop") for _ in range(20)]
    units = [send(broker, queue_name, "units", 3, 0.01) for _ in range(5)]
    worker = WorkerProcess(env, tmp_path / "worker.log", processes=2, threads=4)
    try:
        wait_until(lambda: store.count_by_status().get(JobStatus.SUCCEEDED, 0) == 25, 60, "25 jobs done", worker)
        time.sleep(1.5)  # at least one heartbeat in each process after the last job
    finally:
        worker.stop()

    port = free_port()
    exporter = subprocess.Popen([str(Path(sys.executable).parent / "reliable"), "exporter", "--port", str(port),
                                 "--host", "127.0.0.1", "--store", worker_env["RELIABLE_TEST_STORE"],
                                 "--multiprocess-dir", str(metrics_dir)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        body = ""
        while time.monotonic() < deadline:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert body, "the exporter answered"
    finally:
        exporter.terminate()
        exporter.wait(10)

    values = samples(body)
    succeeded = sum(1 for m in noops + units for e in store.events(m.message_id) if e.event == "succeed")
    checkpoints = sum(1 for m in units for e in store.events(m.message_id) if e.event == "checkpoint")
    assert succeeded == 25 and checkpoints == 15
    assert total(values, "reliable_transitions_total", event="succeed") == succeeded
    assert total(values, "reliable_transitions_total", event="claim") == 25
    assert total(values, "reliable_attempts_total", outcome="succeed") == succeeded
    assert total(values, "reliable_checkpoints_total", actor="units") == checkpoints
    assert total(values, "reliable_attempt_duration_seconds_count", actor="noop") == 20
    assert total(values, "reliable_lease_renewals_total") > 0, "heartbeats were counted in the workers"
    assert any(n == "reliable_leases_held" for (n, _) in values), "the live-sum gauge is exported"
    assert total(values, "reliable_leases_held") == 0, "no lease is held once every job finished"
