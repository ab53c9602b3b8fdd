"""The worker's hot path (claim, finish, checkpoint, heartbeat) as hand-written SQL.

These run once or more per job, so they bypass SQLAlchemy's statement building and run on raw
DB-API connections drawn from the store's pool, one checkout per statement (autocommit on
PostgreSQL while held). On PostgreSQL each is ONE statement (one round
trip): a CTE that updates the job, inserts the event row (and the attempt row) and returns the
job. On SQLite the same steps run in one BEGIN IMMEDIATE transaction (no network, so several
statements cost little). The SQL is data; the guards mirror `reliable.states.TRANSITIONS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ..errors import StoreError, StoreNotMigrated, StoreUnavailable
from .db import pool_exhausted, sqlite_writer_lock
from .schema import job_events, jobs

__all__ = ["HotPath"]

JOB_COLUMNS = [c.name for c in jobs.c]
EVENT_COLUMNS = [c.name for c in job_events.c if c.name != "id"]

_PG_NOW = "(extract(epoch from clock_timestamp())::float8)"
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"

# Event columns filled from the job row `j` (PostgreSQL CTEs) — the rest come from parameters.
_EVENT_FROM_JOB = {
    "job_id": "j.job_id", "at": "j.updated_at", "from_status": "j.previous_status",
    "to_status": "j.status", "version": "j.version", "attempt": "j.attempt",
    "attempt_id": "j.attempt_id", "lease_id": "j.lease_id", "worker_id": "j.worker_id",
    "queue": "j.queue", "actor": "j.actor", "workflow_id": "j.workflow_id", "trace_id": "j.trace_id",
    "retry_count": "j.retry_count", "checkpoint": "j.checkpoint",
}
_EVENT_FROM_PARAMS = {
    "event": ":event", "error_class": ":error_class", "error_type": ":error_type",
    "error_message": ":error_message", "operator": "NULL", "reason": "NULL", "host": "NULL",
    "detail": ":detail",
}


def _event_select() -> str:
    exprs = {**_EVENT_FROM_JOB, **_EVENT_FROM_PARAMS}
    return ", ".join(exprs[name] for name in EVENT_COLUMNS)


_EVENT_INSERT = f"INSERT INTO reliable_job_events ({', '.join(EVENT_COLUMNS)}) SELECT {_event_select()} FROM j"

_CLAIM_SET = """
    status = 'RUNNING', previous_status = status, version = version + 1,
    lease_id = lease_id + 1, worker_id = :worker_id, lease_expires_at = {now} + :ttl,
    attempt = attempt + 1, attempt_id = :attempt_id, started_at = {now}, retry_at = NULL,
    pause_requested = FALSE, stop_requested = FALSE, cancel_requested = FALSE,
    stop_requested_at = NULL, updated_at = {now}
"""
_CLAIM_WHERE = "job_id = :job_id AND (status = 'PENDING' OR (status = 'RETRY_WAIT' AND retry_at <= {now}))"

# :finished, :retry_delay (NULL unless retrying), :clear_flags, the error fields
_FINISH_SET = """
    status = :to_status, previous_status = status, version = version + 1, lease_expires_at = NULL,
    finished_at = CASE WHEN :finished THEN {now} ELSE finished_at END,
    retry_at = CASE WHEN :retry_delay IS NULL THEN retry_at ELSE {now} + :retry_delay END,
    scheduled_at = CASE WHEN :retry_delay IS NULL THEN scheduled_at ELSE {now} + :retry_delay END,
    dispatched_at = CASE WHEN :retry_delay IS NULL THEN dispatched_at ELSE {now} END,
    retry_count = retry_count + :retry_increment,
    last_error_class = CASE WHEN :has_error THEN :error_class ELSE last_error_class END,
    last_error_type = CASE WHEN :has_error THEN :error_type ELSE last_error_type END,
    last_error_message = CASE WHEN :has_error THEN :error_message ELSE last_error_message END,
    pause_requested = FALSE, stop_requested = FALSE, cancel_requested = FALSE,
    updated_at = {now}
