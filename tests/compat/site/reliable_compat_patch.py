"""Install reliable on every Dramatiq broker a process builds (the compatibility run's one change).

`apply()` wraps the constructors of Dramatiq's brokers so that, once the outermost constructor has
returned, `reliable.install(broker, store=$RELIABLE_COMPAT_STORE_URL)` runs: the test modules, their
fixtures and the `dramatiq` CLI processes they start all get reliable exactly as a user's app would,
with nothing else changed. `sitecustomize.py` beside this file calls `apply()` in every Python
process of the run (pytest, its xdist workers and the CLI subprocesses).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

STORE_URL = "RELIABLE_COMPAT_STORE_URL"
_nesting = threading.local()
_applied = False


def broker_classes() -> list[type]:
    """The Dramatiq broker classes a test can build: stub, RabbitMQ and Redis (when importable)."""
    from dramatiq.brokers.rabbitmq import RabbitmqBroker
    from dramatiq.brokers.stub import StubBroker

    classes: list[type] = [StubBroker, RabbitmqBroker]
    try:
        from dramatiq.brokers.redis import RedisBroker
    except ImportError:  # the redis client is optional for Dramatiq and for this run
        return classes
    return [*classes, RedisBroker]


def install_on(broker: Any) -> None:
    """Install reliable on `broker` with this test's store."""
    import reliable

    url = os.environ.get(STORE_URL)
    if not url:
        raise RuntimeError(f"{STORE_URL} is not set: the compatibility plugin gives each test a store")
    reliable.install(broker, store=url, json_logs=False)
    broker.reliable_compat_store_url = url


def _wrap(cls: type) -> None:
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        depth = getattr(_nesting, "depth", 0)
        _nesting.depth = depth + 1
        try:
            original(self, *args, **kwargs)
        finally:
            _nesting.depth = depth
        if depth == 0:  # a subclass's constructor calls its base's: install once, when the outermost returns
            install_on(self)

    cls.__init__ = __init__  # type: ignore[misc]


def apply() -> None:
    """Wrap every broker class once per process."""
    global _applied
    if _applied:
        return
    _applied = True
    for cls in broker_classes():
        _wrap(cls)
