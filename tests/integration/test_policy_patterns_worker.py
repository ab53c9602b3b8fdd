"""A policy's message pattern on a real `dramatiq` worker: matched in linear time (RE2), the heartbeat beating.

With Python's `re`, `(a+)+$` searched in forty a's and a "!" backtracks for hours holding the GIL:
the whole worker process stops, its heartbeat included, and the leases of its other jobs expire.
Here the failure is classified at once and the other job's lease keeps being renewed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from reliable.states import JobStatus
from reliable.store import StateStore

from support import wait_for
from workers import WorkerProcess, send

pytestmark = pytest.mark.integration

POLICY = """\
version: 1
classes:
  backtracked: {action: dead}
rules:
  - {name: backtracking, message: "(a+)+$", class: backtracked}
"""


def test_a_pathological_pattern_is_matched_in_bounded_time_with_the_heartbeat_beating(
        worker_env: dict[str, str], producer: tuple[RabbitmqBroker, StateStore], tmp_path: Path) -> None:
    broker, store = producer
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    flag = tmp_path / "flag"
    worker = WorkerProcess({**worker_env, "RELIABLE_TEST_POLICY": str(policy)}, tmp_path / "worker.log",
                           threads=4, app="pattern_app")
    queue = worker_env["RELIABLE_TEST_QUEUE"]
    try:
        steady = send(broker, queue, "steady", str(flag)).message_id
        before = wait_for(lambda: (j := store.get(steady)).status is JobStatus.RUNNING and j.lease_expires_at,
                          "the steady job to run", timeout=30, context=worker.output)
        miss = send(broker, queue, "fail", "a" * 40 + "!").message_id  # no match: the catastrophic case for `re`
        hit = send(broker, queue, "fail", "a" * 40).message_id
        wait_for(lambda: store.get(miss).status is JobStatus.FAILED and store.get(hit).status is JobStatus.DEAD,
                 "both failures classified", timeout=20, context=worker.output)
        assert store.get(miss).last_error_class == "invalid_input"  # the built-in ValueError rule, after ours
        assert store.get(hit).last_error_class == "backtracked"
        # The heartbeat kept beating: the steady job's lease moved on, never expired, the job still runs.
        after = wait_for(lambda: (e := store.get(steady).lease_expires_at) and e > before + 1.0 and e,
                         "the steady job's lease to be renewed", timeout=10, context=worker.output)
        assert after > before + 1.0
        assert store.get(steady).status is JobStatus.RUNNING
        assert "lease_expired" not in [e.event for e in store.events(steady)]
        flag.write_text("done")
        wait_for(lambda: store.get(steady).status is JobStatus.SUCCEEDED, "the steady job to finish", timeout=20,
                 context=worker.output)
        assert [e.event for e in store.events(steady)].count("claim") == 1
    finally:
        flag.write_text("done")
        worker.stop()
