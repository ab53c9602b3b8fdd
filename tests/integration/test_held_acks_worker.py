"""Held acknowledgements on a real worker, RabbitMQ and PostgreSQL (reliable.worker.acks): the
successes that pile up behind a blocked batch are acknowledged once it commits, each of them, and
they reach RabbitMQ together (reliable.rabbitmq.acks), not one hand-off per delivery."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import pytest

from reliable.states import JobStatus

from support import row_locked, wait_for, waiting_on_a_lock
from workers import WorkerProcess, ready, send

pytestmark = pytest.mark.integration

#: Dramatiq's prefetch for 8 threads: RabbitMQ delivers no more while these are unacknowledged.
PILED_UP = 16


def test_successes_held_behind_a_blocked_batch_are_all_acknowledged_together(
        producer: Any, worker_env: dict[str, str], queue_name: str, tmp_path: Path) -> None:
    broker, store = producer
    started, done = tmp_path / "started", tmp_path / "done"
    started.mkdir()
    done.touch()  # each run returns at once

    def runs() -> int:
        return len(list(started.iterdir()))

    first = send(broker, queue_name, "fast_hold", str(done), str(started), 60.0).message_id
    worker = WorkerProcess(worker_env, tmp_path / "worker.log", threads=8)
    try:
        with row_locked(store.engine, first):
            wait_for(lambda: runs() == 1 and waiting_on_a_lock(store.engine), "the first success's batch blocked",
                     context=worker.output)
            jobs = [first] + [send(broker, queue_name, "fast_hold", str(done), str(started), 60.0).message_id
                              for _ in range(PILED_UP - 1)]
            wait_for(lambda: runs() == PILED_UP, "every job run, its success held", context=worker.output)
            assert {store.get(job).status for job in jobs} == {JobStatus.PENDING}
            assert ready(worker_env["RELIABLE_TEST_BROKER"], queue_name) == 0  # all delivered, none acknowledged
        wait_for(lambda: all(store.get(job).status is JobStatus.SUCCEEDED for job in jobs), "every success committed",
                 context=worker.output)
        # SIGTERM to the main process alone (it stops its worker process once): a shutdown that
        # runs every hook and logs the acknowledgements' summary.
        worker.proc.send_signal(signal.SIGTERM)
        worker.proc.wait(30)
    finally:
        worker.stop()
    # A delivery whose acknowledgement was lost would be back in the queue once the worker's
    # connection closed, and its job would have run only once (no other worker).
    assert ready(worker_env["RELIABLE_TEST_BROKER"], queue_name) == 0
    summary = re.search(r"successes: (\d+) acknowledged after their commit without a wait \((\d+) hand-offs",
                        worker.output())
    assert summary is not None, worker.output()[-3000:]
    held, handoffs = map(int, summary.groups())
    assert held == PILED_UP
    # Released by one batch's commit (or two: the blocked first success's, then the rest's), the
    # piled-up acknowledgements come due together: far fewer hand-offs than deliveries.
    assert 1 <= handoffs < held, (held, handoffs)
    assert runs() == PILED_UP
