"""What reliable's PostgreSQL sessions get (reliable/store/sessions.py): the two bounds and the marker
in the startup options of a direct URL, neither options nor prepared statements for a pooled one
(`?pooled=true`, reliable's own parameter, never handed to libpq), the statement deadline enforced
and read as an outage, and a pooler's prepared-statement errors read as a configuration error.
The real PgBouncer is in tests/integration/test_pgbouncer.py."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from reliable.errors import ConfigError, StoreMisconfigured, StoreUnavailable
from reliable.store import StateStore
from reliable.store import sessions as sessions_module
from reliable.store.db import check_store_url, pooled, read_connection, translate
from reliable.store.engine import connect_engine
from reliable.store.faults import POOLER, Fault, classify
from reliable.store.sessions import (
    IDLE_IN_TRANSACTION_TIMEOUT,
    MARKER,
    STATEMENT_TIMEOUT,
    read_at_connect,
    server_settings_sql,
    session_args,
)

URL = "postgresql+psycopg://app@db:5432/jobs"


def test_a_direct_session_carries_both_bounds_and_the_marker_before_the_urls_own_options() -> None:
    args = session_args(make_url(URL + "?options=-c%20statement_timeout%3D90000"))
    assert args["prepare_threshold"] == 2
    assert args["options"] == ("-c idle_in_transaction_session_timeout=5000 -c statement_timeout=30000 "
                               f"-c {MARKER[0]}={MARKER[1]} -c statement_timeout=90000")  # the URL's wins


def test_a_pooled_session_has_no_startup_options_and_prepares_nothing() -> None:
    assert session_args(make_url(URL + "?pooled=true")) == {"prepare_threshold": None}
    assert pooled(check_store_url(URL + "?pooled=TRUE")) and not pooled(check_store_url(URL + "?pooled=false"))
    assert not pooled(check_store_url(URL))


@pytest.mark.parametrize("query", ["?pooled=yes", "?pooled=1", "?pooled=true&pooled=true"])
def test_a_pooled_value_other_than_true_or_false_is_refused_naming_the_parameter(query: str) -> None:
    with pytest.raises(ConfigError, match="pooled must be true or false"):
        check_store_url(URL + query)


def test_the_deadline_leaves_room_for_a_lock_wait_behind_a_frozen_holder() -> None:
    # A statement may wait on a row lock of another of reliable's transactions, whose idle gaps the
    # server ends after IDLE_IN_TRANSACTION_TIMEOUT: the deadline must not cut that wait short.
    assert STATEMENT_TIMEOUT >= 4 * IDLE_IN_TRANSACTION_TIMEOUT
    assert server_settings_sql("reliable", "jobs") == [
        'ALTER ROLE "reliable" IN DATABASE "jobs" SET idle_in_transaction_session_timeout = 5000',
        'ALTER ROLE "reliable" IN DATABASE "jobs" SET statement_timeout = 30000']


def settings(store: StateStore) -> tuple[str, str, int]:
    with read_connection(store.engine) as conn:
        row = conn.execute(text("SELECT current_setting('statement_timeout'), "
                                "current_setting('idle_in_transaction_session_timeout'), "
                                "(SELECT count(*) FROM pg_prepared_statements)")).one()
    return str(row[0]), str(row[1]), int(row[2])


def test_a_read_at_connect_leaves_the_session_idle_even_when_it_fails(pg_database: str) -> None:
    """What the connect hooks (the session check, the timeline guard) read: one row, then the
    session handed to the pool idle, never idle in a transaction (which the server would end)."""
    url = make_url(pg_database).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as conn:
        assert read_at_connect(conn, "SELECT %(a)s::int, 2", {"a": 1}) == (1, 2)
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
        with pytest.raises(psycopg.errors.DivisionByZero):
            read_at_connect(conn, "SELECT 1 / 0")
        assert conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE


def test_a_direct_store_runs_under_the_bounds(pg_database: str) -> None:
    store = StateStore(pg_database)
    try:
        store.now()
        assert settings(store)[:2] == ("30s", "5s")
    finally:
        store.close()


def test_a_pooled_url_reaches_postgresql_without_options_and_without_prepared_statements(pg_database: str) -> None:
    store = StateStore(pg_database + "?pooled=true")
    try:
        assert store.engine.url.query["pooled"] == "true"  # kept: a worker re-creates its engine from it
        for _ in range(5):  # a direct session would have prepared these by now
            store.now()
            settings(store)
        statement_timeout, _idle, prepared = settings(store)
        assert (statement_timeout, prepared) == ("0", 0)  # the shared server sets no deadline of its own
    finally:
        store.close()


@pytest.fixture
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    monkeypatch.setattr(sessions_module, "STATEMENT_TIMEOUT", 0.2)
    yield 0.2


def test_a_statement_past_the_deadline_is_cancelled_as_an_outage(pg_database: str, short_deadline: float) -> None:
    engine = connect_engine(pg_database)
    try:
        with pytest.raises(StoreUnavailable, match="statement timeout"), read_connection(engine) as conn:
            conn.execute(text("SELECT pg_sleep(5)"))
    finally:
        engine.dispose()


def test_a_prepared_statement_missing_or_there_twice_is_a_pooler_in_the_way(pg_database: str) -> None:
    dsn = make_url(pg_database).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        missing = _raised(lambda: conn.execute("EXECUTE _pg3_0"))
        conn.execute("PREPARE _pg3_1 AS SELECT 1")
        twice = _raised(lambda: conn.execute("PREPARE _pg3_1 AS SELECT 1"))
    for error in (missing, twice):
        assert classify(error).fault is Fault.CONFIGURATION and classify(error).fix == POOLER
        translated = translate(error, make_url(pg_database))
        assert isinstance(translated, StoreMisconfigured) and "add pooled=true" in str(translated)


def _raised(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except psycopg.Error as exc:
        return exc
    raise AssertionError("expected an error")
