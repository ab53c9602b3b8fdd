"""What each of reliable's PostgreSQL sessions gets: its bounds, prepared statements, and the check
that a connection pooler in the way was declared (`reliable docs pgbouncer`).

Two bounds, both enforced by the server, never by a round trip per transaction:

    idle_in_transaction_session_timeout  a process frozen inside one of reliable's transactions
                                          holds its row locks this long at most
    statement_timeout                    one of reliable's statements runs (or waits on a lock)
                                          this long at most

Direct to PostgreSQL (the default), they travel in the connection's startup `options` together
with a marker setting, and statements the worker repeats are prepared on the server (psycopg's
prepare_threshold). A pooler in transaction mode (PgBouncer's `pool_mode = transaction`) hands
each transaction to any of its server sessions: it refuses startup `options` (or drops them, with
`ignore_startup_parameters = options`), and a statement prepared in one server session is missing
in the next. So a pooled store URL says so, ``?pooled=true``: no startup `options`, nothing
prepared, and the bounds are the server's own settings for reliable's role
(`ALTER ROLE ... SET`, `server_settings_sql`), which every server session the pooler opens starts
with. Zero extra round trips either way: a `SET LOCAL` per transaction would cost one per write.

A set-up that is wrong says so at the first connection, with the fix: a pooler that refuses the
options is a configuration error (faults.py); one that drops them is caught here, since the marker
is missing (`watch_sessions`); and a pooled store whose role lacks the bounds gets one warning.

Why the deadline is 30 s: every statement of reliable takes milliseconds, and the longest
legitimate wait is on a row lock held by another of reliable's transactions, whose idle gaps the
first bound cuts at 5 s. A statement the deadline cancels is an outage (SQLSTATE 57014): a
worker's write tries again, an operator's command says so. `reliable db upgrade` lifts it for its
own transaction (a migration may build an index for minutes).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL

from ..errors import StoreMisconfigured
from ..redact import redact_url
from .db import POOLED, pooled
from .faults import POOLER
from .sqlrunner import load_queries

__all__ = ["IDLE_IN_TRANSACTION_TIMEOUT", "MARKER", "PREPARE_THRESHOLD", "STATEMENT_TIMEOUT", "read_at_connect",
           "server_settings_sql", "session_args", "watch_sessions"]

logger = logging.getLogger("reliable.store")

#: How long the server lets one of reliable's sessions sit idle inside a transaction before it ends
#: the session. Every transaction of reliable lasts milliseconds; a process frozen (SIGSTOP) or
#: hung between two statements of one (record_effect holds the job row FOR UPDATE while it inserts
#: the effect) would otherwise keep its row locks until it resumes, and recovery's lease expiry of
#: that job would wait as long: the frozen holder's jobs would never be handed on. Well below the
#: default lease ttl (30 s), so a frozen holder delays recovery by at most this much.
IDLE_IN_TRANSACTION_TIMEOUT = 5.0
#: The deadline of each of reliable's statements, lock waits included (the module doc says why 30 s).
STATEMENT_TIMEOUT = 30.0
#: The setting a direct session carries in its startup options: missing, a pooler dropped them.
MARKER = ("reliable.session", "direct")
#: Executions after which psycopg prepares a statement on the server (direct sessions only): the
#: worker's statements run often, and the server keeps their plans.
PREPARE_THRESHOLD = 2


def _settings() -> dict[str, str]:
    return {"idle_in_transaction_session_timeout": f"{int(IDLE_IN_TRANSACTION_TIMEOUT * 1000)}",
            "statement_timeout": f"{int(STATEMENT_TIMEOUT * 1000)}"}


def session_args(url: URL) -> dict[str, Any]:
    """psycopg's connect arguments for a session of `url`: the bounds and the marker in `options`
    (the URL's own options after them, so that a setting it names wins) and server-side prepared
    statements; for a pooled URL, neither."""
    if pooled(url):
        return {"prepare_threshold": None}
    given = url.query.get("options")
    given = " ".join(given) if isinstance(given, tuple) else (given or "")
    ours = " ".join(f"-c {name}={value}" for name, value in (*_settings().items(), MARKER))
    return {"prepare_threshold": PREPARE_THRESHOLD, "options": f"{ours} {given}".strip()}


def server_settings_sql(role: str = "<role>", database: str = "<database>") -> list[str]:
    """The statements that give `role`'s sessions of `database` reliable's bounds on the server (for
    a pooled store)."""
    return [f'ALTER ROLE "{role}" IN DATABASE "{database}" SET {name} = {value}' for name, value in _settings().items()]


def read_at_connect(dbapi_conn: Any, query: str, params: dict[str, Any] | None = None) -> Any:
    """The one row `query` answers on a new DBAPI connection (in a "connect" hook): the cursor
    closed and the transaction the read began rolled back, so the pool gets the session idle,
    never idle in a transaction (which IDLE_IN_TRANSACTION_TIMEOUT would end)."""
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute(query, params)
        return cursor.fetchone()
    finally:
        cursor.close()
        dbapi_conn.rollback()


def watch_sessions(engine: Engine) -> None:
    """Keep `pooled` (reliable's, not libpq's) out of the driver's arguments, and at each new
    connection check what a pooler may have done to the session (one query, at connect only): a
    direct URL whose startup options were dropped is refused (StoreMisconfigured, with the fix); a
    pooled URL whose role lacks the bounds is warned about once."""
    if engine.dialect.name != "postgresql":
        return

    @event.listens_for(engine, "do_connect")
    def _driver_arguments(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        cparams.pop(POOLED, None)

    query = load_queries("postgresql")["session_settings"]
    is_pooled = pooled(engine.url)
    warned = threading.Event()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        marker, idle, deadline, role, database = read_at_connect(dbapi_conn, query, {"marker": MARKER[0]})
        where = redact_url(engine.url)
        if not is_pooled and marker != MARKER[1]:
            raise StoreMisconfigured(f"the store at {where} dropped the session's startup options "
                                     f"(statement_timeout, idle_in_transaction_session_timeout): {POOLER}")
        if is_pooled and (idle == 0 or deadline == 0) and not warned.is_set():
            warned.set()
            logger.warning("the store at %s is pooled and role %s has no %s on the server: a frozen worker's "
                           "row locks or a stuck statement are not bounded; run: %s (then RECONNECT in "
                           "PgBouncer's admin console; `reliable docs pgbouncer`)", where, role,
                           " and ".join(n for n, v in (("idle_in_transaction_session_timeout", idle),
                                                        ("statement_timeout", deadline)) if v == 0),
                           "; ".join(server_settings_sql(role, database)))
