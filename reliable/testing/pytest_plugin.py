"""pytest fixtures for an app's tests (reliable.testing): enable with, in the top conftest.py,

    pytest_plugins = ["reliable.testing.pytest_plugin"]

Only this module imports pytest: reliable never needs it at run time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..store import StateStore
from . import sqlite_store_url

__all__ = ["reliable_store", "reliable_store_url"]


@pytest.fixture
def reliable_store_url(tmp_path: Path) -> str:
    """A migrated SQLite store of this test's own (in its tmp_path); its URL, for `reliable.install`."""
    return sqlite_store_url(tmp_path)


@pytest.fixture
def reliable_store(reliable_store_url: str) -> Iterator[StateStore]:
    """A StateStore on `reliable_store_url`, closed after the test."""
    store = StateStore(reliable_store_url)
    yield store
    store.close()
