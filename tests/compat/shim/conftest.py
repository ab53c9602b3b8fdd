"""Fixtures Dramatiq's test modules ask for, written for reliable's compatibility run.

Every broker built here (and in the test modules) gets reliable installed by the compatibility
plugin's broker patch; these fixtures only build the brokers, workers and backends themselves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq import Worker
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.rate_limits import backends as rl_backends
from dramatiq.results import backends as res_backends

from .common import RABBITMQ_CREDENTIALS

IN_CI = os.getenv("CI", "").lower() in ("1", "true", "yes")


def _require(name: str, check: Callable[[], object]) -> None:
    try:
        check()
    except Exception as error:
        message = f"{name} is not reachable: {error}"
        if IN_CI:
            pytest.fail(f"{message}; under CI=true the compatibility suite needs it")
        pytest.skip(message)


def _redis_ping() -> None:
    client = redis.Redis()
    try:
        client.ping()
    finally:
        client.close()


@pytest.fixture
def stub_broker() -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


@pytest.fixture
def rabbitmq_broker() -> Iterator[RabbitmqBroker]:
    broker = RabbitmqBroker(host="127.0.0.1", max_priority=10, credentials=RABBITMQ_CREDENTIALS)
    _require("RabbitMQ", lambda: broker.connection)
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


@pytest.fixture
def redis_broker() -> Iterator[RedisBroker]:
    _require("Redis", _redis_ping)
    broker = RedisBroker()
    broker.client.flushall()
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    yield broker
    broker.client.flushall()
    broker.close()


def _started(broker: dramatiq.Broker, **options: Any) -> Iterator[Worker]:
    worker = Worker(broker, **options)
    worker.start()
    yield worker
    worker.stop()


@pytest.fixture
def stub_worker(stub_broker: StubBroker) -> Iterator[Worker]:
    yield from _started(stub_broker, worker_timeout=100, worker_threads=32)


@pytest.fixture
def rabbitmq_worker(rabbitmq_broker: RabbitmqBroker) -> Iterator[Worker]:
    yield from _started(rabbitmq_broker, worker_threads=32)


@pytest.fixture
def redis_worker(redis_broker: RedisBroker) -> Iterator[Worker]:
    yield from _started(redis_broker, worker_threads=32)


def _flushed(make: Callable[[], Any]) -> Iterator[Any]:
    """A Redis-backed backend on an empty Redis, emptied again after the test."""
    _require("Redis", _redis_ping)
    backend = make()
    backend.client.flushall()
    yield backend
    backend.client.flushall()


@pytest.fixture
def redis_result_backend() -> Iterator[res_backends.RedisBackend]:
    yield from _flushed(res_backends.RedisBackend)


@pytest.fixture
def stub_result_backend() -> res_backends.StubBackend:
    return res_backends.StubBackend()


@pytest.fixture(params=["redis", "stub"])
def result_backend(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_result_backend")


@pytest.fixture
def redis_rate_limiter_backend() -> Iterator[rl_backends.RedisBackend]:
    yield from _flushed(rl_backends.RedisBackend)


@pytest.fixture
def stub_rate_limiter_backend() -> rl_backends.StubBackend:
    return rl_backends.StubBackend()


@pytest.fixture(params=["redis", "stub"])
def rate_limiter_backend(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_rate_limiter_backend")


@pytest.fixture
def start_cli() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start `python -m dramatiq BROKER` like a user would; every process is terminated after the test."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(broker_module: str, *, extra_args: list[str] | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
        _require("Redis", _redis_ping)
        args = [sys.executable, "-m", "dramatiq", broker_module, *(extra_args or [])]
        env = dict(os.environ)
        # Brokers the test modules build at import share the store of this run's collection.
        env["RELIABLE_COMPAT_STORE_URL"] = os.environ.get("RELIABLE_COMPAT_IMPORT_STORE_URL", "")
        process = subprocess.Popen(args, env=env, **kwargs)
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
