"""Real RabbitMQ + PostgreSQL + real `dramatiq` worker processes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.store import StateStore

from workers import WorkerProcess


@pytest.fixture
def worker_env(rabbitmq_url: str, queue_name: str, pg_database: str) -> dict[str, str]:
    store = StateStore(pg_database)
    from reliable.store.schema import metadata

    with store.engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
    store.close()
    return {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": pg_database,
            "RELIABLE_TEST_QUEUE": queue_name}


@pytest.fixture
def start_worker(tmp_path: Path, worker_env: dict[str, str]) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(app: str = "units_app", **overrides: Any) -> WorkerProcess:
        env = {**worker_env, **{k: str(v) for k, v in overrides.items()}}
        logs = Path(os.environ.get("RELIABLE_TEST_LOGS", tmp_path))
        logs.mkdir(parents=True, exist_ok=True)
        worker = WorkerProcess(env, logs / f"{env['RELIABLE_TEST_QUEUE']}-worker-{len(started)}.log", app=app)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def producer(worker_env: dict[str, str]) -> Iterator[tuple[RabbitmqBroker, StateStore]]:
    """A broker with reliable installed (no worker threads), to enqueue jobs like an app would."""
    broker = RabbitmqBroker(url=worker_env["RELIABLE_TEST_BROKER"])
    middleware = reliable.install(broker, store=worker_env["RELIABLE_TEST_STORE"], recovery=False)
    yield broker, middleware.store
    broker.close()
    middleware.store.close()


