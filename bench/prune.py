"""`reliable db prune` at scale on PostgreSQL: rows/s, and what workers running meanwhile waited.

    .venv/bin/python bench/prune.py [--jobs 1000000] [--threads 2] [--batch-size 1000]

Creates a database of its own on the shared PostgreSQL (BENCH_PG, the admin URL), migrates it, and
bulk-inserts `--jobs` jobs that finished 40 days ago, each with the rows a claimed job writes (3
events, 1 attempt) by INSERT ... SELECT generate_series. Then `--threads` worker threads run real
job lifecycles through the store (register, claim, succeed: the worker's hot path without the
broker) for a baseline of 10 s, go on while `reliable.store.retention.prune` deletes everything
older than 30 days (what `reliable db prune --older-than 30d --yes` runs), and for 5 s after.

Prints the prune's rows/s and its longest batch, each worker operation's latency (p50, p99, max)
before and during the prune, and the longest any session of the database was seen waiting on a
lock (pg_stat_activity sampled every 10 ms; a lock wait shorter than that may go unseen). The
database is dropped at the end. docs/performance.md reads these figures.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Callable

from sqlalchemy import create_engine, text
from store_transactions import percentile

from reliable import Event, StateStore
from reliable.store import NewJob, retention

PG_ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
DAY = 86400.0

_FILL = [
    """INSERT INTO reliable_jobs (job_id, queue, actor, message, status, version, lease_id, attempt, attempt_id,
           worker_id, started_at, finished_at, created_at, updated_at)
       SELECT 'old-' || g, 'bench', 'noop', '{"args": [1], "kwargs": {}}', 'SUCCEEDED', 3, 1, 1, 'att-' || g,
              'w', CAST(:base AS float8) + g * 0.001, CAST(:base AS float8) + g * 0.001, CAST(:base AS float8) + g * 0.001, CAST(:base AS float8) + g * 0.001
       FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) g""",
    """INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, attempt, lease_id)
       SELECT 'old-' || g, CAST(:base AS float8) + g * 0.001, e.event, e.f, e.t, 1, 1
       FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) g
       CROSS JOIN (VALUES ('enqueued', NULL, 'PENDING'), ('claim', 'PENDING', 'RUNNING'),
                          ('succeed', 'RUNNING', 'SUCCEEDED')) AS e(event, f, t)""",
    """INSERT INTO reliable_attempts (attempt_id, job_id, attempt, lease_id, worker_id, started_at, ended_at, outcome)
       SELECT 'att-' || g, 'old-' || g, 1, 1, 'w', CAST(:base AS float8) + g * 0.001, CAST(:base AS float8) + g * 0.001, 'succeed'
       FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) g""",
]


class Worker(threading.Thread):
    """Runs job lifecycles through the store until stopped, timing each operation."""

    def __init__(self, store: StateStore, name: str) -> None:
        super().__init__(daemon=True)
        self.store, self.tag = store, name
        self.phase = "baseline"
        self.latencies: dict[str, list[float]] = {}
        self.stop = threading.Event()
        self.jobs = 0

    def _timed(self, call: Callable[[], object]) -> None:
        began = time.perf_counter()
        call()
        self.latencies.setdefault(self.phase, []).append(time.perf_counter() - began)

    def run(self) -> None:
        while not self.stop.is_set():
            job_id = f"new-{self.tag}-{uuid.uuid4().hex}"
            self._timed(lambda: self.store.register(NewJob(job_id, queue="bench", actor="noop",
                                                           message={"args": [1], "kwargs": {}})))
            claim = self.store.claim(job_id, worker_id=self.tag, lease_ttl=30)
            self._timed(lambda: self.store.finish(job_id, claim.lease_id, Event.SUCCEED, worker_id=self.tag))
            self.jobs += 1


class LockWatch(threading.Thread):
    """Samples pg_stat_activity: the longest a session of `database` was seen waiting on a lock."""

    def __init__(self, admin: str, database: str) -> None:
        super().__init__(daemon=True)
        self.engine = create_engine(admin, isolation_level="AUTOCOMMIT")
        self.database = database
        self.longest = 0.0
        self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        query = text("SELECT coalesce(max(extract(epoch FROM clock_timestamp() - state_change)), 0), count(*) "
                     "FROM pg_stat_activity WHERE datname = :db AND wait_event_type = 'Lock'")
        with self.engine.connect() as conn:
            while not self.stop.is_set():
                waited, waiting = conn.execute(query, {"db": self.database}).one()
                self.longest = max(self.longest, float(waited))
                self.samples += int(waiting)
                time.sleep(0.01)


def fill(url: str, jobs: int) -> float:
    """Insert `jobs` finished jobs with their events and attempts; seconds taken."""
    engine = create_engine(url)
    began = time.perf_counter()
    with engine.connect() as conn:
        base = float(conn.execute(text("SELECT extract(epoch FROM now())")).scalar_one()) - 40 * DAY
    chunk = 100_000
    for lo in range(1, jobs + 1, chunk):
        with engine.begin() as conn:
            for statement in _FILL:
                conn.execute(text(statement), {"base": base, "lo": lo, "hi": min(jobs, lo + chunk - 1)})
        print(f"  inserted {min(jobs, lo + chunk - 1)} jobs", flush=True)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()
    return time.perf_counter() - began


def summary(values: list[float]) -> str:
    """p50, p99 and max of `values` (seconds) in ms."""
    if not values:
        return "no operations"
    ordered = sorted(values)
    return (f"p50 {percentile(ordered, 0.5) * 1000:.1f} ms  p99 {percentile(ordered, 0.99) * 1000:.1f} ms  "
            f"max {ordered[-1] * 1000:.0f} ms  ({len(values)} ops)")


def main() -> None:
    """Create, fill, prune under load, report, drop."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=retention.DEFAULT_BATCH)
    args = parser.parse_args()
    database = f"reliable_bench_prune_{os.getpid()}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{database}"'))
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + database
    try:
        StateStore(url).upgrade()
        print(f"filling {database} with {args.jobs} finished jobs (3 events and 1 attempt each)", flush=True)
        print(f"filled in {fill(url, args.jobs):.0f}s", flush=True)
        store = StateStore(url, max_connections=args.threads + 2)
        workers = [Worker(store, f"w{i}") for i in range(args.threads)]
        watch = LockWatch(PG_ADMIN, database)
        watch.start()
        for worker in workers:
            worker.start()
        time.sleep(10)
        for worker in workers:
            worker.phase = "prune"
        baseline_lock = watch.longest
        result = retention.prune(store, store.now() - 30 * DAY, batch_size=args.batch_size, operator="bench",
                                 reason="bench/prune.py")
        for worker in workers:
            worker.phase = "after"
        time.sleep(5)
        for worker in workers:
            worker.stop.set()
            worker.join()
        watch.stop.set()
        watch.join()
        counts = result.counts
        print(f"\npruned {counts.jobs} jobs, {counts.events} events, {counts.attempts} attempts: {counts.rows} rows "
              f"in {result.seconds:.1f}s = {result.rows_per_second:.0f} rows/s ({counts.jobs / result.seconds:.0f} "
              f"jobs/s), {result.batches} batches of {args.batch_size}, longest batch "
              f"{result.longest_batch * 1000:.0f} ms")
        for phase in ("baseline", "prune", "after"):
            values = [v for worker in workers for v in worker.latencies.get(phase, [])]
            print(f"worker store ops, {phase:>8}: {summary(values)}")
        print(f"longest lock wait seen (pg_stat_activity every 10 ms): {watch.longest * 1000:.0f} ms "
              f"({watch.samples} waiting samples; before the prune {baseline_lock * 1000:.0f} ms)")
        store.close()
        watch.engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
