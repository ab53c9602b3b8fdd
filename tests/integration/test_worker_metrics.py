"""Real multi-process workers with reliable's metrics; the exporter's /metrics matches the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reliable.states import JobStatus
from reliable.store import StateStore

from support import Samples, exporter, scrape, wait_for
from workers import WorkerProcess, send

pytestmark = pytest.mark.integration


def total(values: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, lbls), v in values.items()
               if n == name and all((k, want) in lbls for k, want in labels.items()))


def renewed(store: StateStore, job_id: str, claimed: tuple[int, float]) -> bool:
    """Whether a heartbeat moved the lease claimed as (lease_id, lease_expires_at) forward."""
    job = store.get(job_id)
    return (job.status is JobStatus.RUNNING and job.lease_id == claimed[0] and job.lease_expires_at is not None
            and job.lease_expires_at > claimed[1])


def test_two_worker_processes_export_metrics_that_match_the_store(producer: Any, worker_env: dict[str, str],
                                                                  queue_name: str, tmp_path: Path) -> None:
    broker, store = producer
    metrics_dir = tmp_path / "prom"
    metrics_dir.mkdir()
    release = tmp_path / "release"
    env = {**worker_env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "RELIABLE_TEST_LEASE_TTL": "2",
           "RELIABLE_TEST_HEARTBEAT": "0.3"}
    held = send(broker, queue_name, "hold", str(release), 120)
    noops = [send(broker, queue_name, "noop") for _ in range(20)]
    units = [send(broker, queue_name, "units", 3, 0.01) for _ in range(5)]
    with exporter(worker_env["RELIABLE_TEST_STORE"], "--multiprocess-dir", str(metrics_dir)) as base:
        worker = WorkerProcess(env, tmp_path / "worker.log", processes=2, threads=4)
        try:
            # The other jobs may all finish before any heartbeat: `hold` keeps its lease until the
            # store shows a heartbeat renewed it, so there is a renewal to count.
            def claim() -> tuple[int, float] | None:
                job = store.get(held.message_id)
                if job.status is JobStatus.RUNNING and job.lease_expires_at is not None:
                    return job.lease_id, job.lease_expires_at
                return None

            claimed = wait_for(claim, "the held job to be claimed", context=worker.output)
            wait_for(lambda: renewed(store, held.message_id, claimed), "a heartbeat to renew the held job's lease",
                     context=worker.output)
            release.touch()
            wait_for(lambda: store.count_by_status().get(JobStatus.SUCCEEDED, 0) == 26, "26 jobs done", timeout=60,
                     context=worker.output)

            def none_held() -> bool:
                live = scrape(base)
                return any(n == "reliable_leases_held" for (n, _) in live) and total(live, "reliable_leases_held") == 0

            # The live-sum gauge is exported and every process's latest heartbeat reports no lease
            # held (the held job's process reported one when it renewed it).
            wait_for(none_held, "the workers' heartbeats to report no lease held", context=worker.output)
        finally:
            worker.stop()
        values = scrape(base)  # every worker thread finished: every event is counted

    succeeded = sum(1 for m in [held, *noops, *units] for e in store.events(m.message_id) if e.event == "succeed")
    checkpoints = sum(1 for m in units for e in store.events(m.message_id) if e.event == "checkpoint")
    assert succeeded == 26 and checkpoints == 15
    assert total(values, "reliable_transitions_total", event="succeed") == succeeded
    assert total(values, "reliable_transitions_total", event="claim") == 26
    assert total(values, "reliable_attempts_total", outcome="succeed") == succeeded
    assert total(values, "reliable_checkpoints_total", actor="units") == checkpoints
    assert total(values, "reliable_attempt_duration_seconds_count", actor="noop") == 20
    assert total(values, "reliable_lease_renewals_total") > 0, "the renewal the store showed was counted"
    assert total(values, "reliable_leases_held") == 0, "no lease is held once every job finished"
