"""Fixtures of the limits suite: a store on each database whose clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reliable.store import StateStore

from support import Clock


@pytest.fixture
def clocked(store_url: str) -> Iterator[tuple[StateStore, Clock]]:
    """A store on each supported database with an injected clock: tests move time, never sleep."""
    clock = Clock()
    store = StateStore(store_url, clock=clock)
    yield store, clock
    store.close()
