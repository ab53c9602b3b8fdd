"""The latency and history reads (reliable.store.job_stats) and the overview on PostgreSQL with many
jobs and thousands of queues, against the console's 200 ms budget.

    .venv/bin/python bench/history_queries.py [--jobs 100000] [--queues 2000] [--runs 7]

Creates a throw-away database, migrates it, loads `--jobs` jobs over `--queues` queues with
INSERT ... SELECT generate_series (70% SUCCEEDED within the day, 20% PENDING of which a tenth due
later, 5% RETRY_WAIT, 5% FAILED) and the aggregates full to every resolution's horizon for one
actor per queue, each queue's total and all queues' (120 one-minute, 100 quarter-hour, 192 hour and
8 day rows each: the table's bound),
VACUUM ANALYZE, then times each read (median and max of `--runs` after a warm-up).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

from sqlalchemy import create_engine, text

from reliable.store import StateStore
from reliable.store.job_stats import COLUMNS, RESOLUTIONS, history, latency
from reliable.store.overview import overview

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def load(url: str, jobs: int, queues: int) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        now = float(conn.execute(text("SELECT extract(epoch FROM now())")).scalar_one())
        conn.execute(text("""
            INSERT INTO reliable_jobs (job_id, queue, actor, message, status, created_at, updated_at,
                                       scheduled_at, retry_at, attempt)
            SELECT 'job-' || n, 'queue-' || (n % :queues), 'actor', '{}',
                   CASE WHEN n % 20 < 14 THEN 'SUCCEEDED' WHEN n % 20 < 18 THEN 'PENDING'
                        WHEN n % 20 = 18 THEN 'RETRY_WAIT' ELSE 'FAILED' END,
                   :now - (n % 86400), :now - (n % 86400),
                   CASE WHEN n % 200 = 15 THEN :now + 3600 ELSE :now - (n % 86400) END,
                   CASE WHEN n % 20 = 18 THEN :now + 60 END, 1
            FROM generate_series(1, :jobs) AS n"""), {"queues": queues, "now": now, "jobs": jobs})
        histogram = ", ".join(f"(random() * 5)::int AS {c}" for c in COLUMNS if c[0] in "wr" and c[1:].isdigit())
        names = ", ".join(c for c in COLUMNS if c[0] in "wr" and c[1:].isdigit())
        for resolution, kept in RESOLUTIONS.items():
            conn.execute(text(f"""
                INSERT INTO reliable_job_stats (resolution, bucket, queue, actor, succeeded, failed, retried,
                                                other, wait_sum, run_sum, {names})
                SELECT :r, (floor(:now / :r) - b) * :r, k.queue, k.actor, 50, 2, 1, 0, 10.0, 20.0, {histogram}
                FROM generate_series(0, :buckets - 1) AS b,
                     (SELECT 'queue-' || q AS queue, 'actor' AS actor FROM generate_series(0, :queues - 1) AS q
                      UNION ALL SELECT 'queue-' || q, '' FROM generate_series(0, :queues - 1) AS q
                      UNION ALL SELECT '', '') AS k"""),
                {"r": resolution, "now": now, "buckets": int(kept // resolution), "queues": queues})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()


def timed(name: str, call: Callable[[], object], runs: int) -> None:
    call()
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    print(f"{name:<22} median {statistics.median(times):7.1f} ms   max {max(times):7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    name = f"reliable_history_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = ADMIN.rsplit("/", 1)[0] + f"/{name}"
    try:
        migrated = StateStore(url)
        migrated.upgrade()
        migrated.close()
        began = time.perf_counter()
        load(url, args.jobs, args.queues)
        store = StateStore(url)
        with store.read() as conn:
            rows = conn.execute(text("SELECT count(*) FROM reliable_job_stats")).scalar_one()
        print(f"{args.jobs:,} jobs, {args.queues:,} queues, {rows:,} aggregate rows "
              f"(loaded in {time.perf_counter() - began:.0f} s)")
        for window in ("1h", "24h", "7d"):
            timed(f"latency({window})", lambda w=window: latency(store, window=w), args.runs)
        for window in ("1h", "24h", "7d"):
            timed(f"history({window})", lambda w=window: history(store, window=w), args.runs)
        try:
            timed("overview() (all)", lambda: overview(store), args.runs)
        except Exception as exc:  # with thousands of queues the overview's own reads may time out
            print(f"overview() failed: {type(exc).__name__}")
        store.close()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
