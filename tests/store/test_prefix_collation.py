"""Job id prefixes on a PostgreSQL database whose collation is linguistic (ICU), where a range in the
database's own order misses ids: ':' '[' '{' sort before digits and letters there."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from reliable.store import NewJob, StateStore
from reliable.store.sqlrunner import load_queries

from support import PG_ADMIN_URL, port_open, require_service

pytestmark = pytest.mark.integration

INDEX = "ix_reliable_jobs_job_id_c"


@pytest.fixture
def icu_store() -> Iterator[StateStore]:
    require_service("PostgreSQL", port_open("127.0.0.1", 5432))
    name = f"reliable_icu_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu "
                          "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"))
    store = StateStore(PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}")
    store.upgrade()
    yield store
    store.close()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _has_index(store: StateStore) -> bool:
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT 1 FROM pg_indexes WHERE indexname = :n"), {"n": INDEX}).first() is not None


def test_a_prefix_ending_in_9_finds_its_job_under_icu(icu_store: StateStore) -> None:
    ids = ["3f2a9c19-7c1e-4d6a", "3f2a9c1a-0000", "3f2a9c1:x", "3f2a9c1[y", "3f2a9c20"]
    for job_id in ids:
        icu_store.register(NewJob(job_id, "q", "a", {"args": [], "kwargs": {}, "options": {}}))
    assert icu_store.job_ids_with_prefix("3f2a9c19", limit=10) == ["3f2a9c19-7c1e-4d6a"]
    # Character order, whatever the collation says.
    assert icu_store.job_ids_with_prefix("3f2a9c1", limit=10) == ["3f2a9c19-7c1e-4d6a", "3f2a9c1:x",
                                                                 "3f2a9c1[y", "3f2a9c1a-0000"]
    assert _has_index(icu_store)


def test_the_character_order_query_is_served_by_its_index(icu_store: StateStore) -> None:
    sql = load_queries("postgresql")["job_ids_by_prefix_c"]
    raw = icu_store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("SET enable_seqscan = off")  # a few rows: the planner would scan them all
        cursor.execute(f"EXPLAIN {sql}", {"prefix": "ab", "prefix_end": "ac", "limit": 11})
        plan = " ".join(row[0] for row in cursor.fetchall())
        assert INDEX in plan, plan
    finally:
        raw.rollback()
        raw.close()


def test_a_c_collated_database_gets_no_extra_index(pg_store: StateStore) -> None:
    assert not _has_index(pg_store)  # the primary key serves the range: no insertion cost added
