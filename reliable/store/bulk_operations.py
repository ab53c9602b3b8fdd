"""The bulk operations' table, `reliable_operations`, and the jobs an operation counts
(`reliable.operations.Operations` keeps the rules: who may preview, confirm and cancel, and the run).

Every status change is conditional on the row's current status (and, when settling a stale row, on
its `updated_at`): the functions that change one say whether they won.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import Row, literal, select, update

from ..inputs import storable
from .core import StoreCore
from .reads import Reads
from .records import home_queue_of
from .schema import jobs, operations
from .selection import JobFilter, Reader, count_jobs

__all__ = [
    "ENDED_OPERATION_STATUSES", "OPERATION_COLUMNS", "cancel_preview", "cancel_requested", "confirm_token_hash",
    "count_to_act_on", "insert_operation",
    "jobs_to_act_on", "mark_operation", "operation_row", "recent_operation_rows", "request_cancel",
    "start_operation", "write_progress",
]

#: The statuses of an operation nothing more will happen to (retention may delete it).
ENDED_OPERATION_STATUSES: tuple[str, ...] = ("refused", "expired", "finished", "cancelled", "failed", "interrupted")

#: The columns of an operation's row.
OPERATION_COLUMNS: tuple[str, ...] = tuple(c.name for c in operations.c)

_BATCH = 500  # rows read at a time when a reader's scope is judged on each


def _acting_rows(store: StoreCore, flt: JobFilter, reader: Reader, now: float,
                 limit: int | None) -> Iterator[Any]:
    """The rows `flt` matches for `reader` that it may act on, least recently updated first.

    Its scope (`Reader.covers`) is judged by each job's home queue, which its message names, so the
    rows of a scoped reader are read in batches and judged here; the others are limited in SQL.
    """
    stmt = (select(jobs.c.job_id, jobs.c.status, jobs.c.queue, jobs.c.message, jobs.c.owner)
            .where(*flt.conditions(now, reader)).order_by(jobs.c.updated_at, jobs.c.job_id))
    with store.read() as conn:
        if reader.scope is None:
            yield from conn.execute(stmt if limit is None else stmt.limit(limit)).all()
            return
        kept = 0
        with conn.execution_options(yield_per=_BATCH).execute(stmt) as rows:
            for row in rows:
                if limit is not None and kept >= limit:
                    return
                if reader.covers(home_queue_of(row.queue, row.message), row.owner):
                    kept += 1
                    yield row


def jobs_to_act_on(store: StoreCore, flt: JobFilter, *, reader: Reader, now: float, limit: int) -> list[Any]:
    """The jobs `flt` matches at `now` that `reader` may act on (its scope: `Reader.covers`), as
    (job_id, status, queue, message, owner), least recently updated first, at most `limit`.
    NotAuthorized when `flt` searches arguments and `reader` may not (`Reader.check`)."""
    return list(_acting_rows(store, flt, reader, now, limit))


def count_to_act_on(store: Reads, flt: JobFilter, *, reader: Reader, now: float) -> int:
    """How many jobs `jobs_to_act_on` would find without a limit."""
    if reader.scope is None:
        return count_jobs(store, flt, reader=reader)
    return sum(1 for _ in _acting_rows(store, flt, reader, now, None))


def insert_operation(store: StoreCore, row: Mapping[str, Any]) -> None:
    """Insert one operation row."""
    with store.write() as conn:
        conn.execute(operations.insert().values(**row))


def operation_row(store: StoreCore, operation_id: str) -> Row[Any] | None:
    """The operation's row, or None."""
    with store.read() as conn:
        return conn.execute(select(operations).where(operations.c.operation_id == operation_id)).first()


def recent_operation_rows(store: StoreCore, *, limit: int) -> list[Row[Any]]:
    """The most recent operations' rows, newest first, with `job_ids` and `results` read as `[]`
    (a listing: those grow with the operation)."""
    summary = [literal("[]").label(c.name) if c.name in ("job_ids", "results") else c for c in operations.c]
    with store.read() as conn:
        return list(conn.execute(select(*summary).order_by(operations.c.created_at.desc(),
                                                           operations.c.operation_id).limit(limit)).all())


def mark_operation(store: StoreCore, operation_id: str, *, was: str, updated_at: float | None, status: str,
                   error: str, at: float) -> None:
    """End the operation as `status` (expired, interrupted) if it is still `was`, last updated at
    `updated_at`: a run that wrote progress meanwhile is left alone."""
    with store.write() as conn:
        conn.execute(update(operations).where(operations.c.operation_id == operation_id,
                                              operations.c.status == was,
                                              operations.c.updated_at == updated_at)
                     .values(status=status, error=storable(error), finished_at=at, confirm_token_hash=None))


def confirm_token_hash(store: StoreCore, operation_id: str) -> str | None:
    """The stored hash of the operation's confirmation token (None once confirmed or ended)."""
    with store.read() as conn:
        found: str | None = conn.execute(select(operations.c.confirm_token_hash)
                                         .where(operations.c.operation_id == operation_id)).scalar_one()
    return found


def start_operation(store: StoreCore, operation_id: str, *, at: float, by: str, counts: str) -> bool:
    """Confirmed by `by` at `at`: `running` if it awaited confirmation and had not expired; whether it won."""
    with store.write() as conn:
        won = conn.execute(update(operations).where(
            operations.c.operation_id == operation_id, operations.c.status == "awaiting_confirmation",
            operations.c.expires_at > at).values(
            status="running", confirmed_at=at, confirmed_by=by, updated_at=at, confirm_token_hash=None,
            counts=counts)).rowcount
    return bool(won == 1)


def cancel_preview(store: StoreCore, operation_id: str, *, was: str, by: str, at: float) -> bool:
    """Cancel an operation still `was` (a preview) at once; whether it won."""
    with store.write() as conn:
        return bool(conn.execute(update(operations).where(
            operations.c.operation_id == operation_id, operations.c.status == was).values(
            status="cancelled", cancel_requested=True, cancelled_by=by, finished_at=at,
            confirm_token_hash=None)).rowcount)


def request_cancel(store: StoreCore, operation_id: str, *, by: str) -> bool:
    """Ask a running operation to stop before its next job; False when it is not running or was asked already."""
    with store.write() as conn:
        return bool(conn.execute(update(operations).where(
            operations.c.operation_id == operation_id, operations.c.status == "running",
            operations.c.cancel_requested.is_(False)).values(cancel_requested=True, cancelled_by=by)).rowcount)


def cancel_requested(store: StoreCore, operation_id: str) -> bool:
    """Whether someone asked the operation to stop."""
    with store.read() as conn:
        return bool(conn.execute(select(operations.c.cancel_requested)
                                 .where(operations.c.operation_id == operation_id)).scalar_one())


def write_progress(store: StoreCore, operation_id: str, values: Mapping[str, Any]) -> bool:
    """Write `values` (progress, and the final status) on a `running` operation; False when it is no longer.
    An `error` (an exception's text) is made storable first (`inputs.storable`)."""
    if values.get("error") is not None:
        values = {**values, "error": storable(values["error"])}
    with store.write() as conn:
        return bool(conn.execute(update(operations).where(operations.c.operation_id == operation_id,
                                                          operations.c.status == "running")
                                 .values(**values)).rowcount)
