"""kill -9 in the middle of 200 checkpointed jobs: every job ends SUCCEEDED, every effect exactly once."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import func, select, text

from reliable.states import JobStatus
from reliable.store.schema import effects, jobs

from support import RABBITMQ_URL, wait_for
from workers import WorkerProcess, send

pytestmark = pytest.mark.integration

JOBS = int(os.environ.get("RELIABLE_CRASH_JOBS", "200"))
UNITS = 10
UNIT_SECONDS = 0.05


def status_counts(store: Any) -> Counter[str]:
    with store.engine.connect() as conn:
        return Counter({s: n for s, n in conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status))})


def frozen_mid_run(store: Any, worker: WorkerProcess) -> bool:
    """Freeze `worker` (SIGSTOP) once a fifth of the jobs are done; keep it frozen if a job is part-way.

    Frozen, nothing changes in the store but the statements already sent; a job seen between its
    first and last checkpoint has no finish among them.
    """
    if status_counts(store)[JobStatus.SUCCEEDED.value] < JOBS // 5:
        return False
    worker.signal(signal.SIGSTOP)
    if any(0 < (job.checkpoint or 0) < UNITS for job in store.list_jobs(status=[JobStatus.RUNNING], limit=JOBS)):
        return True
    worker.signal(signal.SIGCONT)
    return False


def busy_sessions(store: Any) -> int:
    """Other sessions of this database not idle: running a statement (it may still commit) or in a transaction."""
    query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND state <> 'idle'")
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def test_sigkill_mid_run_recovers_every_job_exactly_once(producer: Any, start_worker: Any, queue_name: str) -> None:
    broker, store = producer
    messages = [send(broker, queue_name, "units", UNITS, UNIT_SECONDS) for _ in range(JOBS)]
    assert status_counts(store)[JobStatus.PENDING.value] == JOBS

    first = start_worker(RELIABLE_TEST_LEASE_TTL=2, RELIABLE_TEST_HEARTBEAT=0.5)
    # Kill it well into the run (some jobs done, one mid-way with checkpoints), frozen first so the
    # jobs seen running are still running when SIGKILL lands.
    wait_for(lambda: frozen_mid_run(store, first), "a fifth of the jobs done and one part-way", timeout=90,
             context=first.output)
    first.kill()
    killed_at = time.monotonic()
    # A statement sent before the freeze (or one waiting on a lock of the dead worker's) may still
    # commit: read what the kill interrupted once every session of the dead worker is idle or gone.
    wait_for(lambda: busy_sessions(store) == 0, "the killed worker's database sessions to end")
    running_before = store.list_jobs(status=[JobStatus.RUNNING], limit=JOBS)
    assert running_before, "the kill must land while jobs are running"
    interrupted = {j.job_id: j.checkpoint for j in running_before}

    second = start_worker(RELIABLE_TEST_LEASE_TTL=2, RELIABLE_TEST_HEARTBEAT=0.5, RELIABLE_TEST_RECOVERY_INTERVAL=0.5)
    wait_for(lambda: status_counts(store)[JobStatus.SUCCEEDED.value] == JOBS, "all jobs SUCCEEDED",
             timeout=60 + JOBS // 2, context=second.output)
    recovered_in = time.monotonic() - killed_at

    # Every job succeeded; nothing lost.
    assert status_counts(store) == Counter({JobStatus.SUCCEEDED.value: JOBS})
    # Every unit's effect exactly once (primary key), replays detected and counted.
    with store.engine.connect() as conn:
        rows = conn.execute(select(effects.c.job_id, effects.c.op_key, effects.c.duplicates,
                                   effects.c.result)).all()
    unit_rows = [r for r in rows if ":start-" not in r.op_key]
    assert len(unit_rows) == JOBS * UNITS
    assert Counter(r.job_id for r in unit_rows) == Counter({m.message_id: UNITS for m in messages})
    replays = sum(r.duplicates for r in unit_rows)

    # Jobs that were interrupted resumed from their last checkpoint, not from zero.
    resumed_from: dict[str, int] = {}
    for r in rows:
        if ":start-" in r.op_key and not r.op_key.endswith(":start-1"):
            resumed_from[r.job_id] = int(r.result)
    for job_id, checkpoint in interrupted.items():
        job = store.get(job_id)
        assert job.attempt >= 2, f"{job_id} was interrupted, so it needed another attempt"
        assert job_id in resumed_from
        assert resumed_from[job_id] >= (checkpoint or 0), "resumed from at least the checkpoint seen before the kill"
        events = [e.event for e in store.events(job_id)]
        assert "lease_expired" in events or "claim_refused" in events
    assert any(start > 0 for start in resumed_from.values()), "some job resumed mid-way"
    # A replay is exactly a unit whose effect was recorded but not yet checkpointed at the kill.
    duplicate_events = sum(1 for m in messages for e in store.events(m.message_id) if e.event == "duplicate_effect")
    assert duplicate_events == replays
    print(f"\ncrash test: {len(interrupted)} jobs interrupted, {replays} replays detected, "
          f"all {JOBS} SUCCEEDED {recovered_in:.1f}s after the kill; broker {RABBITMQ_URL}")
