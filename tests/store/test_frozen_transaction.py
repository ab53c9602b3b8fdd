"""A process frozen inside one of the store's transactions (SIGSTOP between record_effect's two
statements: the job row held FOR UPDATE) holds its row locks only for a bounded time: the server
ends its session after IDLE_IN_TRANSACTION_TIMEOUT, and recovery's lease expiry of that job, which
waits on the lock, goes through. Before the bound, recovery waited until the frozen process resumed
(seen once in CI: tests/integration/test_fencing_and_sweeper.py, the rescuer never got the job)."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore
from reliable.store.engine import IDLE_IN_TRANSACTION_TIMEOUT


def test_a_transaction_left_open_by_a_frozen_holder_stops_blocking_recovery(pg_store: StateStore) -> None:
    store = pg_store
    store.register(NewJob("frozen-1", queue="q", actor="a", message={"args": []}))
    claim = store.claim("frozen-1", worker_id="frozen", lease_ttl=0.001)

    frozen = store.engine.connect()  # the frozen holder: inside a transaction, the row held, then silent
    frozen.begin()
    frozen.execute(text("SELECT 1 FROM reliable_jobs WHERE job_id = 'frozen-1' FOR UPDATE"))

    done = threading.Event()
    outcome: list[JobStatus] = []

    def expire() -> None:  # what recovery does once the lease is past its expiry
        outcome.append(store.transition("frozen-1", Event.LEASE_EXPIRED, expected_version=claim.job.version).status)
        done.set()

    started = time.monotonic()
    threading.Thread(target=expire, daemon=True).start()
    assert done.wait(IDLE_IN_TRANSACTION_TIMEOUT + 20), "recovery's write still waits on the frozen holder's lock"
    assert outcome == [JobStatus.PENDING]
    assert time.monotonic() - started >= IDLE_IN_TRANSACTION_TIMEOUT * 0.8  # it did wait on the lock first

    with pytest.raises(DBAPIError):  # the frozen holder, thawed, finds its session ended
        frozen.execute(text("SELECT 1"))
    frozen.invalidate()
    frozen.close()
