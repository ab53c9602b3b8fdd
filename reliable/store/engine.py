"""Opening a store's engine: one bounded pool, SQLite's settings, PostgreSQL's hung-up connections,
its sessions' bounds and pooler check (sessions.py), silent networks (docs/operations.md) and the
failover guard (reliable/store/replication.py, which runs the store's queries: so it sits above db.py)."""

from __future__ import annotations

import logging
import math
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DisconnectionError

from ..deadlines import Watchdog, deadline, remaining
from ..errors import ConfigError
from ..redact import redact_url
from .db import (
    DEADLINE_WATCH,
    DEFAULT_MAX_CONNECTIONS,
    POOL_TIMEOUT,
    arm_connection,
    check_max_connections,
    check_store_url,
    hung_up,
)
from .replication import refuse_older_timelines
from .sessions import IDLE_IN_TRANSACTION_TIMEOUT, session_args, watch_sessions

__all__ = ["DEFAULT_LEASE_TTL", "IDLE_IN_TRANSACTION_TIMEOUT", "connect_engine", "tcp_bounds"]

logger = logging.getLogger("reliable.store")

#: The policy's default lease TTL (seconds): what the TCP bounds are derived from when none is given.
DEFAULT_LEASE_TTL = 30.0


def connect_engine(url: str | URL, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                   pool_timeout: float = POOL_TIMEOUT, lease_ttl: float = DEFAULT_LEASE_TTL) -> Engine:
    """Create an engine for `url` (nothing is connected until first use); ConfigError if it is wrong.

    One bounded pool: at most `max_connections` connections, opened on demand and kept; a thread
    that finds them all in use waits up to `pool_timeout` seconds, then gets StoreUnavailable
    (through `translate_errors`). Every caller, the worker hot path included, holds a connection
    for one transaction and never takes a second one meanwhile, so any bound >= 1 is safe.

    SQLite runs in WAL mode with a 30 s busy timeout, and write transactions take the write lock
    up front (BEGIN IMMEDIATE) so that two writers queue instead of failing with "database is
    locked" when one of them tries to upgrade a read lock.

    PostgreSQL connections are bounded on a silent network (packets dropped, no reset): TCP
    keepalives and a user timeout derived from `lease_ttl` (`tcp_bounds`; the URL's own values win),
    and the deadline of the call holding a connection (`reliable.deadlines.within`: a send's
    send_timeout, a heartbeat's renewal) cuts it when passed, connecting included.
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
    _check_tcp_settings(parsed)
    tcp = {key: value for key, value in tcp_bounds(lease_ttl).items() if key not in parsed.query}
    engine = create_engine(parsed, **bounded, connect_args={"connect_timeout": CONNECT_TIMEOUT, **session_args(parsed),
                                                            **tcp})
    watch_sessions(engine)
    _drop_hung_up_connections(engine)
    _cut_at_deadlines(engine)
    refuse_older_timelines(engine)
    return engine


#: Seconds libpq may take to open a connection (a call with less time left gets what is left, at least 2 s:
#: libpq's minimum).
CONNECT_TIMEOUT = 5


def tcp_bounds(lease_ttl: float) -> dict[str, int]:
    """libpq's TCP settings for a worker whose leases last `lease_ttl` seconds (30 s: a connection
    idle on a dead path is dropped after 5 + 3 x 2 = 11 s, one whose data goes unacknowledged after 10 s).

    A third of the TTL each way, so that a process whose path to the store died learns it from
    the kernel (its statements fail with StoreUnavailable) well before recovery may hand its jobs
    on; the deadlines of the calls (`reliable.deadlines`) are the exact bound, these are the
    backstop for what no deadline covers (a pooled connection idle between calls, a long read).
    """
    third = max(3, int(lease_ttl / 3))
    return {"keepalives": 1, "keepalives_idle": max(1, third // 2), "keepalives_interval": max(1, third // 5),
            "keepalives_count": 3, "tcp_user_timeout": third * 1000}


#: The least value each TCP setting of a store URL may have (keepalives: 0 turns them off).
_TCP_MINIMUM = {"keepalives": 0, "keepalives_idle": 1, "keepalives_interval": 1, "keepalives_count": 1,
                "tcp_user_timeout": 0}


def _check_tcp_settings(url: URL) -> None:
    """ConfigError for a TCP setting in the URL's query that libpq would refuse at every connect
    (which reads like an outage: a worker would wait for ever, a send for its send_timeout)."""
    for key, least in _TCP_MINIMUM.items():
        value = url.query.get(key)
        if value is None:
            continue
        text = value if isinstance(value, str) else ",".join(value)
        if not text.isdigit() or int(text) < least or (key == "keepalives" and int(text) > 1):
            unit = " (milliseconds)" if key == "tcp_user_timeout" else " (seconds)" if "keepalives_i" in key else ""
            accepted = "0 or 1" if key == "keepalives" else f"a whole number of at least {least}{unit}"
            default = tcp_bounds(DEFAULT_LEASE_TTL)[key]
            raise ConfigError(f"store URL {redact_url(url)}: {key}={text!r} must be {accepted}: fix it in the URL's "
                              f"query, or leave it out to use reliable's default ({default})")


def _cut_at_deadlines(engine: Engine) -> None:
    """Arm each checked-out connection with its call's deadline (`reliable.deadlines`): a call still
    holding it then has its socket shut down, its statement fails with StoreUnavailable and the
    connection is replaced. A connection opened for a call with a deadline waits at most what is left."""
    where = redact_url(engine.url)

    def cut_late(_key: object, late: float) -> None:
        logger.warning("the store at %s did not answer within a call's deadline: its connection was cut (%.1fs "
                       "late; a silent network?)", where, late)

    watchdog = Watchdog(on_cut=cut_late)

    @event.listens_for(engine, "do_connect")
    def _on_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        left = remaining()
        if left is not None:
            cparams["connect_timeout"] = max(2, min(int(cparams.get("connect_timeout") or CONNECT_TIMEOUT),
                                                    math.ceil(left)))

    @event.listens_for(engine, "checkout")
    def _arm(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        record.info[DEADLINE_WATCH] = (watchdog, record)  # for a caller that keeps it checked out
        until = deadline()
        if until is not None:
            arm_connection(watchdog, record, dbapi_conn, until)

    @event.listens_for(engine, "checkin")
    def _disarm(_dbapi_conn: Any, record: Any) -> None:
        watchdog.disarm(record)

    @event.listens_for(engine, "invalidate")
    def _invalidated(_dbapi_conn: Any, record: Any, _exc: Any) -> None:
        watchdog.disarm(record)


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
        if hung_up(dbapi_conn):
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
