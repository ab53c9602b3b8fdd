"""Store transactions per second: claim (CAS + attempt + event) and success, on SQLite and PostgreSQL.

    .venv/bin/python bench/store_transactions.py [--jobs 3000] [--threads 1,8]

Each measurement registers fresh jobs, then claims them all, then marks them all SUCCEEDED, from
1 or N threads of one process; then runs whole lifecycles (claim + success per job, as a worker
thread does). Prints transactions/s per database, operation and thread count, job lifecycles/s,
and the claim latency (p50, p99) as the caller sees it; PostgreSQL with and without group commit.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, text

from reliable import Event, StateStore
from reliable.store import NewJob

PG_ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def timed(threads: int, jobs: list[str], op: Callable[[str], None]) -> float:
    chunks = [jobs[i::threads] for i in range(threads)]
    workers = [threading.Thread(target=lambda c=chunk: [op(j) for j in c]) for chunk in chunks]
    started = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(jobs) / (time.perf_counter() - started)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(url: str, n: int, threads: int, group_commit: bool = False) -> tuple[float, float, float, float, float]:
    store = StateStore(url, max_connections=max(threads, 5), group_commit=group_commit)
    ids = [f"{uuid.uuid4().hex}" for _ in range(n)]
    whole = [f"{uuid.uuid4().hex}" for _ in range(n)]
    store.register_many([NewJob(i, "bench", "noop", {}) for i in ids + whole])
    leases: dict[str, int] = {}
    latencies: list[float] = []

    def claim(job_id: str) -> None:
        started = time.perf_counter()
        leases[job_id] = store.claim(job_id, worker_id="bench", lease_ttl=60).lease_id
        latencies.append(time.perf_counter() - started)

    def succeed(job_id: str) -> None:
        store.finish(job_id, leases[job_id], Event.SUCCEED)

    def lifecycle(job_id: str) -> None:  # what a worker thread does per job: claim, then succeed
        lease = store.claim(job_id, worker_id="bench", lease_ttl=60).lease_id
        store.finish(job_id, lease, Event.SUCCEED)

    claims = timed(threads, ids, claim)
    successes = timed(threads, ids, succeed)
    lifecycles = timed(threads, whole, lifecycle)
    store.close()
    return claims, successes, lifecycles, 1000 * percentile(latencies, 0.5), 1000 * percentile(latencies, 0.99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--threads", default="1,8")
    args = parser.parse_args()
    name = f"reliable_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    pg_url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    print(f"{'database':>10} {'threads':>7} {'claims/s':>9} {'success/s':>9} {'lifecycles/s':>12} "
          f"{'claim p50 ms':>12} {'p99 ms':>7}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite_url = f"sqlite:///{Path(tmp) / 'bench.db'}"
            for label, url, group_commit in (("sqlite", sqlite_url, False), ("postgresql", pg_url, False),
                                             ("pg+group", pg_url, True)):
                StateStore(url).upgrade()
                for threads in (int(t) for t in args.threads.split(",")):
                    claims, successes, lifecycles, p50, p99 = measure(url, args.jobs, threads, group_commit)
                    print(f"{label:>10} {threads:>7} {claims:9.0f} {successes:9.0f} {lifecycles:12.0f} "
                          f"{p50:12.2f} {p99:7.2f}", flush=True)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
