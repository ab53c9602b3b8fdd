"""A StubBroker + SQLite (or PostgreSQL) harness with reliable installed and a real Worker."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

import reliable
from reliable.store import StateStore

FAST_POLICY = """\
version: 1
lease:
  ttl: 2s
  heartbeat_interval: 200ms
  recovery_interval: 200ms
  sweep_after: 1s
  retry_grace: 500ms
defaults:
  max_attempts: 3
  backoff: {base: 50ms, cap: 200ms}
rules:
  - {name: timeouts, exception: TimeoutError, class: transient}
  - {name: permission, exception: PermissionError, class: authorization}
  - {name: bad-values, exception: [ValueError, TypeError], class: invalid_input}
  - {name: http-429, status: 429, class: rate_limited}
  - {name: ambiguous, exception: ConnectionResetError, class: side_effect_unknown}
"""


@dataclass
class Harness:
    """A broker with reliable installed, its store, and a started worker."""

    broker: StubBroker
    store: StateStore
    middleware: reliable.ReliableMiddleware
    worker: Worker

    def join(self, queue: str = "default") -> None:
        """Wait until the queue (and its delay queue) is drained and the workers are idle."""
        self.broker.join(queue, fail_fast=False)
        self.worker.join()


@pytest.fixture
def policy_file(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """FAST_POLICY; parametrized indirectly with a dict, that dict is the policy's `defaults.rate_limit`."""
    path = tmp_path / "policy.yaml"
    rate_limit = getattr(request, "param", None)
    text = FAST_POLICY
    if rate_limit:
        text = text.replace("  max_attempts: 3\n", "  max_attempts: 3\n  rate_limit: "
                            + "{" + ", ".join(f"{k}: {v}" for k, v in rate_limit.items()) + "}\n")
    path.write_text(text)
    return path


@pytest.fixture
def harness(sqlite_url: str, policy_file: Path) -> Iterator[Harness]:
    broker = StubBroker()
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    middleware = reliable.install(broker, store=sqlite_url, policies=policy_file, recovery=False)
    worker = Worker(broker, worker_timeout=50, worker_threads=4)
    h = Harness(broker, middleware.store, middleware, worker)
    yield h
    worker.stop()
    broker.close()
