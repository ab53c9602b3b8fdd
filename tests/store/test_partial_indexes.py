"""Migration 0007's partial job indexes on PostgreSQL: what a migrated database has, and what uses them."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.dialects import postgresql

from reliable.states import UNFINISHED_STATES, JobStatus
from reliable.store import StateStore
from reliable.store.alert_facts import GroupAges, StaleJobs
from reliable.store.alert_queries import collect_facts
from reliable.store.gauges import _stuck_stmt, read_gauges
from reliable.store.overview import overview
from reliable.store.processes import leases_held_by
from reliable.store.schema import PARTIAL_JOB_INDEXES, jobs

from support import query_plans, recorded_reads

_STATES = {s.value for s in JobStatus}


def _predicates(store: StateStore) -> dict[str, str | None]:
    with store.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'reliable_jobs'::regclass"))
        return {name: pred for name, pred in rows}


def test_a_migrated_database_has_the_predicates_schema_names(pg_store: StateStore) -> None:
    found = _predicates(pg_store)
    for index in jobs.indexes:
        predicate = found[index.name]
        wanted = PARTIAL_JOB_INDEXES.get(index.name)
        if wanted is None:
            assert predicate is None, f"{index.name} should hold every row, has WHERE {predicate}"
            continue
        assert predicate is not None, f"{index.name} should be partial: WHERE {wanted}"
        # PostgreSQL rewrites the text (casts, ANY(ARRAY[...])): compare the states it names.
        named = {s for s in _STATES if f"'{s}'" in predicate}
        assert named == {s for s in _STATES if f"'{s}'" in wanted}, (index.name, predicate)


# 20,000 jobs, 90% SUCCEEDED, the rest spread over the other states; a few in a workflow.
_FILL = """
INSERT INTO reliable_jobs (job_id, queue, actor, message, status, version, lease_id, attempt, retry_count,
    started_at, scheduled_at, dispatched_at, retry_at, lease_expires_at, workflow_id, updated_at, created_at,
    pause_requested, stop_requested, cancel_requested, checkpoint_version)
SELECT 'job-' || i, 'q' || (i % 5), 'a' || (i % 7), '{}',
    CASE WHEN i % 100 < 90 THEN 'SUCCEEDED' WHEN i % 100 < 93 THEN 'PENDING' WHEN i % 100 < 95 THEN 'RUNNING'
         WHEN i % 100 < 97 THEN 'RETRY_WAIT' WHEN i % 100 < 98 THEN 'FAILED' ELSE 'DEAD' END,
    1, 1, 1, 0, i, i, i, i, i, CASE WHEN i % 1000 = 0 THEN 'w' || i END, i, i, false, false, false, 0
FROM generate_series(1, 20000) AS i
"""


@pytest.fixture
def filled(pg_store: StateStore) -> StateStore:
    with pg_store.engine.begin() as conn:
        conn.execute(text(_FILL))
    with pg_store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE reliable_jobs"))  # this table's statistics, not an earlier test's
    return pg_store


def _plan(store: StateStore, stmt: Any) -> str:
    sql = str(stmt.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as conn:
        return "\n".join(row[0] for row in conn.execute(text("EXPLAIN " + sql)))


@pytest.mark.parametrize(("index", "where"), [
    ("ix_reliable_jobs_status_lease", (jobs.c.status.in_(["RUNNING", "STOPPING"]), jobs.c.lease_expires_at < 50.0)),
    ("ix_reliable_jobs_status_retry", (jobs.c.status == "RETRY_WAIT", jobs.c.retry_at < 50.0)),
    ("ix_reliable_jobs_status_dispatched", (jobs.c.status == "PENDING", jobs.c.dispatched_at < 50.0)),
    ("ix_reliable_jobs_workflow", (jobs.c.workflow_id == "w",)),
])
def test_recovery_and_collector_queries_use_their_partial_index(filled: StateStore, index: str,
                                                                where: tuple[Any, ...]) -> None:
    plan = _plan(filled, select(jobs.c.job_id).where(*where))
    assert index in plan, plan


def test_the_stuck_running_count_reads_the_running_jobs_only(filled: StateStore) -> None:
    # No (status, started_at) index since migration 0018: the RUNNING jobs (a few per worker thread)
    # are found by an index on the status, (status, lease_expires_at) INCLUDE (started_at, queue)
    # or (status, updated_at), whichever the planner costs lower; never by a scan of the table.
    plan = _plan(filled, _stuck_stmt([JobStatus.RUNNING], {JobStatus.RUNNING: 60.0}, 110.0))
    assert "Seq Scan" not in plan, plan
    assert any("Index Cond" in line and "'RUNNING'" in line for line in plan.splitlines()), plan


def test_a_write_finds_its_row_by_primary_key(filled: StateStore) -> None:
    with filled.engine.connect() as conn:
        plan = "\n".join(row[0] for row in conn.execute(text(
            "EXPLAIN UPDATE reliable_jobs SET version = version WHERE job_id = 'j' "
            "AND (status || '') = ANY('{PENDING,RETRY_WAIT}')")))
    assert "reliable_jobs_pkey" in plan


def test_the_readers_of_running_jobs_never_scan_the_job_table(filled: StateStore) -> None:
    """Since migration 0018 the RUNNING and STOPPING jobs are in neither (status, queue,
    scheduled_at) nor a (status, started_at) index: every read of the collector, the overview (the
    console's overview and queues pages), the alert facts about stale jobs and the workers page
    still finds its rows through an index."""
    sla = {JobStatus.RUNNING: 60.0, JobStatus.STOPPING: 60.0, JobStatus.PAUSED: 60.0}
    with recorded_reads(filled.engine, "reliable_jobs") as statements:
        read_gauges(filled, states=set(UNFINISHED_STATES), sla=sla)
        overview(filled)
        collect_facts(filled, [StaleJobs(("RUNNING",), 60.0), StaleJobs(("RUNNING", "STOPPING"), 60.0, "checkpoint"),
                               GroupAges("PENDING", 60.0), GroupAges("RETRY_WAIT", 60.0)], 20_000.0)
        leases_held_by(filled, ["w1", "w2"])
    assert len(statements) >= 8, statements
    for statement, plan in query_plans(filled.engine, statements):
        assert "Seq Scan on reliable_jobs" not in plan, f"{statement}\n{plan}"
