"""Helpers shared by the tests (importable as `support`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PG_ADMIN_URL = os.environ.get("RELIABLE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
RABBITMQ_URL = os.environ.get("RELIABLE_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672/")


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, available: bool) -> None:
    """Skip (locally) or fail (CI) when a real service the test needs is absent."""
    if available:
        return
    message = f"{name} is not reachable on 127.0.0.1"
    if IN_CI:
        pytest.fail(f"{message}; under CI=true every integration test is mandatory")
    pytest.skip(f"{message} (start it to run this test)")


@dataclass
class Clock:
    """An injectable clock for `StateStore(clock=...)`: tests move time instead of sleeping."""

    now: float = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now
