"""Helpers shared by the tests (importable as `support`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
import socket

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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_service(name: str, available: bool, *, problem: str = "is not reachable on 127.0.0.1") -> None:
    """Skip (locally) or fail (CI) when a real service (or a tool) the test needs is absent."""
    if available:
        return
    message = f"{name} {problem}"
    if IN_CI:
        pytest.fail(f"{message}; under CI=true every integration test is mandatory")
    pytest.skip(f"{message} (start it to run this test)")
