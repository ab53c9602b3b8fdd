"""Fixtures of the middleware tests: a fast policy and a harness (middleware_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from middleware_harness import Harness, make_harness

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
    made = make_harness(sqlite_url, policy_file)
    yield made
    made.worker.stop()
    made.broker.close()


@pytest.fixture
def setup(store_url: str, policy_file: Path) -> Iterator[Harness]:
    """A harness on each store (SQLite, PostgreSQL), without metrics or JSON logs."""
    made = make_harness(store_url, policy_file, metrics=False, json_logs=False)
    yield made
    made.close()
