"""How long one StoreCollector scrape takes on PostgreSQL with 1,000,000 job rows.

    .venv/bin/python bench/collector_scrape.py [--admin-url URL] [--rows N] [--scrapes N] [--proposed-index]

Creates a throw-away database, migrates it, inserts the rows in one INSERT ... SELECT
generate_series (a realistic mix: 90% SUCCEEDED, 5% PENDING backlog, the rest spread over the
other states, 10 queues), runs VACUUM ANALYZE, then times full collections (the queries plus
building the families) and each query. --proposed-index adds an index on (status, queue,
scheduled_at) afterwards and measures again (only in the throw-away database). Prints ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections import defaultdict
from typing import Any

from sqlalchemy import create_engine, event, text

from reliable.collector import StoreCollector
from reliable.store import StateStore

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
PROPOSED_INDEX = "CREATE INDEX bench_status_queue_scheduled ON reliable_jobs (status, queue, scheduled_at)"


def measure(store: StateStore, scrapes: int) -> tuple[list[float], dict[str, list[float]]]:
    """Time `scrapes` full collections (after one warm-up) and every query inside them, in ms."""
    collector = StoreCollector(store)
    per_query: dict[str, list[float]] = defaultdict(list)

    def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        conn.info["bench_started"] = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        label = " ".join(statement.split())[:70]
        per_query[label].append((time.perf_counter() - conn.info.pop("bench_started")) * 1000)

    list(collector.collect())
    event.listen(store.engine, "before_cursor_execute", before)
    event.listen(store.engine, "after_cursor_execute", after)
    totals = []
    for _ in range(scrapes):
        started = time.perf_counter()
        list(collector.collect())
        totals.append((time.perf_counter() - started) * 1000)
    event.remove(store.engine, "before_cursor_execute", before)
    event.remove(store.engine, "after_cursor_execute", after)
    return totals, per_query


def report(title: str, totals: list[float], per_query: dict[str, list[float]]) -> None:
    """Print the median and p95 of the scrapes, and the median of each query."""
    p95 = sorted(totals)[max(0, int(len(totals) * 0.95) - 1)]
    print(f"{title}: scrape median {statistics.median(totals):.1f} ms, p95 {p95:.1f} ms "
          f"(min {min(totals):.1f}, {len(totals)} scrapes)")
    for label, values in per_query.items():
        print(f"    {statistics.median(values):7.1f} ms  {label}")


def main() -> None:
    """Create, fill and measure; drop the database unless --keep."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--proposed-index", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    name = f"reliable_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
    store = StateStore(url)
    try:
        store.upgrade()
        started = time.perf_counter()
        with store.engine.begin() as conn:
            conn.execute(text(FILL), {"rows": args.rows})
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE reliable_jobs"))
        print(f"{args.rows} rows inserted and analysed in {time.perf_counter() - started:.1f} s ({name})")
        report("current schema", *measure(store, args.scrapes))
        if args.proposed_index:
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text(PROPOSED_INDEX))
                conn.execute(text("ANALYZE reliable_jobs"))
            report("with (status, queue, scheduled_at)", *measure(store, args.scrapes))
    finally:
        store.close()
        if not args.keep:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
