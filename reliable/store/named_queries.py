"""The features' named queries (limits, schedules, queue pauses, workflows) run through a unit of work.

reliable/store/unit_of_work.py states what a unit guarantees; these are the store's doors to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from .registration import Registrations
from .unit_of_work import Row, UnitOfWork, begin, single

__all__ = ["NamedQueries"]


class NamedQueries(Registrations):
    """A unit of work (named queries and registrations committed together), or one named query alone."""

    @contextlib.contextmanager
    def transaction(self) -> Iterator[UnitOfWork]:
        """A unit of work: the block's named queries and registrations commit together (or roll
        back on an exception); registered jobs' events reach the listeners after the commit.
        One pooled connection for the block; SQLite: BEGIN IMMEDIATE under the writer lock."""
        self.check_schema()
        with begin(self._sql, self._register_in, self._emit_registered) as unit:
            yield unit

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        """Execute the named query `name` alone (PostgreSQL: autocommit, one round trip)."""
        self.check_schema()
        with single(self._sql) as unit:
            unit.run(name, params)

    def rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Execute the named query `name` alone; every row it returns."""
        self.check_schema()
        with single(self._sql) as unit:
            return unit.rows(name, params)

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """Execute the named query `name` alone; its first row (None: it returned none)."""
        self.check_schema()
        with single(self._sql) as unit:
            return unit.one(name, params)
