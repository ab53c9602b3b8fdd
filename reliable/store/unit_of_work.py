"""The store's public unit of work: named queries and job registrations that commit together.

Features (workflows, schedules, limits, queue pauses) reach reliable's tables only through it, the
way every River service reaches its database through `riverdriver.Executor`: the SQL is the store's
named queries (reliable/store/sql/<dialect>.sql), run by its `SqlRunner`; this module adds no
statement of its own. A feature never names a query itself: it calls the typed function of a
store query module (limit_queries, schedule_queries, pause_queries; see named_rows.py), which runs
the query on the unit, or on the store for one statement alone, and returns rows with named fields.

    with store.transaction() as unit:          # one transaction, one pooled connection
        row = schedule_queries.lock(unit, name) # -> LockedSchedule | None
        unit.register([job])                    # PENDING jobs, in the same transaction
    # committed: the jobs' `enqueued` events are now given to the store's listeners

    limit_queries.bind_slot(store, ...)         # one statement on its own

Guarantees:
- `store.transaction()`: every statement and registration of the block commits when it exits, or
  none does (an exception rolls back and propagates). One connection is checked out of the store's
  pool for the block and returned after it.
- SQLite: the block is one BEGIN IMMEDIATE transaction under the file's in-process writer lock
  (writers take turns); its time is read once at BEGIN and every statement shares it.
- PostgreSQL: the statements run in one transaction; `:now` is the database's clock per statement
  until the unit's time is fixed (`now()` reads it once, `use_now()` sets it), then that time for
  every later statement (an injected clock fixes it from the start).
- Registrations' `enqueued` events reach the listeners after the commit, never on a rollback.
- `store.run/rows/one`: one statement alone: on PostgreSQL in autocommit (one round trip, one
  pool checkout, nothing held after); on SQLite a transaction of its own under the writer lock.
- A query name the dialect does not have, or a parameter the query needs and was not given, is a
  NamedQueryError before anything is sent. A list parameter is an array on PostgreSQL and JSON
  text (for `json_each`) on SQLite. `now` is always filled in by the store.
- Nothing is added on the way: a single statement is the runner's one statement and one pool
  checkout, as when features used the runner directly (on PostgreSQL the parameters go to the
  driver as given; the check of their names is one set comparison).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import NamedQueryError
from .records import NewJob
from .sqlrunner import SqlRunner, Tx, load_queries

__all__ = ["Row", "UnitOfWork", "begin", "needed_params", "single"]

#: One result row, its columns in the query's SELECT / RETURNING order.
Row = tuple[Any, ...]
#: (job rows, `enqueued` event rows) of one registration, emitted after the commit.
Registered = tuple[list[dict[str, Any]], list[dict[str, Any]]]
RegisterJobs = Callable[[Tx, Sequence[NewJob]], Registered]
EmitRegistered = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], None]

_PARAM = {"postgresql": re.compile(r"%\((\w+)\)s"), "sqlite": re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")}


@functools.cache
def needed_params(dialect: str, name: str) -> frozenset[str]:
    """The parameters the named query `name` of `dialect` takes (`now` among them when it uses it);
    NamedQueryError when the dialect has no such query."""
    queries = load_queries(dialect)
    if name not in queries:
        close = difflib.get_close_matches(name, list(queries), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise NamedQueryError(f"the store has no named query {name!r} in {dialect}.sql{hint}")
    return frozenset(_PARAM[dialect].findall(queries[name]))


@functools.cache
def _required(dialect: str) -> dict[str, frozenset[str]]:
    """Per query of `dialect`, the parameters a caller must give (all but `now`): looked up per statement."""
    return {name: needed_params(dialect, name) - {"now"} for name in load_queries(dialect)}


class UnitOfWork:
    """Named queries and registrations inside one transaction of the store (see the module's
    docstring for what commits when). Made by `StateStore.transaction()`, never directly."""

    __slots__ = ("_register_jobs", "_registered", "_required", "_runner", "_tx")

    def __init__(self, runner: SqlRunner, tx: Tx, register_jobs: RegisterJobs) -> None:
        self._runner = runner
        self._required = _required(runner.dialect)
        self._tx = tx
        self._register_jobs = register_jobs
        self._registered: list[Registered] = []

    @property
    def dialect(self) -> str:
        """The store's dialect: "postgresql" or "sqlite"."""
        return self._runner.dialect

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> None:
        """Execute the named query `name` with `params`, its rows (if any) ignored."""
        self._execute(name, params)

    def rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Execute the named query `name` with `params`; every row it returns."""
        return [tuple(row) for row in self._execute(name, params).fetchall()]

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """Execute the named query `name` with `params`; its first row, or None when it returned none."""
        row = self._execute(name, params).fetchone()
        return None if row is None else tuple(row)

    def register(self, new_jobs: Sequence[NewJob]) -> int:
        """Register `new_jobs` PENDING in this transaction (a job id that exists is left alone, as
        `StateStore.register_many`); their `enqueued` events reach the listeners after the commit.
        Returns how many were new."""
        if not new_jobs:
            return 0
        rows, events = self._register_jobs(self._tx, new_jobs)
        self._registered.append((rows, events))
        return len(events)

    def now(self) -> float:
        """The unit's time (epoch seconds), fixed on the first call: on PostgreSQL without an
        injected clock that call reads the database's clock (one statement). Every later statement
        gets it as `:now`."""
        if self._tx.now is None:
            self._tx.now = self._runner.resolve_now(self._tx)
        return self._tx.now

    def use_now(self, at: float) -> None:
        """Fix the unit's time to `at` (a time a statement of this unit read from the database,
        which saves the statement `now()` would run): every later statement gets it as `:now`."""
        self._tx.now = at

    def _execute(self, name: str, params: Mapping[str, Any] | None) -> Any:
        runner = self._runner
        given: Mapping[str, Any] = {} if params is None else params
        required = self._required.get(name)
        if required is None or not given.keys() >= required:
            missing = needed_params(runner.dialect, name) - given.keys() - {"now"}  # unknown: raises here
            raise NamedQueryError(f"named query {name!r} needs the parameters {sorted(missing)}")
        if runner.dialect == "sqlite" and any(type(value) is list for value in given.values()):
            given = {key: runner.array(value) if type(value) is list else value for key, value in given.items()}
        return runner.execute(self._tx, name, given)

    def emit_registered(self, emit: EmitRegistered) -> None:
        """Give the jobs this unit registered, with their events, to `emit` (after the commit)."""
        for rows, events in self._registered:
            emit(rows, events)


@contextmanager
def begin(runner: SqlRunner, register_jobs: RegisterJobs, emit: EmitRegistered) -> Iterator[UnitOfWork]:
    """A unit of work in one transaction of `runner`; its registrations given to `emit` after the
    commit (never after a rollback)."""
    with runner.transaction() as tx:
        unit = UnitOfWork(runner, tx, register_jobs)
        yield unit
    unit.emit_registered(emit)


def _not_alone(tx: Tx, new_jobs: Sequence[NewJob]) -> Registered:
    raise TypeError("jobs are registered in store.transaction() (or by store.register_many), "
                    "not in a single statement")


@contextmanager
def single(runner: SqlRunner) -> Iterator[UnitOfWork]:
    """A unit of work for ONE statement: autocommit on PostgreSQL (one round trip), a transaction
    of its own on SQLite. It registers no job (`begin` does)."""
    with runner.single() as tx:
        yield UnitOfWork(runner, tx, _not_alone)
