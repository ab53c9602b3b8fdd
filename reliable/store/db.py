"""Engines for the two supported databases, the database clock, and error translation."""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, literal_column
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, NoSuchModuleError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool
from sqlalchemy.sql.elements import ColumnElement

from ..deadlines import Watchdog, cut_socket
from ..errors import ConfigError, StoreError, StoreMisconfigured, StoreNotMigrated, StoreUnavailable
from ..redact import redact_url
from .faults import Fault, classify
from .instrumentation import outside_app_traces

__all__ = [
    "DEADLINE_WATCH",
    "DEFAULT_MAX_CONNECTIONS",
    "POOLED",
    "POOL_TIMEOUT",
    "SUPPORTED",
    "WRITABLE_SESSION_ATTRS",
    "arm_connection",
    "check_max_connections",
    "check_store_url",
    "database_location",
    "hung_up",
    "missing_sqlite_file",
    "normalise_scheme",
    "now_expression",
    "pool_capacity",
    "pool_exhausted",
    "pooled",
    "read_connection",
    "sqlite_writer_lock",
    "translate",
    "translate_errors",
    "write_transaction",
]

SUPPORTED = ("sqlite", "postgresql")

#: Connections one process opens to one store at most. Dramatiq's default 8 worker threads plus
#: reliable's heartbeat and recovery threads each get one without waiting; more threads take turns
#: (a statement holds its connection for a millisecond or so). See `reliable docs operations` for sizing.
DEFAULT_MAX_CONNECTIONS = 10
#: Seconds a thread waits for a free connection before it gets StoreUnavailable. Statements are
#: short: a wait this long means the database is stuck, not that the pool is too small.
POOL_TIMEOUT = 10.0
#: Where a pooled PostgreSQL connection's `info` (its pool entry's, kept across checkouts) holds
#: the (Watchdog, key) that engine.py arms it on at checkout with its call's deadline: a connection
#: kept checked out across calls is armed there per call (`arm_connection`).
DEADLINE_WATCH = "reliable.deadline_watch"


def arm_connection(watchdog: Watchdog, key: object, dbapi_conn: Any, until: float) -> None:
    """Have `watchdog` shut down the socket of `dbapi_conn` (psycopg) at `until` (monotonic), unless
    `watchdog.disarm(key)` comes first (reliable.deadlines)."""
    pgconn = dbapi_conn.pgconn
    watchdog.arm(key, until, lambda: cut_socket(pgconn.socket))


def hung_up(dbapi_conn: Any) -> bool:
    """Whether an idle psycopg connection is unusable: closed, broken, or readable (the server hung
    up: a restart sends "terminating connection" and closes; a crash or a deadline's cut closes).
    One non-blocking poll, no round trip. `poll`, not `select`: select() refuses a descriptor
    >= 1024 (FD_SETSIZE), which a busy process's connections have."""
    try:
        if dbapi_conn.closed or dbapi_conn.broken:
            return True
        poller = select.poll()
        poller.register(dbapi_conn.fileno(), select.POLLIN | select.POLLPRI)
        # Any event is "unusable": readable (data or EOF from an idle connection), or POLLHUP,
        # POLLERR, POLLNVAL, which poll reports whatever was asked for.
        return bool(poller.poll(0))
    except Exception:  # fileno() of a closed connection, a bad descriptor: unusable either way
        return True

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
    parsed = normalise_scheme(parsed)
    shown = redact_url(parsed)
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED:
        raise ConfigError(f"unsupported store URL {shown}: reliable supports {', '.join(SUPPORTED)}")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigError(f"store URL {shown}: SQLite needs a file (e.g. sqlite:///reliable.db)")
    if backend == "postgresql":
        query_password = parsed.query.get("password")
        if isinstance(query_password, str) and parsed.password is None:
            parsed = parsed.set(password=query_password).difference_update_query(["password"])
        _check_hosts(parsed, shown)
        _check_pooled(parsed, shown)
    problem = None
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        problem = f"unknown driver {parsed.drivername!r}"
    except ImportError as exc:
        problem = f"needs the {exc.name or 'driver'!r} module: pip install 'reliable[postgresql]'"
    if problem is not None:
        if backend == "postgresql" and parsed.drivername != PG_DRIVER:
            problem += f"; reliable ships with psycopg 3: use {redact_url(parsed.set(drivername=PG_DRIVER))}"
        raise ConfigError(f"store URL {shown}: {problem}")
    return parsed


#: The PostgreSQL driver reliable installs (the `postgresql` extra): psycopg 3.
PG_DRIVER = "postgresql+psycopg"


def normalise_scheme(url: URL) -> URL:
    """`url` with libpq's and the platforms' spellings of PostgreSQL made SQLAlchemy's: ``postgres://``
    and ``postgresql://`` (no driver named) are ``postgresql+psycopg://``; ``postgres+DRIVER://`` is
    ``postgresql+DRIVER://``. Anything else is returned as it is."""
    backend, _, driver = url.drivername.partition("+")
    if backend not in ("postgres", "postgresql"):
        return url
    return url.set(drivername=f"postgresql+{driver}" if driver else PG_DRIVER)


