"""`reliable worker`: a child killed by SIGKILL gives its jobs back at once (lease TTL 30 s).

The replacement child (or a sibling's recovery pass) sees the dead child's pid gone on this host and
boot, and releases its leases before consuming: each checkpointed job resumes from its checkpoint
seconds after the kill instead of a TTL later.
"""

from __future__ import annotations

import os
import signal
import statistics
from pathlib import Path
from typing import Any

import pytest

from reliable.store.processes import list_processes

from support import wait_for
from workers import checkpointed, resumed_from_checkpoints, send

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

UNITS_APP_DIR = Path(__file__).parent.parent / "integration" / "apps"
JOBS = 4
#: The issue's bound is 3 s on an idle machine; the assertion keeps a margin for a shared 2-core
#: one and stays far below what a lease expiry takes (a TTL of 30 s: >= 20 s after the kill).
RESUME_BOUND = float(os.environ.get("RELIABLE_RESUME_BOUND", "10"))


def test_kill_9_of_a_child_resumes_its_jobs_from_their_checkpoints_at_once(
        producer: Any, supervise: Any, worker_env: dict[str, str], queue_name: str) -> None:
    broker, store = producer
    env = {**worker_env, "RELIABLE_TEST_LEASE_TTL": "30", "RELIABLE_TEST_HEARTBEAT": "10",
           "RELIABLE_TEST_RECOVERY_INTERVAL": "5"}
    supervisor = supervise(env, "--path", str(UNITS_APP_DIR), "-p", "1", "-t", "8", "-Q", queue_name,
                           app="units_app")
    [child] = supervisor.wait_ready(1, timeout=60).values()
    job_ids = [send(broker, queue_name, "units", 40, 0.1).message_id for _ in range(JOBS)]
    wait_for(lambda: checkpointed(store, job_ids, 3), "every job running with a checkpoint", timeout=60,
             context=supervisor.output)
    [record] = [p for p in list_processes(store) if p.pid == child]
    assert record.supervisor_pid == supervisor.proc.pid and record.live

    killed_at = store.now()
    os.kill(child, signal.SIGKILL)
    resumed = resumed_from_checkpoints(store, job_ids, killed_at, checkpoint=3, context=supervisor.output)
    [dead] = [p for p in list_processes(store) if p.worker_id == record.worker_id]
    assert dead.exit_reason == "pid_gone"
    print(f"\nkill -9 of a `reliable worker` child, lease TTL 30 s: resumed after "
          f"{statistics.median(resumed.values()):.2f} s (median), {max(resumed.values()):.2f} s (max)")
    assert max(resumed.values()) < RESUME_BOUND
