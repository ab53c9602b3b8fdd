"""A producer killed (kill -9) while its sends wait for their shared commit: no send is half done.

The producer (tests/integration/apps/sender_app.py) sends from 8 threads through the registration's
group commit (PostgreSQL). The test blocks the job table (LOCK TABLE ... SHARE: every insert waits),
waits until a batch of registrations is stuck behind it with the other threads' sends queued, kills
the producer, and lets the batch go: that batch commits with nobody left to publish its messages.
What must hold (docs/performance.md, "Producer"):
- every send that returned has its row and its message in RabbitMQ (registration, then publish);
- every message in RabbitMQ has its row (nothing is published before its row commits);
- every row without a message is PENDING and never delivered: the sweeper publishes it, and then
  every row has its message. Nothing else is possible: a send is its row, then its publish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import create_engine, text

import reliable
from reliable.store import StateStore

from support import wait_for, waiting_on_a_lock
from workers import APPS

pytestmark = pytest.mark.integration


def _queued(rabbitmq_url: str, queue: str) -> list[str]:
    """The message ids ready in `queue` (taken off it: the test is their only reader)."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        channel, ids = connection.channel(), []
        while True:
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return ids
            ids.append(json.loads(body)["message_id"])
    finally:
        connection.close()


def _sent(path: Path) -> set[str]:
    return set(path.read_text().split()) if path.exists() else set()


@pytest.mark.slow
def test_a_producer_killed_while_its_sends_wait_for_their_commit_leaves_none_half_done(
        worker_env: dict[str, str], tmp_path: Path, rabbitmq_url: str, queue_name: str) -> None:
    sent_file, log = tmp_path / "sent", tmp_path / "sender.log"
    store = StateStore(worker_env["RELIABLE_TEST_STORE"])
    admin = create_engine(worker_env["RELIABLE_TEST_STORE"])
    with log.open("wb") as out:
        sender = subprocess.Popen([sys.executable, str(APPS / "sender_app.py")], cwd=APPS, stdout=out,
                                  stderr=subprocess.STDOUT,
                                  env={**os.environ, **worker_env, "RELIABLE_TEST_SENT": str(sent_file),
                                       "PYTHONPATH": str(APPS)})
    try:
        wait_for(lambda: len(_sent(sent_file)) >= 100, "100 sends", timeout=60, context=log.read_text)
        with admin.connect() as blocker:
            blocker.execute(text("LOCK TABLE reliable_jobs IN SHARE MODE"))
            wait_for(lambda: waiting_on_a_lock(admin), "a batch of registrations to wait for the table",
                     timeout=30, context=log.read_text)
            sender.send_signal(signal.SIGKILL)
            sender.wait(30)
            blocker.rollback()  # the stuck batch commits now, its producer gone
        # The stuck batch commits, then its backend finds its client gone and exits.
        wait_for(lambda: not _others_busy(admin), "the stuck batch to end", timeout=30)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait(30)
    with admin.connect() as conn:
        found = conn.execute(text(
            "SELECT j.job_id, j.status, EXISTS (SELECT 1 FROM reliable_job_events AS e WHERE e.job_id = j.job_id "
            "AND e.event = 'enqueued') FROM reliable_jobs AS j")).all()
        orphans = conn.execute(text("SELECT count(*) FROM reliable_job_events AS e WHERE NOT EXISTS "
                                    "(SELECT 1 FROM reliable_jobs AS j WHERE j.job_id = e.job_id)")).scalar()
    rows: dict[str, str] = {job_id: status for job_id, status, _ in found}
    sent, queued = _sent(sent_file), set(_queued(rabbitmq_url, queue_name))

    assert sent and sent <= set(rows) and sent <= queued  # a send that returned is durable and published
    assert queued <= set(rows)  # nothing published before its row committed
    # Every row has its `enqueued` event and every event its row: one statement wrote both.
    assert all(has_event for _, _, has_event in found) and orphans == 0
    unpublished = set(rows) - queued
    assert unpublished, "the stuck batch's rows should have committed after the kill, unpublished"
    assert all(rows[job_id] == "PENDING" for job_id in unpublished)

    broker = RabbitmqBroker(url=rabbitmq_url, confirm_delivery=True)
    try:
        recovery = reliable.Recovery(store, broker, reliable.Policy.load(None), sweep_after=0, batch=1000)
        wait_for(lambda: unpublished <= set(recovery.run_once().redispatched) | _swept(store, unpublished),
                 "the sweeper to publish every unpublished row", timeout=30)
    finally:
        broker.close()
        store.close()
        admin.dispose()
    # Published now (with the others still PENDING: with sweep_after=0 every PENDING job is stale,
    # and the test took their messages off the queue).
    assert unpublished <= set(_queued(rabbitmq_url, queue_name))


def _others_busy(engine: Any) -> bool:
    """Whether a session other than this one is in a statement or a transaction on `engine`'s database."""
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                      "AND pid <> pg_backend_pid() AND state <> 'idle'")).scalar())


def _swept(store: StateStore, job_ids: set[str]) -> set[str]:
    """The jobs among `job_ids` the sweeper has re-dispatched (a `redispatched` event)."""
    found: Any = {job_id for job_id in job_ids if "redispatched" in [e.event for e in store.events(job_id)]}
    return found
