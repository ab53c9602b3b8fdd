"""Fixtures of the schedules suite: a store on each database with a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from schedules_support import T0

from reliable.store import StateStore

from support import Clock


@pytest.fixture
def clocked(store_url: str) -> Iterator[tuple[StateStore, Clock]]:
    """A store on each supported database whose clock starts at T0: tests move time, never sleep."""
    clock = Clock(T0)
    store = StateStore(store_url, clock=clock)
    yield store, clock
    store.close()
