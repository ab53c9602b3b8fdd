"""The collector's queries use indexes on PostgreSQL with 1,000,000 job rows (EXPLAIN, no timing)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

from reliable.collector import StoreCollector
from reliable.store import StateStore

from support import scratch_database

# 300,000 rows keep the suite fast while making a sequential scan clearly costlier than an index;
# bench/collector_scrape.py measures the scrape on 1,000,000 (RELIABLE_COLLECTOR_ROWS to change it here).
ROWS = int(os.environ.get("RELIABLE_COLLECTOR_ROWS", "300000"))
FILL = """
INSERT INTO reliable_jobs (job_id, queue, actor, message, status, version, lease_id, attempt, retry_count,
    started_at, scheduled_at, dispatched_at, stop_requested_at, updated_at, created_at,
    pause_requested, stop_requested, cancel_requested, checkpoint_version)
SELECT 'job-' || lpad(i::text, 9, '0'), 'q' || (i % 10), 'actor' || (i % 7), '{}',
    CASE WHEN i % 1000 < 900 THEN 'SUCCEEDED' WHEN i % 1000 < 950 THEN 'PENDING'
         WHEN i % 1000 < 970 THEN 'FAILED' WHEN i % 1000 < 980 THEN 'CANCELLED'
         WHEN i % 1000 < 985 THEN 'DEAD' WHEN i % 1000 < 987 THEN 'REVIEW'
         WHEN i % 1000 < 992 THEN 'RETRY_WAIT' WHEN i % 1000 < 995 THEN 'PAUSED'
         WHEN i % 1000 < 996 THEN 'STOPPED' WHEN i % 1000 < 997 THEN 'STOPPING' ELSE 'RUNNING' END,
    1, 1, 1, 0, n - (i % 5000), n - (i % 7000), n - (i % 7000), n - (i % 600), n - (i % 9000), n - 10000,
    false, false, false, 0
FROM generate_series(1, :rows) AS i, (SELECT extract(epoch FROM now())::float8 AS n) AS t
"""


@pytest.fixture(scope="module")
def million_rows() -> Iterator[str]:
    """A dedicated database (not the shared test one) holding 1,000,000 analysed job rows."""
    with scratch_database("reliable_obs_") as url:
        store = StateStore(url)
        store.upgrade()
        with store.engine.begin() as conn:
            conn.execute(text(FILL), {"rows": ROWS})
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE reliable_jobs"))
        store.close()
        yield url


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


@pytest.mark.slow
@pytest.mark.integration
def test_every_collector_query_uses_an_index(million_rows: str) -> None:
    store = StateStore(million_rows)
    executed: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "reliable_jobs" in statement and not statement.startswith("EXPLAIN"):
            executed.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        families = {f.name: f for f in StoreCollector(store).collect()}
        assert families["reliable_collector_errors"].samples[0].value == 0
        assert sum(s.value for s in families["reliable_jobs"].samples) == ROWS * 70 // 1000  # all but final outcomes
        assert len(families["reliable_oldest_pending_timestamp_seconds"].samples) == 10
        assert len(executed) == 3  # counts, oldest PENDING per queue, stuck jobs
        with store.engine.connect() as conn:
            for statement, parameters in executed:
                raw = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar_one()
                plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
                nodes = list(plan_nodes(plan))
                on_jobs = [n for n in nodes if n.get("Relation Name") == "reliable_jobs"]
                assert on_jobs, statement
                assert all(n["Node Type"] != "Seq Scan" for n in on_jobs), (statement, plan)
                assert all("Index" in n["Node Type"] or n["Node Type"] == "Bitmap Heap Scan" for n in on_jobs), (
                    statement, plan)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
        store.close()
