"""Real RabbitMQ + PostgreSQL + real `dramatiq` worker processes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from workers import WorkerProcess


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


