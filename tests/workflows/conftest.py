"""Fixtures of the workflow tests: a StubBroker + real worker harness on SQLite or PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from middleware_harness import Harness, make_harness

POLICY = """\
version: 1
lease:
  ttl: 2s
  heartbeat_interval: 200ms
  recovery_interval: 200ms
  sweep_after: 1s
  retry_grace: 500ms
defaults:
  max_attempts: 2
  backoff: {base: 20ms, cap: 50ms}
rules:
  - {name: timeouts, exception: TimeoutError, class: transient}
  - {name: bad-values, exception: [ValueError, TypeError], class: invalid_input}
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def harness(store_url: str, policy_file: Path) -> Iterator[Harness]:
    """A StubBroker with reliable installed on SQLite and on PostgreSQL, and a worker (not started)."""
    made = make_harness(store_url, policy_file, threads=4)
    yield made
    made.worker.stop()
    made.broker.close()
    made.store.close()
