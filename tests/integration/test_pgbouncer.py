"""reliable through a real PgBouncer in transaction pooling (tests/pgbouncer.py), in front of the
shared PostgreSQL: `reliable db upgrade`, sends, a real 8-thread worker with its heartbeat and
recovery, and the console, all on the pooled URL (`?pooled=true`); and a pooled set-up the URL does
not declare refused at the first connection, with the fix (`reliable docs pgbouncer`)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import create_engine, func, select, text
from starlette.testclient import TestClient

import reliable
from reliable.access import ApiTokens
from reliable.errors import StoreMisconfigured
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import effects, jobs
from reliable.store.sessions import IDLE_IN_TRANSACTION_TIMEOUT, STATEMENT_TIMEOUT
from reliable.web import WebConfig, create_app

from pgbouncer import pgbouncer
from support import CLI, PG_ADMIN_URL, scratch_database, wait_for
from workers import WorkerProcess, send

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOBS = 60
UNITS = 3


@pytest.fixture
def direct_url() -> Iterator[str]:
    """A scratch database whose sessions of role postgres get reliable's bounds on the server, as
    the docs say to set them for a pooled store (scoped to this database: dropped with it)."""
    with scratch_database("reliable_pgb_") as url:
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        database = url.rsplit("/", 1)[1]
        with admin.connect() as conn:
            for name, value in (("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_TIMEOUT),
                                ("statement_timeout", STATEMENT_TIMEOUT)):
                conn.execute(text(f'ALTER ROLE postgres IN DATABASE "{database}" SET {name} = {int(value * 1000)}'))
        admin.dispose()
        yield url


def upgrade(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI, "db", "upgrade", "--store", url], capture_output=True,
                          text=True, timeout=60, check=False)


def by_status(store: StateStore) -> Counter[str]:
    with store.engine.connect() as conn:
        return Counter(dict(conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()))


def console_page(store: StateStore, path: str) -> str:
    """`path` of the console, signed in as an admin (the console's own login form)."""
    _, token = ApiTokens(store).create("ada", "admin")
    client = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    login = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
    assert login is not None
    assert client.post("/login", data={"token": token, "csrf_token": login.group(1)},
                       follow_redirects=False).status_code == 303
    page = client.get(path)
    assert page.status_code == 200, page.text[:500]
    return page.text


def test_upgrade_send_run_recover_and_the_console_through_pgbouncer(
        direct_url: str, rabbitmq_url: str, queue_name: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    with pgbouncer() as bouncer:
        url = bouncer.pooled(direct_url)
        migrated = upgrade(url)
        assert migrated.returncode == 0, migrated.stderr + bouncer.log()

        broker = RabbitmqBroker(url=rabbitmq_url)
        with caplog.at_level(logging.WARNING, logger="reliable.store"):
            middleware = reliable.install(broker, store=url, recovery=False, json_logs=False)
        store = middleware.store
        worker: WorkerProcess | None = None
        try:
            # The pooled sessions carry the server's bounds (so no warning about them).
            with store.engine.connect() as conn:
                assert conn.execute(text("SHOW statement_timeout")).scalar_one() == f"{int(STATEMENT_TIMEOUT)}s"
            assert not [r for r in caplog.records if "is pooled" in r.getMessage()]

            # A job whose holder is gone: recovery (through the pooler) expires its lease and hands it on.
            held = send(broker, queue_name, "noop")
            store.claim(held.message_id, worker_id="elsewhere:1:gone", lease_ttl=0.5)
            # Concurrent sends, then an 8-thread worker with effects and checkpoints on a 4-session pool.
            for _ in range(JOBS):
                send(broker, queue_name, "units", UNITS, 0.0)
            hold_release = tmp_path / "release"
            long_one = send(broker, queue_name, "hold", str(hold_release), 60.0)
            env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": url,
                   "RELIABLE_TEST_QUEUE": queue_name, "RELIABLE_TEST_LEASE_TTL": "1.5",
                   "RELIABLE_TEST_HEARTBEAT": "0.3", "RELIABLE_TEST_RECOVERY_INTERVAL": "0.3"}
            worker = WorkerProcess(env, tmp_path / "worker.log", threads=8)
            context = worker.output

            def done() -> bool:
                return by_status(store)[JobStatus.SUCCEEDED.value] == JOBS + 1

            wait_for(done, f"{JOBS + 1} jobs SUCCEEDED through PgBouncer", timeout=60, context=context)
            assert by_status(store) == Counter({JobStatus.SUCCEEDED.value: JOBS + 1, JobStatus.RUNNING.value: 1})
            with store.engine.connect() as conn:
                assert conn.execute(select(func.count()).select_from(effects)).scalar_one() == JOBS * (UNITS + 1)
            assert [e.event for e in store.events(held.message_id, events=["lease_expired"])] == ["lease_expired"]

            # The heartbeat keeps the long job's lease (ttl 1.5 s) through the pooler: renewed, never expired.
            first = store.get(long_one.message_id)
            assert first.status is JobStatus.RUNNING and first.lease_expires_at is not None
            wait_for(lambda: (store.get(long_one.message_id).lease_expires_at or 0) > first.lease_expires_at + 1,
                     "the heartbeat to renew the lease", timeout=10, context=context)
            hold_release.touch()
            wait_for(lambda: store.get(long_one.message_id).status is JobStatus.SUCCEEDED, "the long job to end",
                     timeout=15, context=context)
            assert not store.events(long_one.message_id, events=["lease_expired"])
            assert "prepared statement" not in worker.output()

            # The console, served from the pooled store.
            assert long_one.message_id in console_page(store, f"/jobs/{long_one.message_id}")
        finally:
            if worker is not None:
                worker.stop()
            broker.close()
            store.close()


def test_a_pooler_the_url_does_not_declare_is_refused_at_once_with_the_fix(
        direct_url: str, caplog: pytest.LogCaptureFixture) -> None:
    _without_bounds(direct_url)  # before PgBouncer opens server sessions: they read it when they start
    # PgBouncer as installed: it refuses the startup options reliable's direct sessions carry.
    with pgbouncer() as bouncer:
        started = time.monotonic()
        refused = upgrade(bouncer.url(direct_url))
        assert refused.returncode != 0
        assert "unsupported startup parameter: options" in refused.stderr
        assert "add pooled=true" in refused.stderr, refused.stderr
        assert time.monotonic() - started < 20  # at once: not waited on as an outage
    # With ignore_startup_parameters = options it drops them instead: the session check sees the
    # marker missing, before any statement could be prepared on one server session and run on another.
    with pgbouncer({"ignore_startup_parameters": "options"}) as bouncer:
        store = StateStore(bouncer.url(direct_url))
        try:
            with pytest.raises(StoreMisconfigured, match=r"dropped the session's startup options.*add pooled=true"):
                store.check_schema()
        finally:
            store.close()
        # A pooled store whose role has no bounds on the server works, and says what to run, once.
        with caplog.at_level(logging.WARNING, logger="reliable.store"):
            pooled = StateStore(bouncer.pooled(direct_url))
            try:
                pooled.upgrade()
                assert pooled.now() > 0
            finally:
                pooled.close()
        [warning] = [r.getMessage() for r in caplog.records if "is pooled" in r.getMessage()]
        assert "ALTER ROLE \"postgres\" IN DATABASE" in warning and "statement_timeout = 30000" in warning


def _without_bounds(direct_url: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'ALTER ROLE postgres IN DATABASE "{direct_url.rsplit("/", 1)[1]}" RESET ALL'))
    admin.dispose()
