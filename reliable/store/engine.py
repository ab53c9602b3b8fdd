"""Opening a store's engine: one bounded pool, SQLite's settings, PostgreSQL's hung-up connections,
its sessions' bounds and pooler check (sessions.py) and the failover guard (reliable/store/replication.py,
which runs the store's queries: so it sits above db.py)."""

from __future__ import annotations

import select
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DisconnectionError

from .db import DEFAULT_MAX_CONNECTIONS, POOL_TIMEOUT, check_max_connections, check_store_url
from .replication import refuse_older_timelines
from .sessions import IDLE_IN_TRANSACTION_TIMEOUT, session_args, watch_sessions

__all__ = ["IDLE_IN_TRANSACTION_TIMEOUT", "connect_engine"]


def connect_engine(url: str | URL, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                   pool_timeout: float = POOL_TIMEOUT) -> Engine:
    """Create an engine for `url` (nothing is connected until first use); ConfigError if it is wrong.

    One bounded pool: at most `max_connections` connections, opened on demand and kept; a thread
    that finds them all in use waits up to `pool_timeout` seconds, then gets StoreUnavailable
    (through `translate_errors`). Every caller, the worker hot path included, holds a connection
    for one transaction and never takes a second one meanwhile, so any bound >= 1 is safe.

    SQLite runs in WAL mode with a 30 s busy timeout, and write transactions take the write lock
    up front (BEGIN IMMEDIATE) so that two writers queue instead of failing with "database is
    locked" when one of them tries to upgrade a read lock.
    """
    bounded: dict[str, Any] = {"pool_size": check_max_connections(max_connections), "max_overflow": 0,
                               "pool_timeout": pool_timeout}
    parsed = check_store_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            parsed, **bounded, connect_args={"timeout": 30, "isolation_level": None, "check_same_thread": False},
        )
        _configure_sqlite(engine)
        return engine
    engine = create_engine(parsed, **bounded, connect_args={"connect_timeout": 5, **session_args(parsed)})
    watch_sessions(engine)
    _drop_hung_up_connections(engine)
    refuse_older_timelines(engine)
    return engine


def _drop_hung_up_connections(engine: Engine) -> None:
    """Replace, at checkout, a pooled PostgreSQL connection the server has closed.

    SQLAlchemy's pre-ping would cost a round trip per checkout, i.e. per hot-path statement. This
    costs one non-blocking poll: an idle connection has nothing to read unless the server hung up
    (a restart sends "terminating connection" and closes; a crash closes), so after a PostgreSQL
    restart the pool reconnects instead of failing a statement on each stale connection. A
    connection cut without notice (a network partition) still fails on first use: StoreUnavailable,
    and the whole pool is recycled (`SqlRunner._release`, and SQLAlchemy on the general path).
    """

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        try:
            hung_up = (dbapi_conn.closed or dbapi_conn.broken
                       or bool(select.select([dbapi_conn.fileno()], [], [], 0)[0]))
        except Exception:  # fileno() of a closed connection, a bad descriptor: unusable either way
            hung_up = True
        if hung_up:
            raise DisconnectionError("the server closed this pooled connection")


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