def database_location(url: str | URL) -> str:
    """Where the store's database is (backend, host, port, database; the absolute path of a SQLite
    file), never who connects to it: one text for every spelling of one database's URL."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    database = parsed.database or ""
    if backend == "sqlite" and database and database != ":memory:":
        database = os.path.abspath(database)
    port = parsed.port or (5432 if backend == "postgresql" else "")
    return f"{backend}://{parsed.host or ''}:{port}/{database}"


def missing_sqlite_file(url: URL) -> str | None:
    """The absolute path of `url`'s SQLite file if it does not exist (connecting would create it
    empty); None for a file that exists, a `uri=true` URL, or another database."""
    if url.get_backend_name() != "sqlite" or not url.database or "uri" in url.query:
        return None
    path = os.path.abspath(url.database)
    return None if os.path.exists(path) else path


#: target_session_attrs values that keep a session on a server that accepts writes.
WRITABLE_SESSION_ATTRS = ("read-write", "primary")


def _check_hosts(url: URL, shown: str) -> None:
    """A URL naming several PostgreSQL servers must say to use the one that accepts writes.

    Every form libpq knows counts: ``?host=h1:p1&host=h2:p2`` (SQLAlchemy's),
    ``?host=h1,h2&port=p1,p2`` and ``user@h1,h2/db``. libpq tries the hosts in order; without
    ``target_session_attrs=read-write`` (or ``primary``) it would settle on the first server that
    answers, a standby included, where every write is refused (`reliable docs postgresql-failover`).
    """
    hosts = url.query.get("host")
    listed = [hosts] if isinstance(hosts, str) else list(hosts or ())
    # A comma in the URL's own host part (postgresql://app@db1,db2/jobs) is a host list too.
    count = sum(len(h.split(",")) for h in [*listed, url.host or ""] if h)
    if count < 2:
        return
    attrs = url.query.get("target_session_attrs")
    if attrs not in WRITABLE_SESSION_ATTRS:
        raise ConfigError(f"store URL {shown}: it names {count} hosts, so it needs target_session_attrs=read-write "
                          f"(or primary), not {attrs!r}: reliable writes, and libpq would settle on the first "
                          "host that answers, a read-only standby included")


#: The store URL's query parameter (reliable's own: never passed to libpq) saying that a connection
#: pooler in transaction mode, such as PgBouncer, stands between reliable and PostgreSQL (sessions.py).
POOLED = "pooled"
_POOLED_VALUES = {"true": True, "false": False}


def pooled(url: URL) -> bool:
    """Whether the store URL says a pooler is in the way (``?pooled=true``; checked by check_store_url)."""
    return _POOLED_VALUES.get(str(url.query.get(POOLED, "false")).lower(), False)


def _check_pooled(url: URL, shown: str) -> None:
    value = url.query.get(POOLED)
    if value is not None and (not isinstance(value, str) or value.lower() not in _POOLED_VALUES):
        raise ConfigError(f"store URL {shown}: {POOLED} must be true or false (once), not {value!r} "
                          "(`reliable docs pgbouncer`)")


def check_max_connections(value: int) -> int:
    """`value` if it is a usable connection limit (an int >= 1); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_connections must be a whole number of at least 1, not {value!r}")
    return value


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
    """A connection in a transaction that takes the write lock at once (SQLite) and commits at exit.

    It and `read_connection` keep reliable's statements out of the application's traces
    (instrumentation.py)."""
    with outside_app_traces(), sqlite_writer_lock(engine), translate_errors(engine), engine.connect() as conn:
        conn.execution_options(reliable_write=True)
        with conn.begin():
            yield conn


@contextlib.contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """A plain connection for reads, with driver errors translated."""
    with outside_app_traces(), translate_errors(engine), engine.connect() as conn:
        yield conn


def pool_capacity(engine: Engine) -> float:
    """How many connections `engine`'s pool holds at most: a QueuePool's size (its overflow, none
    in the engines `connect_engine` makes, not counted); unbounded (inf) for a pool without a
    size (NullPool opens one per checkout)."""
    pool = engine.pool
    return pool.size() if isinstance(pool, QueuePool) else math.inf


def pool_exhausted(engine: Engine) -> StoreUnavailable:
    """The error for a thread that waited `pool_timeout` for a connection and got none."""
    pool = engine.pool
    limits = f"all {pool.size()} connections" if isinstance(pool, QueuePool) else "every connection"
    waited = f" for {pool.timeout():g}s" if isinstance(pool, QueuePool) else ""
    url = redact_url(engine.url)
    return StoreUnavailable(f"cannot use the store at {url}: {limits} of this process stayed busy{waited} "
                            "(see max_connections in `reliable docs operations`)")


@contextlib.contextmanager
def translate_errors(engine: Engine) -> Iterator[None]:
    """Turn driver errors into reliable's: unreachable, unmigrated, or a plain StoreError."""
    try:
        yield
    except PoolTimeout as exc:
        raise pool_exhausted(engine) from exc
    except DisconnectionError as exc:  # the pool could not hand out a live connection
        raise StoreUnavailable(f"cannot use the store at {redact_url(engine.url)}: {exc}") from exc
    except DBAPIError as exc:
        raise translate(exc, engine.url) from exc


def translate(exc: BaseException, url: URL) -> Exception:
    """The reliable error for a driver or pool error `exc` on the store at `url` (password hidden).

    What it means is decided by `faults.classify`, the one classification: a configuration error
    (StoreMisconfigured, or StoreNotMigrated for a missing schema, each saying what to fix or run),
    an outage (StoreUnavailable), or anything else (StoreError).
    """
    if isinstance(exc, StoreError):  # raised by one of our connect hooks: already ours
        return exc
    original = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    text = str(original).strip()
    where = redact_url(url)
    first = text.splitlines()[0] if text else type(original).__name__
    diagnosis = classify(exc)
    if diagnosis.fault is Fault.CONFIGURATION:
        fix = diagnosis.fix.format(url=where)
        if diagnosis.schema:
            return StoreNotMigrated(f"the store at {where} has no reliable tables: {fix}")
        return StoreMisconfigured(f"the store at {where} refused: {first}: {fix}")
    if diagnosis.fault is Fault.OUTAGE:
        return StoreUnavailable(f"cannot use the store at {where}: {first}")
    return StoreError(f"store error at {where}: {first}")