"""
_FINISH_WHERE = "job_id = :job_id AND lease_id = :lease_id AND status IN (:source_a, :source_b)"
_ATTEMPT_END = """UPDATE reliable_attempts SET ended_at = {now}, outcome = :event,
    error_class = :error_class, error_type = :error_type, error_message = :error_message
    WHERE attempt_id = {attempt_id} AND ended_at IS NULL"""

_CHECKPOINT_SET = """checkpoint = :checkpoint, checkpoint_version = checkpoint_version + 1,
    checkpoint_at = {now}, lease_expires_at = {now} + :ttl, updated_at = {now}"""
_CHECKPOINT_WHERE = "job_id = :job_id AND lease_id = :lease_id AND status IN ('RUNNING', 'STOPPING')"

LEASE_COLUMNS = ["job_id", "lease_id", "status", "pause_requested", "stop_requested", "cancel_requested",
                 "lease_expires_at", "stop_requested_at"]
_LEASE_RETURNING = ", ".join(LEASE_COLUMNS)
# Explicit column lists (never `*`): rows are zipped with these names, without asking the driver
# to build a description per statement (that alone was ~40% of the hot path's client CPU).
_JOB_SELECT = ", ".join(JOB_COLUMNS)
_ATTEMPT_INSERT_COLUMNS = ("attempt_id, job_id, attempt, lease_id, worker_id, started_at, "
                           "checkpoint_version_start")


def _pg(sql: str) -> str:
    """Named parameters in psycopg's style; typed so NULLs and booleans bind unambiguously."""
    sql = re.sub(r"\s+", " ", sql.format(now="t.now", attempt_id="(SELECT attempt_id FROM j)")).strip()
    types = {"ttl": "float8", "retry_delay": "float8", "retry_increment": "int4", "finished": "bool",
             "has_error": "bool", "lease_id": "int8", "detail": "text", "error_class": "text",
             "error_type": "text", "error_message": "text", "checkpoint": "text"}

    def param(match: re.Match[str]) -> str:
        name = match.group(1)
        cast = types.get(name)
        return f"%({name})s::{cast}" if cast else f"%({name})s"

    return re.sub(r"(?<![:\w]):(\w+)", param, sql)


def _sqlite(sql: str) -> str:
    return re.sub(r"\s+", " ", sql.format(now=_SQLITE_NOW, attempt_id=":attempt_id")).strip()


_PG_CLAIM = _pg(f"""
WITH t AS (SELECT {_PG_NOW} AS now),
j AS (UPDATE reliable_jobs SET {_CLAIM_SET} FROM t WHERE {_CLAIM_WHERE} RETURNING reliable_jobs.*),
a AS (INSERT INTO reliable_attempts ({_ATTEMPT_INSERT_COLUMNS})
      SELECT attempt_id, job_id, attempt, lease_id, worker_id, started_at, checkpoint_version FROM j),
e AS ({_EVENT_INSERT})
SELECT {_JOB_SELECT} FROM j""")

_PG_FINISH = _pg(f"""
WITH t AS (SELECT {_PG_NOW} AS now),
j AS (UPDATE reliable_jobs SET {_FINISH_SET} FROM t WHERE {_FINISH_WHERE} RETURNING reliable_jobs.*),
a AS ({_ATTEMPT_END}),
e AS ({_EVENT_INSERT})
SELECT {_JOB_SELECT} FROM j""").replace("ended_at = t.now", "ended_at = (SELECT now FROM t)")

_PG_CHECKPOINT = _pg(f"""
WITH t AS (SELECT {_PG_NOW} AS now),
j AS (UPDATE reliable_jobs SET {_CHECKPOINT_SET} FROM t WHERE {_CHECKPOINT_WHERE}
      RETURNING reliable_jobs.*),
e AS ({_EVENT_INSERT.replace("j.previous_status", "j.status")})
SELECT {_LEASE_RETURNING} FROM j""")

_PG_RENEW = (f"UPDATE reliable_jobs SET lease_expires_at = {_PG_NOW} + %(ttl)s::float8, "
             "worker_id = %(worker_id)s WHERE (job_id, lease_id) IN "
             "(SELECT * FROM unnest(%(job_ids)s::text[], %(lease_ids)s::int8[])) "
             f"AND status IN ('RUNNING', 'STOPPING') RETURNING {_LEASE_RETURNING}")

_SQLITE_CLAIM = _sqlite(f"UPDATE reliable_jobs SET {_CLAIM_SET} WHERE {_CLAIM_WHERE} RETURNING {_JOB_SELECT}")
_SQLITE_FINISH = _sqlite(f"UPDATE reliable_jobs SET {_FINISH_SET} WHERE {_FINISH_WHERE} RETURNING {_JOB_SELECT}")
_SQLITE_ATTEMPT_END = _sqlite(_ATTEMPT_END)
_SQLITE_ATTEMPT_INSERT = (f"INSERT INTO reliable_attempts ({_ATTEMPT_INSERT_COLUMNS}) VALUES "
                          "(:attempt_id, :job_id, :attempt, :lease_id, :worker_id, :started_at, "
                          ":checkpoint_version)")
