"""Fixtures of the store suite: a store on each database whose clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reliable.store import StateStore

from support import Clock, scratch_database


@pytest.fixture
def clocked(store_url: str) -> Iterator[tuple[StateStore, Clock]]:
    """A store on each supported database with an injected clock: tests move time, never sleep."""
    clock = Clock()
    store = StateStore(store_url, clock=clock)
    yield store, clock
    store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of its own on each dialect (for tests whose migrations change its schema)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    with scratch_database("reliable_fresh_") as url:
        yield url
