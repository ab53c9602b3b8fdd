"""A failed attempt's event carries its traceback (chained causes, secrets masked, bounded); a success none.

On both databases, and on PostgreSQL with and without group commit (the worker's default there).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest

from reliable.states import JobStatus
from reliable.tracebacks import MAX_TRACEBACK

from middleware_harness import Harness, make_harness


@pytest.fixture(params=["sqlite", "postgresql", "postgresql-group-commit"])
def traced(request: pytest.FixtureRequest, tmp_path: Path, policy_file: Path) -> Iterator[Harness]:
    """A harness on each database; on PostgreSQL with group commit on (the default) and off."""
    # The session's PostgreSQL database as it is: the jobs' ids are new, nothing else is read.
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_database")
    made = make_harness(url, policy_file, group_commit=request.param == "postgresql-group-commit")
    made.param = request.param  # type: ignore[attr-defined]
    yield made
    made.close()


def _connect(account: str) -> None:
    try:
        raise ConnectionRefusedError(f"postgresql://app:hunter2@db.internal/{account} refused")
    except OSError as exc:
        raise ValueError(f"could not load account {account} (api_key=sk-live-123)") from exc


def _deep(n: int, message: str) -> None:
    if n == 0:
        raise TimeoutError(message)
    _deeper(n - 1, message)


def _deeper(n: int, message: str) -> None:  # two functions: Python collapses only repeated identical frames
    _deep(n, message)


def test_failed_attempts_store_a_masked_bounded_traceback(traced: Harness) -> None:
    @dramatiq.actor(max_retries=0)
    def load(account: str) -> None:
        _connect(account)

    @dramatiq.actor
    def slow(depth: int) -> None:
        _deep(depth, "token=abc-secret upstream said no")

    @dramatiq.actor
    def fine() -> None:
        pass

    failed, retried, succeeded = load.send("acme"), slow.send(300), fine.send()
    traced.run()
    group = traced.store.group_commit_stats()
    assert (group is not None and group[1] > 0) is (traced.param == "postgresql-group-commit")  # type: ignore[attr-defined]

    assert traced.store.get(failed.message_id).status is JobStatus.FAILED
    events = {e.event: e for e in traced.store.events(failed.message_id)}
    text = events["fail"].traceback
    assert text is not None
    assert "ConnectionRefusedError: postgresql://app:***@db.internal/acme refused" in text
    assert "The above exception was the direct cause of the following exception" in text
    assert text.rstrip().endswith("ValueError: could not load account acme (api_key=***)")
    assert "hunter2" not in text and "sk-live-123" not in text
    assert events["fail"].error_message == "could not load account acme (api_key=***)"
    assert events["claim"].traceback is None and events["enqueued"].traceback is None

    # Transient: retried twice, then dead-lettered (max_attempts 3): every failed attempt has its own.
    history = traced.store.events(retried.message_id)
    failures = [e for e in history if e.event in ("retry_scheduled", "dead_letter")]
    assert [e.event for e in failures] == ["retry_scheduled", "retry_scheduled", "dead_letter"]
    for event in failures:
        assert event.traceback is not None and len(event.traceback) <= MAX_TRACEBACK
        assert "characters cut] ..." in event.traceback
        assert event.traceback.startswith("Traceback (most recent call last):")
        assert "TimeoutError: token=*** upstream said no" in event.traceback
        assert "abc-secret" not in event.traceback
    assert len({e.attempt_id for e in failures}) == 3

    assert all(e.traceback is None for e in traced.store.events(succeeded.message_id))
