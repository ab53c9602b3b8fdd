"""Fixtures of the chaos suite: its own database and queue, real workers, and services always restored.

`pytest tests/chaos --soak` runs the long form (more jobs, more faults; --soak is defined in
tests/conftest.py). Environment overrides, for calibrating without touching the services:
RELIABLE_CHAOS_JOBS (number of jobs), RELIABLE_CHAOS_FAULTS=none (no fault at all), RELIABLE_CHAOS_SEED
(the random schedule).
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from chaos_run import ChaosConfig
from chaos_services import ServiceGuard, pg_cluster, postgres_ready, rabbitmq_ready, rabbitmq_tools
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from reliable.store import StateStore

from support import IN_CI, PG_ADMIN_URL, RABBITMQ_URL, port_open, require_service


@pytest.fixture
def chaos_config(request: pytest.FixtureRequest) -> ChaosConfig:
    soak = bool(request.config.getoption("--soak", default=False))
    seed = int(os.environ.get("RELIABLE_CHAOS_SEED") or random.SystemRandom().randrange(1, 1_000_000))
    if soak:
        config = ChaosConfig("soak", jobs=10_000, units=4, unit_seconds=0.04, workers=3, threads=8, backlog=96,
                             kills=10, freezes=3, rabbitmq_restarts=2, postgres_restarts=2, freeze_seconds=5.0,
                             rabbitmq_down_seconds=4.0, postgres_down_seconds=4.0, run_timeout=1000.0,
                             settle_timeout=180.0, seed=seed)
    else:
        config = ChaosConfig("ci", jobs=2_000, units=4, unit_seconds=0.05, workers=2, threads=8, backlog=64,
                             kills=3, freezes=1, rabbitmq_restarts=1, postgres_restarts=1, freeze_seconds=5.0,
                             rabbitmq_down_seconds=3.0, postgres_down_seconds=4.0, run_timeout=210.0,
                             settle_timeout=90.0, seed=seed)
    overrides: dict[str, object] = {}
    if os.environ.get("RELIABLE_CHAOS_JOBS"):
        overrides["jobs"] = int(os.environ["RELIABLE_CHAOS_JOBS"])
    if os.environ.get("RELIABLE_CHAOS_FAULTS", "").lower() == "none":
        overrides.update(kills=0, freezes=0, rabbitmq_restarts=0, postgres_restarts=0)
    if overrides:
        from dataclasses import replace

        config = replace(config, **overrides)  # type: ignore[arg-type]
    return config


def _require_tool(name: str, available: bool) -> None:
    if available:
        return
    message = f"the chaos suite needs {name} to restart services on this machine"
    if IN_CI:
        pytest.fail(f"{message}; under CI=true it is mandatory")
    pytest.skip(message)


@pytest.fixture
def services(chaos_config: ChaosConfig) -> Iterator[ServiceGuard]:
    """The local services, required; whatever the test did, they are serving again afterwards."""
    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    require_service("PostgreSQL", port_open("127.0.0.1", 5432))
    cluster = pg_cluster()
    if chaos_config.rabbitmq_restarts:
        _require_tool("rabbitmqctl and rabbitmq-server", rabbitmq_tools())
    if chaos_config.postgres_restarts:
        _require_tool("pg_ctlcluster and a cluster on port 5432 (pg_lsclusters)", cluster is not None)
    assert rabbitmq_ready() and postgres_ready(), "services must be serving before the chaos starts"
    guard = ServiceGuard(cluster)
    try:
        yield guard
    finally:
        guard.restore()
        if chaos_config.postgres_restarts:
            _drop_dead_pool_connections()
        assert not guard.restarted, f"the test left {guard.restarted} down (restored by the fixture)"


def _drop_dead_pool_connections() -> None:
    """After a PostgreSQL restart, pooled connections of this process are dead: drop them.

    Engines of other fixtures (e.g. the session's pg_database admin engine, which has no
    pre-ping) would otherwise hand out a dead connection to the next test.
    """
    for obj in gc.get_objects():
        if isinstance(obj, Engine) and obj.dialect.name == "postgresql":
            with contextlib.suppress(Exception):
                obj.dispose()


@pytest.fixture
def chaos_database(services: ServiceGuard) -> Iterator[str]:
    """A migrated PostgreSQL database of its own, with the ledger table; dropped afterwards."""
    name = f"reliable_chaos_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        store = StateStore(url)
        store.upgrade()
        store.close()
        ledger = create_engine(url, poolclass=NullPool)
        with ledger.begin() as conn:
            conn.execute(text("CREATE TABLE chaos_ledger (id bigserial PRIMARY KEY, job_id text NOT NULL, "
                              "unit integer NOT NULL, lease_id bigint NOT NULL, pid integer NOT NULL, "
                              "at timestamptz NOT NULL DEFAULT clock_timestamp())"))
        ledger.dispose()
        yield url
    finally:
        services.restore()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def chaos_queue(services: ServiceGuard) -> Iterator[str]:
    """A queue name of its own; the queue and its delay/dead-letter queues are deleted afterwards."""
    name = f"chaos_{uuid.uuid4().hex[:10]}"
    yield name
    services.restore()
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    for suffix in ("", ".DQ", ".XQ"):
        channel.queue_delete(name + suffix)
    connection.close()


@pytest.fixture
def chaos_logs(tmp_path: Path) -> Path:
    """Where worker logs go (RELIABLE_TEST_LOGS to keep them)."""
    logs = Path(os.environ.get("RELIABLE_TEST_LOGS") or tmp_path)
    logs.mkdir(parents=True, exist_ok=True)
    return logs
