"""Job id prefixes on a PostgreSQL database whose collation is linguistic (ICU), where a range in the
database's own order misses ids: ':' '[' '{' sort before digits and letters there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from reliable.store import NewJob, StateStore
from reliable.store.sqlrunner import load_queries

from support import scratch_database

pytestmark = pytest.mark.integration

INDEX = "ix_reliable_jobs_job_id_c"


@pytest.fixture
def icu_store() -> Iterator[StateStore]:
    with scratch_database("reliable_icu_", options="TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' "
                                                  "LOCALE 'C.UTF-8'") as url:
        store = StateStore(url)
        store.upgrade()
        yield store
        store.close()


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
