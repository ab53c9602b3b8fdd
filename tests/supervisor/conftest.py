"""Fixtures for `reliable worker` tests: its env (own queue, PostgreSQL store), a producer, started supervisors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from supervised import Supervised


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    """Start `reliable worker APP ARGS...` with an env (APP: supervised_app unless `app=`); every one started is
    stopped after the test."""
    started: list[Supervised] = []

    def start(env: dict[str, str], *args: str, app: str = "supervised_app") -> Supervised:
        supervised = Supervised(env, tmp_path / f"supervisor-{len(started)}.log", *args, app=app)
        started.append(supervised)
        return supervised

    yield start
    for supervised in started:
        supervised.close()
