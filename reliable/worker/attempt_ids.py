"""Attempt ids: unique across processes and restarts, without a random draw per id."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

__all__ = ["new_attempt_id"]


class _AttemptIds:
    """Attempt ids: this process's 64 random bits, then a counter (32 hex digits in all, unique
    across processes and restarts without a random draw per id). `os.urandom` per id released
    the GIL for its system call, and under 32 threads each release was a thread switch; a seeded
    `random` is not used because an application may seed the shared generator (ids would repeat)."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: tuple[str, Iterator[int]] | None = None
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._state = None  # a forked child draws its own prefix

    def __call__(self) -> str:
        state = self._state
        if state is None:  # two threads racing here each use their own prefix and counter: still unique
            state = self._state = (os.urandom(8).hex(), itertools.count())
        return f"{state[0]}{next(state[1]):016x}"


#: A new attempt id (see `_AttemptIds`).
new_attempt_id = _AttemptIds()