_SQLITE_CHECKPOINT = _sqlite(f"UPDATE reliable_jobs SET {_CHECKPOINT_SET} WHERE {_CHECKPOINT_WHERE} "
                             f"RETURNING {_JOB_SELECT}")
_SQLITE_EVENT_INSERT = (f"INSERT INTO reliable_job_events ({', '.join(EVENT_COLUMNS)}) VALUES "
                        f"({', '.join(':' + c for c in EVENT_COLUMNS)})")


class HotPath:
    """Raw-SQL implementations of the per-job worker writes, for one engine's database."""

    def __init__(self, engine: Engine) -> None:
        self.dialect = engine.dialect.name
        self._url = engine.url
        # The store's one bounded pool: a statement checks a connection out and returns it, so a
        # process never holds more than the store's max_connections (pinning one per thread did).
        self._engine = engine
        self._dbapi = engine.dialect.dbapi

    def dispose(self) -> None:
        """Nothing to close: the connections belong to the store's engine (StateStore.close)."""

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        # One pool checkout per statement. PostgreSQL: the connection runs in autocommit while we
        # hold it (one statement, one round trip; no BEGIN/COMMIT) and goes back in the pool's
        # default mode. SQLite connections are driver-level autocommit already.
        try:
            raw = self._engine.raw_connection()
        except PoolTimeout as exc:
            raise pool_exhausted(self._engine) from exc
        except Exception as exc:
            raise self._translate(exc) from exc
        flip = self.dialect == "postgresql"
        failed: BaseException | None = None
        try:
            if flip:
                raw.driver_connection.autocommit = True  # type: ignore[union-attr]
            cursor = raw.cursor()
            try:
                yield cursor
            finally:
                cursor.close()
        except self._dbapi.Error as exc:  # type: ignore[union-attr]
            failed = exc
            raise self._translate(exc) from exc
        except BaseException as exc:  # e.g. an interrupt landing mid-statement: state unknown
            failed = exc
            raise
        finally:
            self._release(raw, failed, flip)

    def _release(self, raw: Any, failed: BaseException | None, flipped: bool) -> None:
        if failed is not None and self._is_disconnect(failed):
            # Like SQLAlchemy on a disconnect: every connection opened before now is recycled at its
            # next checkout, so one error (not one per pooled connection) reports a restart.
            self._engine.pool._invalidate(raw, failed)
            return
        try:
            if flipped:
                raw.driver_connection.autocommit = False
            raw.close()  # back to the pool
        except Exception:
            raw.invalidate()

    def _is_disconnect(self, exc: BaseException) -> bool:
        return isinstance(exc, self._dbapi.OperationalError)  # type: ignore[union-attr]

    def _translate(self, exc: BaseException) -> Exception:
        text = str(getattr(exc, "orig", None) or exc).strip()
        lowered = text.lower()
        url = self._url.render_as_string(hide_password=True)
        if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
            return StoreNotMigrated(f"the store at {url} has no reliable tables: "
                                    f"run `reliable db upgrade --store {url}`")
        first = text.splitlines()[0] if text else type(exc).__name__
        if self._is_disconnect(exc) or "connection" in lowered:
            return StoreUnavailable(f"cannot use the store at {url}: {first}")
        return StoreError(f"store error at {url}: {first}")

    @staticmethod
    def _row(cursor: Any, names: list[str] = JOB_COLUMNS) -> dict[str, Any] | None:
        row = cursor.fetchone()
        if row is None:
            return None
        return dict(zip(names, row, strict=True))

    @contextmanager
    def _sqlite_transaction(self) -> Iterator[Any]:
        with sqlite_writer_lock(self._engine), self._cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield cursor
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

    # -- statements ------------------------------------------------------------------------------

    def claim(self, job_id: str, worker_id: str, ttl: float, attempt_id: str) -> dict[str, Any] | None:
        """Claim the job; the updated row, or None when the guard did not match."""
        params = {"job_id": job_id, "worker_id": worker_id, "ttl": ttl, "attempt_id": attempt_id,
                  "event": "claim", "error_class": None, "error_type": None, "error_message": None,
                  "detail": None}
        if self.dialect == "postgresql":
            with self._cursor() as cursor:
                cursor.execute(_PG_CLAIM, params)
                return self._row(cursor)
        with self._sqlite_transaction() as cursor:
            cursor.execute(_SQLITE_CLAIM, params)
            row = self._row(cursor)
            if row is not None:
                cursor.execute(_SQLITE_ATTEMPT_INSERT, {**row, "checkpoint_version": row["checkpoint_version"]})
                self._sqlite_event(cursor, row, params, from_status=row["previous_status"])
            return row

    def finish(self, job_id: str, lease_id: int, event: str, to_status: str, sources: Iterable[str], *,
               finished: bool, retry_delay: float | None, error: Mapping[str, str | None] | None,
               detail: str | None) -> dict[str, Any] | None:
        """End the attempt holding `lease_id`; the updated row, or None when fenced out."""
        source_list = sorted(sources)
        params = {
            "job_id": job_id, "lease_id": lease_id, "event": event, "to_status": to_status,
            "source_a": source_list[0], "source_b": source_list[-1], "finished": finished,
            "retry_delay": retry_delay, "retry_increment": 1 if retry_delay is not None else 0,
            "has_error": error is not None,
            "error_class": (error or {}).get("error_class"), "error_type": (error or {}).get("error_type"),
            "error_message": (error or {}).get("message"), "detail": detail,
        }
        if self.dialect == "postgresql":
            with self._cursor() as cursor:
                cursor.execute(_PG_FINISH, params)
                return self._row(cursor)
        with self._sqlite_transaction() as cursor:
            cursor.execute(_SQLITE_FINISH, params)
            row = self._row(cursor)
            if row is not None:
                cursor.execute(_SQLITE_ATTEMPT_END, {**params, "attempt_id": row["attempt_id"]})
                self._sqlite_event(cursor, row, params, from_status=row["previous_status"])
            return row

    def checkpoint(self, job_id: str, lease_id: int, checkpoint: str | None, ttl: float,
                   detail: str | None) -> dict[str, Any] | None:
        """Save the checkpoint (fenced) and renew the lease; the lease columns, or None."""
        params = {"job_id": job_id, "lease_id": lease_id, "checkpoint": checkpoint, "ttl": ttl,
                  "event": "checkpoint", "error_class": None, "error_type": None,
                  "error_message": None, "detail": detail}
        if self.dialect == "postgresql":
            with self._cursor() as cursor:
                cursor.execute(_PG_CHECKPOINT, params)
                return self._row(cursor, LEASE_COLUMNS)
        with self._sqlite_transaction() as cursor:
            cursor.execute(_SQLITE_CHECKPOINT, params)
            row = self._row(cursor)
            if row is not None:
                self._sqlite_event(cursor, row, params, from_status=row["status"])
            return row

    def renew(self, worker_id: str, pairs: list[tuple[str, int]], ttl: float) -> list[dict[str, Any]]:
        """Extend all the given leases in one statement; the rows still held."""
        if self.dialect == "postgresql":
            with self._cursor() as cursor:
                cursor.execute(_PG_RENEW, {"ttl": ttl, "worker_id": worker_id,
                                           "job_ids": [p[0] for p in pairs],
                                           "lease_ids": [p[1] for p in pairs]})
                return [dict(zip(LEASE_COLUMNS, row, strict=True)) for row in cursor.fetchall()]
        placeholders = ", ".join(f"(:j{i}, :l{i})" for i in range(len(pairs)))
        params: dict[str, Any] = {"ttl": ttl, "worker_id": worker_id}
        for i, (job_id, lease_id) in enumerate(pairs):
            params[f"j{i}"], params[f"l{i}"] = job_id, lease_id
        sql = (f"UPDATE reliable_jobs SET lease_expires_at = {_SQLITE_NOW} + :ttl, worker_id = :worker_id "
               f"WHERE (job_id, lease_id) IN (VALUES {placeholders}) AND status IN ('RUNNING', 'STOPPING') "
               f"RETURNING {_LEASE_RETURNING}")
        with self._sqlite_transaction() as cursor:
            cursor.execute(sql, params)
            return [dict(zip(LEASE_COLUMNS, row, strict=True)) for row in cursor.fetchall()]

    def _sqlite_event(self, cursor: Any, row: Mapping[str, Any], params: Mapping[str, Any], *,
                      from_status: str | None) -> None:
        values: dict[str, Any] = {name: None for name in EVENT_COLUMNS}
        for name, expr in _EVENT_FROM_JOB.items():
            values[name] = row[expr[2:]]
        values["at"] = row["updated_at"]
        values["from_status"] = from_status
        for name in ("event", "error_class", "error_type", "error_message", "detail"):
            values[name] = params.get(name)
        cursor.execute(_SQLITE_EVENT_INSERT, values)
