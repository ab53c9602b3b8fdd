"""Engines for the two supported databases, the database clock, and error translation."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, event, literal_column
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, NoSuchModuleError, OperationalError
from sqlalchemy.sql.elements import ColumnElement

from ..errors import ConfigError, StoreError, StoreNotMigrated, StoreUnavailable
from ..redact import redact_url

__all__ = [
    "SUPPORTED",
    "check_store_url",
    "connect_engine",
    "now_expression",
    "read_connection",
    "sqlite_writer_lock",
    "translate",
    "translate_errors",
    "write_transaction",
]

SUPPORTED = ("sqlite", "postgresql")


def check_store_url(url: str | URL) -> URL:
    """Parse and check a store URL without connecting; the URL to create the engine with.

    Raises ConfigError naming the problem (unparseable, unsupported database, unknown driver,
    driver module missing, SQLite without a file) with any password masked. A `password` query
    parameter moves into the URL's password, where SQLAlchemy's own reprs hide it too.
    """
    try:
        parsed: URL | None = make_url(url)
    except (ArgumentError, ValueError):
        parsed = None
    # Raised outside the `except`: the parser's error (which may quote the input) is not chained.
    if parsed is None:
        raise ConfigError("the store URL does not parse (it is not shown: it may contain a password); expected "
                          "e.g. sqlite:///reliable.db or postgresql+psycopg://user@host:5432/dbname")
    shown = redact_url(parsed)
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED:
        raise ConfigError(f"unsupported store URL {shown}: reliable supports {', '.join(SUPPORTED)}")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigError(f"store URL {shown}: SQLite needs a file (e.g. sqlite:///reliable.db)")
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        query_password = parsed.query.get("password")
        if isinstance(query_password, str) and parsed.password is None:
            parsed = parsed.set(password=query_password).difference_update_query(["password"])
    problem = None
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        problem = f"unknown driver {parsed.drivername!r}"
    except ImportError as exc:
        problem = f"needs the {exc.name or 'driver'!r} module: pip install 'reliable[postgresql]'"
    if problem is not None:
        raise ConfigError(f"store URL {shown}: {problem}")
    return parsed


def connect_engine(url: str | URL, *, pool_size: int = 10) -> Engine:
    """Create an engine for `url` (nothing is connected until first use); ConfigError if it is wrong.

    SQLite runs in WAL mode with a 30 s busy timeout, and write transactions take the write lock
    up front (BEGIN IMMEDIATE) so that two writers queue instead of failing with "database is
    locked" when one of them tries to upgrade a read lock. PostgreSQL keeps at most 2 idle
    connections (operator commands and reads are occasional; the worker hot path pins its own).
    """
    parsed = check_store_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            parsed, connect_args={"timeout": 30, "isolation_level": None, "check_same_thread": False},
        )
        _configure_sqlite(engine)
        return engine
    # One bounded pool serves every thread of the process (the worker's writes check a connection
    # out per statement); prepare_threshold: the hot statements run often.
    engine = create_engine(
        parsed, pool_size=pool_size, max_overflow=0, pool_timeout=30,
        connect_args={"connect_timeout": 5, "prepare_threshold": 2},
    )
    _ping_when_idle(engine)
    return engine


#: A pooled PostgreSQL connection idle longer than this is pinged before it is handed out.
PING_AFTER_IDLE = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection on checkout only if it sat idle (a restarted server cut it).

    SQLAlchemy's pool_pre_ping pings on every checkout: a round trip per statement on the worker's
    hot path, where connections go back and forth within milliseconds.
    """

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        record.info["reliable_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("reliable_idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE:
            return
        try:
            dbapi_conn.execute("SELECT 1")
            dbapi_conn.rollback()
        except Exception as exc:
            raise DisconnectionError(f"stale pooled connection: {exc}") from exc


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get("reliable_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def now_expression(engine: Engine) -> ColumnElement[float]:
    """SQL for the database's current time in epoch seconds (sub-second precision)."""
    if engine.dialect.name == "sqlite":
        return literal_column("((julianday('now') - 2440587.5) * 86400.0)")
    return literal_column("(extract(epoch from clock_timestamp())::float8)")


# SQLite allows one writer per file. Threads of one process queue on this lock instead of
# polling the file lock through SQLite's busy handler (which sleeps up to 100 ms per try).
_sqlite_writer_locks: dict[str, threading.Lock] = {}
_sqlite_writer_locks_guard = threading.Lock()


def sqlite_writer_lock(engine: Engine) -> contextlib.AbstractContextManager[Any]:
    """The in-process writer lock of a SQLite file; a no-op context for other databases."""
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    key = os.path.abspath(engine.url.database or "")
    with _sqlite_writer_locks_guard:
        return _sqlite_writer_locks.setdefault(key, threading.Lock())


@contextlib.contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that takes the write lock at once (SQLite) and commits at exit."""
    with sqlite_writer_lock(engine), translate_errors(engine), engine.connect() as conn:
        conn.execution_options(reliable_write=True)
        with conn.begin():
            yield conn


@contextlib.contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """A plain connection for reads, with driver errors translated."""
    with translate_errors(engine), engine.connect() as conn:
        yield conn


@contextlib.contextmanager
def translate_errors(engine: Engine) -> Iterator[None]:
    """Turn driver errors into reliable's: unreachable, unmigrated, or a plain StoreError."""
    try:
        yield
    except DBAPIError as exc:
        raise translate(exc, engine.url) from exc


def translate(exc: BaseException, url: URL) -> Exception:
    """The reliable error for a driver or pool error `exc` on the store at `url` (password hidden).

    The one place that decides what a database error means: the schema is missing
    (StoreNotMigrated), the database cannot be reached or the pool is exhausted
    (StoreUnavailable), or anything else (StoreError).
    """
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    original = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    text = str(original).strip()
    lowered = text.lower()
    where = redact_url(url)
    first = text.splitlines()[0] if text else type(original).__name__
    if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
        return StoreNotMigrated(f"the store at {where} has no reliable tables: "
                                f"run `reliable db upgrade --store {where}`")
    disconnect = isinstance(exc, OperationalError | PoolTimeout) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated) or type(original).__name__ in (
        "OperationalError", "InterfaceError") or "connection" in lowered
    if disconnect:
        return StoreUnavailable(f"cannot use the store at {where}: {first}")
    return StoreError(f"store error at {where}: {first}")
