"""Migration 0019's event indexes: no (at) index, (event, at) without the uncounted kinds on
PostgreSQL; every reader of events over a window still finds its rows through an index."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from reliable.store import StateStore, migrate
from reliable.store.alert_facts import (
    ATTEMPT_FAILURE_EVENTS,
    DEAD_EVENTS,
    FAILURE_EVENTS,
    LEASE_EXPIRY_EVENTS,
    SUCCESS_EVENTS,
    UNCOUNTED_EVENTS,
    EventCounts,
    JobSample,
    check_counted,
)
from reliable.store.alert_queries import collect_facts, sample_job_ids
from reliable.store.overview import overview

from support import query_plans, recorded_reads

_KINDS = ("claim", "succeed", "enqueued", "checkpoint", "retry_scheduled", "fail", "dead_letter", "lease_expired")

# 40,000 events: the kinds every job writes most, a few of the others.
_FILL = f"""
INSERT INTO reliable_job_events (job_id, at, event, queue, actor, version)
SELECT 'job-' || (i / 4), i, (ARRAY{list(_KINDS)!r})[CASE WHEN i % 100 < 97 THEN 1 + i % 4 ELSE 5 + i % 4 END],
    'q' || (i % 5), 'a' || (i % 7), 1
FROM generate_series(1, 40000) AS i
"""


def _event_indexes(engine: Any) -> dict[str, str | None]:
    with engine.connect() as conn:
        if engine.dialect.name != "postgresql":
            return {ix["name"]: None for ix in inspect(conn).get_indexes("reliable_job_events")}
        return dict(conn.execute(text(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'reliable_job_events'::regclass "
            "AND NOT i.indisprimary")).all())



def _migrate(engine: Any, revision: str, *, down: bool = False) -> None:
    config = migrate._config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)


def test_the_upgrade_drops_the_at_index_and_the_downgrade_restores_it(fresh_url: str) -> None:
    engine = create_engine(fresh_url)
    postgres = engine.dialect.name == "postgresql"
    try:
        _migrate(engine, "0019")
        found = _event_indexes(engine)
        assert set(found) == {"ix_reliable_job_events_job", "ix_reliable_job_events_event_at"}
        if postgres:  # the predicate names exactly the uncounted kinds, as schema.py does
            predicate = found["ix_reliable_job_events_event_at"] or ""
            assert {k for k in _KINDS if f"'{k}'" in predicate} == set(UNCOUNTED_EVENTS), predicate
        _migrate(engine, "0018", down=True)
        assert _event_indexes(engine) == {"ix_reliable_job_events_job": None, "ix_reliable_job_events_at": None,
                                          "ix_reliable_job_events_event_at": None}
        _migrate(engine, "head")
        assert "ix_reliable_job_events_at" not in _event_indexes(engine)
    finally:
        engine.dispose()


def test_a_count_must_name_kinds_that_are_indexed() -> None:
    with pytest.raises(ValueError, match="name the event kinds"):
        EventCounts((), 60.0)
    with pytest.raises(ValueError, match="claim events are not indexed"):
        EventCounts(("claim", "succeed"), 60.0)
    with pytest.raises(ValueError, match="name the event kinds"):
        JobSample(queue="q")
    JobSample(queue="q", states=("RUNNING",))  # a sample by state reads the jobs, not the events
    check_counted(SUCCESS_EVENTS + FAILURE_EVENTS + ATTEMPT_FAILURE_EVENTS + DEAD_EVENTS + LEASE_EXPIRY_EVENTS)


@pytest.fixture
def filled(pg_store: StateStore) -> StateStore:
    with pg_store.engine.begin() as conn:
        conn.execute(text(_FILL))
    with pg_store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE reliable_job_events"))
    return pg_store


def test_the_readers_of_events_over_a_window_never_scan_the_event_table(filled: StateStore) -> None:
    """The alert rules' counts and samples, the overview's series and the rate-limit count all name
    their kinds: (event, at) serves each, without the (at) index and without the uncounted kinds."""
    kinds = [DEAD_EVENTS, ATTEMPT_FAILURE_EVENTS, LEASE_EXPIRY_EVENTS, ("retry_scheduled",),
             ("retry_scheduled", "dead_letter"), SUCCESS_EVENTS + ATTEMPT_FAILURE_EVENTS,
             SUCCESS_EVENTS + FAILURE_EVENTS]
    with recorded_reads(filled.engine, "reliable_job_events") as statements:
        overview(filled)
        collect_facts(filled, [EventCounts(k, 600.0) for k in kinds] + [EventCounts(DEAD_EVENTS, 600.0,
                                                                                    still_in=("DEAD",))], 40_000.0)
        for k in kinds:
            sample_job_ids(filled, JobSample(queue="q1", events=k, since=39_000.0))
        filled.count_recent_events("retry_scheduled", actor="a1", window=600.0)
    assert len(statements) >= 2 * len(kinds) + 2, statements
    for statement, plan in query_plans(filled.engine, statements):
        assert "Seq Scan on reliable_job_events" not in plan, f"{statement}\n{plan}"
        assert "ix_reliable_job_events_event_at" in plan, f"{statement}\n{plan}"


def _primary_key(engine: Any) -> list[str]:
    with engine.connect() as conn:
        return list(inspect(conn).get_pk_constraint("reliable_job_events")["constrained_columns"])


def test_0020_makes_job_id_and_id_the_primary_key_on_postgresql_and_its_downgrade_restores_id(fresh_url: str) -> None:
    engine = create_engine(fresh_url)
    postgres = engine.dialect.name == "postgresql"
    try:
        _migrate(engine, "0020")
        if postgres:  # the primary key serves a job's reads: no separate (job_id, id) index
            assert _primary_key(engine) == ["job_id", "id"]
            assert set(_event_indexes(engine)) == {"ix_reliable_job_events_event_at"}
        else:  # SQLite: the id is the row's key; the (job_id, id) index stays
            assert _primary_key(engine) == ["id"]
            assert set(_event_indexes(engine)) == {"ix_reliable_job_events_job", "ix_reliable_job_events_event_at"}
        _migrate(engine, "0019", down=True)
        assert _primary_key(engine) == ["id"]
        assert set(_event_indexes(engine)) == {"ix_reliable_job_events_job", "ix_reliable_job_events_event_at"}
        _migrate(engine, "head")
        assert _primary_key(engine) == (["job_id", "id"] if postgres else ["id"])
    finally:
        engine.dispose()


def test_a_jobs_own_events_are_read_by_the_primary_key(filled: StateStore) -> None:
    """Its history, its attempts, a count of its events: each a range of (job_id, id) on PostgreSQL."""
    with recorded_reads(filled.engine, "reliable_job_events") as statements:
        filled.events("job-7")
        filled.events("job-7", limit=2)
        filled.attempts("job-7")
        filled.count_job_events("job-7", "fail", since_fresh_budget=True)
    assert len(statements) >= 4, statements
    for statement, plan in query_plans(filled.engine, statements):
        assert "Seq Scan on reliable_job_events" not in plan, f"{statement}\n{plan}"
        assert "reliable_job_events_pkey" in plan, f"{statement}\n{plan}"
