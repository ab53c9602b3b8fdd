"""`reliable.store.faults.classify`, the one classification of store errors, over real driver errors.

Every row is an exception raised for real by sqlite3, psycopg or SQLAlchemy (a private PostgreSQL
cluster gives the refused login, the missing database and role, the missing table, the denied
right and, stopped, the refused connection), except the few server states a test cannot cause on
demand (a server starting up, out of connection slots): those are the driver's exception class
with the server's exact text or SQLSTATE. `translate` turns each into reliable's error: one line,
the fix named.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import psycopg.errors
import pytest
import sqlalchemy as sa
from private_postgres import PrivatePostgres, private_postgres
from sqlalchemy.engine import make_url

from reliable.errors import (
    SendTimedOut,
    StoreError,
    StoreMisconfigured,
    StoreNotMigrated,
    StoreUnavailable,
)
from reliable.store.db import translate
from reliable.store.faults import Fault, classify, rolled_back

PASSWORD = "right-pw-7"


def caught(call: Callable[[], object]) -> BaseException:
    """The exception `call()` raises (it must raise)."""
    try:
        call()
    except Exception as exc:  # whatever the driver raised is the row
        return exc
    raise AssertionError("expected an exception")


# -- sqlite3 and SQLAlchemy over it ---------------------------------------------------------------------

def sqlite_cases(tmp: Path) -> dict[str, tuple[BaseException, Fault, bool]]:
    """name -> (real exception, expected fault, is the schema the problem)."""
    locked_file = tmp / "locked.db"
    holder = sqlite3.connect(locked_file, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(locked_file, timeout=0, isolation_level=None)
    garbage = tmp / "garbage.db"
    garbage.write_bytes(b"this is not a database file" * 100)
    unique = sqlite3.connect(":memory:")
    unique.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    unique.execute("INSERT INTO t VALUES (1)")
    sa_engine = sa.create_engine(f"sqlite:///{tmp / 'empty.db'}")
    try:
        return {
            "sqlite no such table": (caught(lambda: sqlite3.connect(":memory:").execute(
                "SELECT * FROM reliable_jobs")), Fault.CONFIGURATION, True),
            "sqlite directory missing": (caught(lambda: sqlite3.connect(tmp / "no" / "such" / "dir.db")),
                                         Fault.CONFIGURATION, False),
            "sqlite read-only": (caught(lambda: sqlite3.connect(f"file:{locked_file}?mode=ro", uri=True).execute(
                "CREATE TABLE u (x INTEGER)")), Fault.CONFIGURATION, False),
            "sqlite not a database": (caught(lambda: sqlite3.connect(garbage).execute("SELECT * FROM t")),
                                      Fault.CONFIGURATION, False),
            "sqlite locked": (caught(lambda: waiter.execute("BEGIN IMMEDIATE")), Fault.OUTAGE, False),
            "sqlite unique violation": (caught(lambda: unique.execute("INSERT INTO t VALUES (1)")), Fault.OTHER,
                                        False),
            "sqlalchemy over sqlite, no such table": (caught(lambda: sa_engine.connect().execute(
                sa.text("SELECT * FROM reliable_jobs"))), Fault.CONFIGURATION, True),
        }
    finally:
        holder.close()
        waiter.close()
        sa_engine.dispose()


# -- psycopg and SQLAlchemy over it (a private cluster) ---------------------------------------------

@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivatePostgres]:
    """A private cluster with a role `app` that must give a password, a role without rights and an empty database."""
    with private_postgres() as pg:
        with psycopg.connect(pg.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CREATE ROLE nobody LOGIN")
            conn.execute("CREATE DATABASE empty")
            conn.execute("CREATE TABLE private_table (x int)")
        pg.add_password_role("app", PASSWORD)
        yield pg


def pg_cases(pg: PrivatePostgres) -> dict[str, tuple[BaseException, Fault, bool]]:
    """name -> (real exception, expected fault, is the schema the problem); stops `pg` at the end."""
    def dsn(user: str, database: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{pg.port}/{database}"

    def connect(user: str, database: str = "postgres") -> Callable[[], object]:
        return lambda: psycopg.connect(dsn(user, database), connect_timeout=5)

    def query(user: str, sql: str, database: str = "postgres") -> Callable[[], object]:
        def run() -> None:
            with psycopg.connect(dsn(user, database), connect_timeout=5) as conn:
                conn.execute(sql)
        return run

    sa_engine = sa.create_engine(pg.url_for("no_such_db"))
    cases = {
        "psycopg database missing": (caught(connect("postgres", "no_such_db")), Fault.CONFIGURATION, False),
        "psycopg wrong password": (caught(connect("app:wrong")), Fault.CONFIGURATION, False),
        "psycopg no password": (caught(connect("app")), Fault.CONFIGURATION, False),
        "psycopg unknown role": (caught(connect("ghost")), Fault.CONFIGURATION, False),
        "psycopg undefined table": (caught(query("postgres", "SELECT * FROM reliable_jobs", "empty")),
                                    Fault.CONFIGURATION, True),
        "psycopg permission denied": (caught(query("nobody", "SELECT * FROM private_table")), Fault.CONFIGURATION,
                                      False),
        "psycopg syntax error": (caught(query("postgres", "SELEC 1")), Fault.OTHER, False),
        "psycopg unique violation quoting 'connection'": (caught(query(
            "postgres", "CREATE TEMP TABLE u (k text PRIMARY KEY); INSERT INTO u VALUES ('connection refused');"
                        "INSERT INTO u VALUES ('connection refused')")), Fault.OTHER, False),
        "psycopg program limit (54000, an OperationalError)": (caught(query(
            "postgres", "CREATE TEMP TABLE big (v text); ALTER TABLE big ALTER v SET STORAGE plain; "
                        "INSERT INTO big SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i")),
            Fault.OTHER, False),
        "sqlalchemy over psycopg, database missing": (caught(sa_engine.connect), Fault.CONFIGURATION, False),
    }
    sa_engine.dispose()
    pg.stop()
    sa_engine = sa.create_engine(pg.url)
    cases["psycopg connection refused"] = (caught(connect("postgres")), Fault.OUTAGE, False)
    cases["sqlalchemy over psycopg, connection refused"] = (caught(sa_engine.connect), Fault.OUTAGE, False)
    sa_engine.dispose()
    return cases


#: Server states a test cannot cause on demand: the driver's class with the server's text or SQLSTATE.
SERVER_STATES: dict[str, tuple[BaseException, Fault]] = {
    "server starting up": (psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  the database system '
        "is starting up"), Fault.OUTAGE),
    "server shutting down": (psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  the database system '
        "is shutting down"), Fault.OUTAGE),
    "too many clients": (psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  sorry, too many '
        "clients already"), Fault.OUTAGE),
    "no pg_hba entry": (psycopg.OperationalError(
        'connection failed: connection to server at "10.0.0.1", port 5432 failed: FATAL:  no pg_hba.conf entry '
        'for host "10.0.0.2", user "app", database "jobs", no encryption'), Fault.CONFIGURATION),
    "host name does not resolve": (psycopg.OperationalError(
        "failed to resolve host 'db.internal': [Errno -2] Name or service not known"), Fault.OUTAGE),
    "admin shutdown (57P01)": (psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
                               Fault.OUTAGE),
    "standby after failover (25006)": (psycopg.errors.ReadOnlySqlTransaction(
        "cannot execute UPDATE in a read-only transaction"), Fault.OUTAGE),
    "cannot connect now (57P03)": (psycopg.errors.CannotConnectNow("the database system is in recovery mode"),
                                   Fault.OUTAGE),
"deadlock (40P01)": (psycopg.errors.DeadlockDetected("deadlock detected"), Fault.OUTAGE),
    "serialization failure (40001)": (psycopg.errors.SerializationFailure(
        "could not serialize access due to concurrent update"), Fault.OUTAGE),
    "lock timeout (55P03)": (psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"), Fault.OUTAGE),
    "statement timeout (57014)": (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
                                  Fault.OUTAGE),
    "program limit (54000)": (psycopg.errors.ProgramLimitExceeded("index row size 3216 exceeds btree version 4 "
                                                                  "maximum 2704 for index \"big_v_idx\""), Fault.OTHER),
    "numeric out of range (22003)": (psycopg.errors.NumericValueOutOfRange("integer out of range"), Fault.OTHER),
    "SQLAlchemy pool timeout": (sa.exc.TimeoutError("QueuePool limit of size 1 overflow 0 reached"), Fault.OUTAGE),
    "reliable StoreUnavailable": (StoreUnavailable("cannot use the store"), Fault.OUTAGE),
    "reliable SendTimedOut": (SendTimedOut("the send waited 1s"), Fault.OUTAGE),
    "reliable StoreMisconfigured": (StoreMisconfigured("wrong password: check the URL"), Fault.CONFIGURATION),
    "reliable StoreNotMigrated": (StoreNotMigrated("run `reliable db upgrade`"), Fault.CONFIGURATION),
    "reliable StoreError": (StoreError("a failed statement"), Fault.OTHER),
}


def check_row(name: str, exc: BaseException, fault: Fault, schema: bool) -> None:
    diagnosis = classify(exc)
    assert diagnosis.fault is fault, f"{name}: {type(exc).__name__}: {exc}"
    assert diagnosis.schema is schema, name
    if fault is Fault.CONFIGURATION:
        assert diagnosis.fix, f"{name}: a configuration error names its fix"


def check_translation(name: str, exc: BaseException, fault: Fault, schema: bool) -> None:
    url = make_url("postgresql+psycopg://app:s3cret@db:5432/jobs")
    error = translate(exc, url)
    expected = {Fault.CONFIGURATION: StoreNotMigrated if schema else StoreMisconfigured,
                Fault.OUTAGE: StoreUnavailable, Fault.OTHER: StoreError}[fault]
    assert type(error) is expected or (isinstance(exc, StoreError) and error is exc), name
    text = str(error)
    assert "\n" not in text and "s3cret" not in text, name
    if fault is Fault.CONFIGURATION and not isinstance(exc, StoreError):
        assert "reliable db upgrade" in text if schema else ("URL" in text or "rights" in text or "SQLite" in text)


def test_sqlite_errors(tmp_path: Path) -> None:
    for name, (exc, fault, schema) in sqlite_cases(tmp_path).items():
        check_row(name, exc, fault, schema)
        check_translation(name, exc, fault, schema)


def test_postgresql_errors(cluster: PrivatePostgres) -> None:
    try:
        cases = pg_cases(cluster)
    finally:
        if not cluster.running():
            cluster.start()
    assert len(cases) == 12
    for name, (exc, fault, schema) in cases.items():
        check_row(name, exc, fault, schema)
        check_translation(name, exc, fault, schema)


@pytest.mark.parametrize("name", sorted(SERVER_STATES))
def test_server_states(name: str) -> None:
    exc, fault = SERVER_STATES[name]
    check_row(name, exc, fault, isinstance(exc, StoreNotMigrated))
    check_translation(name, exc, fault, isinstance(exc, StoreNotMigrated))


def test_every_configuration_error_is_a_config_error_and_passes_dramatiq() -> None:
    """Raised from a Dramatiq hook (send, worker boot), a configuration error must reach the caller:
    Dramatiq logs and swallows any exception that is not a MiddlewareError."""
    from dramatiq.middleware import MiddlewareError

    from reliable.errors import ConfigError

    for error in (StoreMisconfigured, StoreNotMigrated, SendTimedOut):
        assert issubclass(error, MiddlewareError), error
    assert issubclass(StoreMisconfigured, ConfigError) and issubclass(StoreNotMigrated, StoreMisconfigured)
    assert issubclass(SendTimedOut, StoreUnavailable)


def test_rolled_back_is_a_conflict_the_server_undid_not_a_lost_reply() -> None:
    """The group commit writes a rolled-back batch row by row: only for a deadlock or a serialization
    failure, never for 40003 (the statement may have committed: a lost reply, retried as an outage)."""
    deadlock = psycopg.errors.DeadlockDetected("deadlock detected")
    wrapped = StoreUnavailable("cannot use the store")
    wrapped.__cause__ = deadlock
    assert rolled_back(deadlock) and rolled_back(wrapped)
    assert rolled_back(psycopg.errors.SerializationFailure("could not serialize access"))
    unknown = psycopg.errors.StatementCompletionUnknown("statement completion unknown")
    assert not rolled_back(unknown) and classify(unknown).fault is Fault.OUTAGE
    assert not rolled_back(psycopg.errors.UniqueViolation("duplicate key")) and not rolled_back(wrapped.__class__("x"))
