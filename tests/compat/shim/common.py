"""Helpers Dramatiq's test modules import as `tests.common`.

Dramatiq's sdist ships its test modules without their conftest and helpers; this module and
`conftest.py` beside it are reliable's own implementation of what those modules import and ask for.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest
from dramatiq import Worker
from dramatiq.threading import is_gevent_active

RABBITMQ_USERNAME = os.getenv("RABBITMQ_USERNAME", "guest")
RABBITMQ_PASSWORD = os.getenv("RABBITMQ_PASSWORD", "guest")
RABBITMQ_CREDENTIALS = pika.credentials.PlainCredentials(RABBITMQ_USERNAME, RABBITMQ_PASSWORD)

skip_in_ci = pytest.mark.skipif(os.getenv("CI") in ("1", "true"), reason="Dramatiq skips this test in CI (timing)")
skip_on_windows = pytest.mark.skipif(platform.system() == "Windows", reason="not supported on Windows")
skip_on_pypy = pytest.mark.skipif(platform.python_implementation() == "PyPy", reason="not supported on PyPy")
skip_with_gevent = pytest.mark.skipif(is_gevent_active(), reason="not supported with gevent")
skip_without_gevent = pytest.mark.skipif(not is_gevent_active(), reason="needs gevent")
skip_unless_rabbit_mq = pytest.mark.skipif(False, reason="RabbitMQ is required by this suite")


@contextmanager
def worker(*args: Any, **kwargs: Any) -> Iterator[Worker]:
    """A started Dramatiq worker, stopped on exit."""
    started = Worker(*args, **kwargs)
    started.start()
    try:
        yield started
    finally:
        started.stop()
