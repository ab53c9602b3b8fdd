"""RabbitMQ nodes started by the tests (tests/cluster/rabbit_nodes.py), a store with a ledger."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from reliable.store import StateStore

from rabbit_nodes import RabbitNode, rabbit_nodes
from support import scratch_database
from workers import WorkerProcess

APPS = Path(__file__).parent / "apps"
#: RabbitMQ checks consumer_timeout on each channel tick (60 s by default): 1 s here.
SHORT_TIMEOUT_ARGS = "-rabbit consumer_timeout 5000 -rabbit channel_tick_interval 1000"


def pytest_addoption(parser: pytest.Parser) -> None:
    """--soak: the long form (20,000 jobs); tests/chaos/conftest.py defines the same option."""
    with contextlib.suppress(ValueError):  # already defined by tests/chaos/conftest.py
        parser.addoption("--soak", action="store_true", default=False,
                         help="run the long forms of the chaos and cluster tests")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Sequence[RabbitNode]]:
    """Three RabbitMQ nodes of this module's own, joined into one cluster."""
    with rabbit_nodes(3) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def short_timeout_node() -> Iterator[RabbitNode]:
    """One RabbitMQ node whose consumer_timeout is 5 s, checked every second."""
    with rabbit_nodes(1, erl_args=SHORT_TIMEOUT_ARGS, cluster=False) as nodes:
        yield nodes[0]


@pytest.fixture
def ledger_store() -> Iterator[str]:
    """A migrated store in a scratch PostgreSQL database, with a `ledger` table for the apps."""
    with scratch_database("reliable_cluster_") as url:
        store = StateStore(url)
        store.upgrade()
        store.close()
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE ledger (id bigserial PRIMARY KEY, job_id text NOT NULL, "
                              "pid integer NOT NULL, at double precision NOT NULL)"))
        engine.dispose()
        yield url


@pytest.fixture
def cluster_queue() -> str:
    """A queue name of this test's own (the nodes are the test's own too: nothing to delete after)."""
    return f"c_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def start_app(tmp_path: Path, ledger_store: str, cluster_queue: str) -> Iterator[Callable[..., WorkerProcess]]:
    """Start tests/cluster/apps/cluster_app in a `dramatiq` worker: start(urls, threads=..., **env)."""
    started: list[WorkerProcess] = []

    def start(urls: Sequence[str], *, processes: int = 1, threads: int = 8, **env: str) -> WorkerProcess:
        settings = {"RELIABLE_TEST_BROKER": ";".join(urls), "RELIABLE_TEST_STORE": ledger_store,
                    "RELIABLE_TEST_QUEUE": cluster_queue, "dramatiq_restart_delay": "500", **env}
        logs = Path(os.environ.get("RELIABLE_TEST_LOGS", tmp_path))
        logs.mkdir(parents=True, exist_ok=True)
        worker = WorkerProcess(settings, logs / f"{cluster_queue}-worker-{len(started)}.log", processes=processes,
                               threads=threads, app="cluster_app", app_dir=APPS)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.stop()
