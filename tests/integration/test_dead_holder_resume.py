"""A worker known dead gives its jobs back at once; a frozen one keeps them until its lease TTL.

Real RabbitMQ + PostgreSQL + `dramatiq` processes, lease TTL 30 s (the default): after kill -9 and a
restart on the same host, each checkpointed job resumes from its checkpoint within seconds (the
restarted worker sees the dead pid on record); a SIGSTOPped worker's jobs are not touched before
the TTL although another worker runs on the same host.
"""

from __future__ import annotations

import os
import signal
import statistics
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import select

from reliable.states import JobStatus
from reliable.store.processes import list_processes
from reliable.store.schema import effects

from support import wait_for
from workers import checkpointed, resumed_from_checkpoints, send

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

JOBS = 4
UNITS = 40
UNIT_SECONDS = 0.1
#: The issue's bound is 3 s on an idle machine; the assertion keeps a margin for a shared 2-core
#: one and stays far below what a lease expiry takes (a TTL of 30 s: >= 20 s after the kill).
RESUME_BOUND = float(os.environ.get("RELIABLE_RESUME_BOUND", "10"))
SLOW_LEASES = {"RELIABLE_TEST_LEASE_TTL": 30, "RELIABLE_TEST_HEARTBEAT": 10, "RELIABLE_TEST_RECOVERY_INTERVAL": 5}


def assert_each_unit_once(store: Any, job_ids: list[str]) -> int:
    """Every job SUCCEEDED with each unit recorded once; the replays (a unit recorded and not yet
    checkpointed at the kill: the documented effect/record window) are at most one per job."""
    wait_for(lambda: all(store.get(j).status is JobStatus.SUCCEEDED for j in job_ids), "every job SUCCEEDED",
             timeout=60)
    with store.engine.connect() as conn:
        rows = conn.execute(select(effects.c.job_id, effects.c.op_key, effects.c.duplicates)
                            .where(effects.c.job_id.in_(job_ids))).all()
    units = [r for r in rows if ":start-" not in r.op_key]
    assert Counter(r.job_id for r in units) == Counter({j: UNITS for j in job_ids})
    replays = Counter({r.job_id: r.duplicates for r in units if r.duplicates})
    assert all(n <= 1 for n in replays.values()), replays
    return sum(replays.values())


def test_kill_9_then_restart_resumes_each_job_from_its_checkpoint_at_once(producer: Any, start_worker: Any,
                                                                         queue_name: str) -> None:
    broker, store = producer
    job_ids = [send(broker, queue_name, "units", UNITS, UNIT_SECONDS).message_id for _ in range(JOBS)]
    first = start_worker(**SLOW_LEASES)
    wait_for(lambda: checkpointed(store, job_ids, 3), "every job running with a checkpoint", timeout=60,
             context=first.output)
    killed_at = store.now()
    first.kill()
    second = start_worker(**SLOW_LEASES)
    resumed = resumed_from_checkpoints(store, job_ids, killed_at, checkpoint=3, context=second.output)
    replays = assert_each_unit_once(store, job_ids)
    print(f"\nkill -9 + restart (dramatiq), lease TTL 30 s: resumed after {statistics.median(resumed.values()):.2f} s "
          f"(median), {max(resumed.values()):.2f} s (max); {replays} replays")
    assert max(resumed.values()) < RESUME_BOUND


def test_a_frozen_worker_keeps_its_leases_until_the_ttl(producer: Any, start_worker: Any, queue_name: str) -> None:
    broker, store = producer
    leases = {"RELIABLE_TEST_LEASE_TTL": 6, "RELIABLE_TEST_HEARTBEAT": 1, "RELIABLE_TEST_RECOVERY_INTERVAL": 0.5}
    job_ids = [send(broker, queue_name, "units", UNITS, UNIT_SECONDS).message_id for _ in range(2)]
    frozen = start_worker(**leases)
    wait_for(lambda: checkpointed(store, job_ids, 1), "every job running with a checkpoint", timeout=60,
             context=frozen.output)
    frozen.signal(signal.SIGSTOP)
    try:
        held = {j: store.get(j) for j in job_ids}
        expires = max(j.lease_expires_at or 0 for j in held.values())
        other = start_worker(**leases)
        # The second worker boots (its look at this host's processes) and runs recovery passes.
        wait_for(lambda: len(list_processes(store, live_only=True)) >= 2, "the second worker on record",
                 timeout=30, context=other.output)
        records = {p.worker_id: p for p in list_processes(store)}
        holder = records[next(iter(held.values())).worker_id or ""]
        assert holder.live, "a frozen process is alive: never marked dead"
        # Until the TTL runs out, the jobs stay with the frozen holder, whatever the other worker sees.
        # (A release is for good: a job released earlier would now be in another state or lease.)
        wait_for(lambda: store.now() >= expires - 0.5, "the TTL nearly over", timeout=30, interval=0.2)
        for job_id, job in held.items():
            now = store.get(job_id)
            assert (now.status, now.lease_id) == (JobStatus.RUNNING, job.lease_id), now
        # Then its leases expire by TTL, not as a death. (Their new messages may go to the frozen
        # worker's prefetch: RabbitMQ does not know it is frozen. Not this test's concern.)
        wait_for(lambda: all(store.events(j, events=["lease_expired"]) for j in job_ids), "the leases expired",
                 timeout=30, context=other.output)
        for job_id in job_ids:
            [expiry] = store.events(job_id, events=["lease_expired"])
            assert expiry.detail is not None and "holder_dead" not in expiry.detail
            assert expiry.at >= held[job_id].lease_expires_at
    finally:
        frozen.signal(signal.SIGCONT)
