"""Fixtures shared by every test: stores on both databases, real services or a clear skip.

Under CI=true a missing service is a failure, never a skip.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from hypothesis import HealthCheck, settings

import reliable
from reliable.store import StateStore
from reliable.testing import sqlite_store_url

from support import IN_CI, PG_ADMIN_URL, RABBITMQ_URL, port_open, require_service, scratch_database

__all__ = ["IN_CI", "PG_ADMIN_URL", "RABBITMQ_URL", "port_open", "require_service"]

# Property tests judge results, never speed: no per-example deadline and no "too slow" health
# check, which failed by timing on a loaded machine (a test's own @settings may still set them).
settings.register_profile("reliable", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("reliable")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False,
                     help="run the long forms: the chaos suite (10,000 jobs, 17 faults; ~12 min, bounded to 20 min), "
                          "the claim race (1,000 races)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """An `exclusive` test never runs beside others: on several xdist workers it fails at once, saying
    how to run it (scripts/test runs `pytest -m exclusive` alone, after the parallel phase)."""
    workers = int(getattr(item.config, "workerinput", {}).get("workercount", 1))
    if workers > 1 and item.get_closest_marker("exclusive") is not None:
        pytest.fail(f"{item.nodeid} is marked exclusive: it must run alone, not on {workers} xdist workers "
                    "(deselect it with -m 'not exclusive' and run `pytest -m exclusive` without -n)", pytrace=False)


@pytest.fixture
def rabbitmq_url() -> str:
    """The shared RabbitMQ's URL (required)."""
    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    return RABBITMQ_URL


@pytest.fixture
def queue_name(rabbitmq_url: str) -> Iterator[str]:
    """A queue name of this test's own; the queue and its delay/dead-letter queues are deleted after."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    channel = connection.channel()
    for suffix in ("", ".DQ", ".XQ"):
        channel.queue_delete(name + suffix)
    connection.close()


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session; its URL."""
    with scratch_database("reliable_test_") as url:
        migrated = StateStore(url)
        migrated.upgrade()
        migrated.close()
        yield url


def _truncate(store: StateStore) -> None:
    from reliable.store.schema import metadata

    with store.engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store file migrated once per test process (`sqlite_store_url`); tests get copies.

    Migrating costs 0.2-0.5 s a store and about a thousand tests take one; a copy of the closed,
    migrated file is the same database for 1 ms."""
    directory = tmp_path_factory.mktemp("sqlite-template")
    sqlite_store_url(directory)
    return directory / "reliable.db"


def _sqlite_copy(template: Path, directory: Path) -> str:
    """A copy of the migrated template as `directory`/reliable.db (where `sqlite_store_url` puts it); its URL."""
    target = directory / "reliable.db"
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated SQLite store file; its URL."""
    return _sqlite_copy(sqlite_template, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty store URL on each supported database."""
    if request.param == "sqlite":
        return _sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path)
    url: str = request.getfixturevalue("pg_database")
    store = StateStore(url)
    _truncate(store)
    store.close()
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[StateStore]:
    """A StateStore on each supported database, emptied before the test."""
    s = StateStore(store_url)
    yield s
    s.close()


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[StateStore]:
    """A StateStore on PostgreSQL only, emptied before the test."""
    s = StateStore(pg_database)
    _truncate(s)
    yield s
    s.close()


@pytest.fixture
def worker_env(rabbitmq_url: str, queue_name: str, pg_database: str) -> dict[str, str]:
    """The env of a test app's real worker processes (tests/integration/apps, tests/supervisor/apps):
    the shared RabbitMQ, this test's queue, and the session's PostgreSQL store, emptied."""
    store = StateStore(pg_database)
    _truncate(store)
    store.close()
    return {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": pg_database,
            "RELIABLE_TEST_QUEUE": queue_name}


@pytest.fixture
def producer(worker_env: dict[str, str]) -> Iterator[tuple[RabbitmqBroker, StateStore]]:
    """A broker with reliable installed (no worker threads), to enqueue jobs like an app would; its store."""
    broker = RabbitmqBroker(url=worker_env["RELIABLE_TEST_BROKER"])
    middleware = reliable.install(broker, store=worker_env["RELIABLE_TEST_STORE"], recovery=False, json_logs=False)
    yield broker, middleware.store
    broker.close()
    middleware.store.close()
