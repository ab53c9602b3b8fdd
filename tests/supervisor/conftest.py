"""Fixtures for `reliable worker` tests: its env (own queue, PostgreSQL store), a producer, started supervisors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.store import StateStore
from reliable.store.schema import metadata

from supervised import Supervised


@pytest.fixture
def sup_env(rabbitmq_url: str, queue_name: str, pg_database: str) -> dict[str, str]:
    """The supervised app's settings: the shared RabbitMQ, this test's queue, an emptied PostgreSQL store."""
    store = StateStore(pg_database)
    with store.engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
    store.close()
    return {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": pg_database,
            "RELIABLE_TEST_QUEUE": queue_name}


@pytest.fixture
def producer(sup_env: dict[str, str]) -> Iterator[tuple[RabbitmqBroker, StateStore]]:
    """A broker with reliable installed (no worker), to enqueue jobs like an app would; its store."""
    broker = RabbitmqBroker(url=sup_env["RELIABLE_TEST_BROKER"])
    middleware = reliable.install(broker, store=sup_env["RELIABLE_TEST_STORE"], recovery=False, json_logs=False)
    yield broker, middleware.store
    broker.close()
    middleware.store.close()


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    """Start `reliable worker APP ARGS...` with an env (APP: supervised_app unless `app=`); every one started is
    stopped after the test."""
    started: list[Supervised] = []

    def start(env: dict[str, str], *args: str, app: str = "supervised_app") -> Supervised:
        supervised = Supervised(env, tmp_path / f"supervisor-{len(started)}.log", *args, app=app)
        started.append(supervised)
        return supervised

    yield start
    for supervised in started:
        supervised.close()
