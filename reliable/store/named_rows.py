"""Named queries with named rows: how the store's typed query modules call the unit of work.

A feature never names a query by string nor reads a row by position: it calls a typed function of
a store module (limit_queries, schedule_queries, pause_queries), which runs its `Query` or
`Statement` on an `Executor` (a `StateStore` for one statement alone, a `UnitOfWork` inside
`store.transaction()`) and returns rows as frozen dataclasses:

    _LOCK = Query("lock_schedule", LockedSchedule)      # fields = the query's columns, in order

    def lock(executor: Executor, name: str) -> LockedSchedule | None:
        return _LOCK.one(executor, {"name": name})

A row dataclass's fields are its query's columns, by name and in the SELECT / RETURNING order, on
every dialect that has the query: tests/store/test_named_rows.py runs every `Query` declared in
reliable/store/ on SQLite and PostgreSQL and compares the cursor's column names with the fields,
so a reordered or renamed column fails there, not as a silent wrong read. Building a row is one
positional call (no per-row name lookup): nothing is added on the hot path but the object itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .unit_of_work import Row

__all__ = ["Executor", "Query", "Statement"]

R = TypeVar("R")


class Executor(Protocol):
    """Where a named query runs: `StateStore` (one statement alone) or `UnitOfWork` (in its transaction)."""

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        """Execute the named query `name`, its rows (if any) ignored."""

    def rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Execute the named query `name`; every row it returns."""

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """Execute the named query `name`; its first row, or None."""


@dataclass(frozen=True)
class Query(Generic[R]):
    """A named query whose rows are `row` instances: a dataclass whose fields are the query's
    columns in order (checked on both dialects by tests/store/test_named_rows.py)."""

    name: str
    row: Callable[..., R]

    def one(self, executor: Executor, params: Mapping[str, Any] | None = None) -> R | None:
        """The query's first row (None: it returned none)."""
        found = executor.one(self.name, params)
        return None if found is None else self.row(*found)

    def all(self, executor: Executor, params: Mapping[str, Any] | None = None) -> list[R]:
        """Every row the query returns, in its order."""
        make = self.row
        return [make(*found) for found in executor.rows(self.name, params)]


@dataclass(frozen=True)
class Statement:
    """A named query run for its effect; any row it returns is ignored."""

    name: str

    def run(self, executor: Executor, params: Mapping[str, Any] | None = None) -> None:
        """Execute the statement."""
        executor.run(self.name, params)
