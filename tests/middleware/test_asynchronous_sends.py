"""`send_commit="asynchronous"`: a send's registration commits without waiting for its WAL flush
(PostgreSQL). What a crash of the database can lose is the last such rows; the message, published
after the row's commit returned, carries everything the job needs: the worker that receives it finds
no job, registers it from the message and runs it (reliable.worker.claim, `_claim_own`). Here the
lost commit is simulated by deleting the row and its events before the worker starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from sqlalchemy import text

import reliable
from reliable.errors import ConfigError
from reliable.states import JobStatus

from middleware_harness import Harness, make_harness


@pytest.fixture
def quick(pg_database: str, policy_file: Path) -> Iterator[Harness]:
    made = make_harness(pg_database, policy_file, metrics=False, json_logs=False, send_commit="asynchronous")
    with made.store.engine.begin() as conn:
        conn.execute(text("DELETE FROM reliable_job_events"))
        conn.execute(text("DELETE FROM reliable_jobs"))
    yield made
    made.close()


def test_a_job_whose_asynchronous_registration_was_lost_is_registered_by_the_worker(quick: Harness) -> None:
    ran: list[int] = []

    @dramatiq.actor(broker=quick.broker)
    def remember(n: int) -> None:
        ran.append(n)

    assert quick.middleware.registration.synchronous is False
    message = remember.send(7)
    assert quick.store.get(message.message_id).status is JobStatus.PENDING
    with quick.store.engine.begin() as conn:  # as a database crash losing the unflushed commit would
        conn.execute(text("DELETE FROM reliable_job_events WHERE job_id = :id"), {"id": message.message_id})
        conn.execute(text("DELETE FROM reliable_jobs WHERE job_id = :id"), {"id": message.message_id})
    quick.run()
    assert ran == [7]
    assert quick.store.get(message.message_id).status is JobStatus.SUCCEEDED
    assert quick.events(message.message_id)[:2] == ["enqueued", "claim"]


def test_send_commit_takes_one_of_its_two_values(sqlite_url: str) -> None:
    with pytest.raises(ConfigError, match="send_commit must be one of 'synchronous', 'asynchronous'"):
        reliable.ReliableMiddleware(sqlite_url, send_commit="off")
