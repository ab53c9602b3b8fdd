"""How far one PostgreSQL store goes: job lifecycles/s against the number of concurrent clients.

    .venv/bin/python bench/store_scaling.py [--jobs 4000] [--levels 1x1,1x4,2x4,2x8,4x8,4x16]

No broker and no Dramatiq: each level runs P processes x T threads that do, per job, what a
worker thread does in the store (claim: CAS + new lease_id + attempt + event; then the success:
CAS on the lease + event), on jobs registered beforehand in batches (what `enqueue` costs is
measured apart, as registrations/s). Per level it prints lifecycles/s, the claim latency (p50,
p99), the CPU PostgreSQL spent per job (all `postgres:` processes, from /proc), the client CPU per
job, the WAL written per job, and what PostgreSQL's sessions were waiting on (sampled from
pg_stat_activity every 20 ms, as type:event): `CPU` (running), `IO:WALSync` and `LWLock:WALWrite`
(waiting for the WAL flush: the disk's fsync latency), `Lock:*` (row or tuple contention),
`Client:ClientRead` (waiting for the client: the clients are the bottleneck).

The ceiling of one store is where lifecycles/s stops growing with clients; its cause is the
dominant wait at that point. docs/scaling.md reads these figures.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from store_transactions import percentile
from throughput import proc_cpu

from reliable import Event, StateStore
from reliable.store import NewJob

PG_ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def postgres_cpu() -> float:
    """CPU seconds (user + system) of every PostgreSQL server process on this machine."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if (stat.parent / "comm").read_text().strip() in {"postgres", "postmaster"}:
                total += proc_cpu(stat)
        except (OSError, IndexError, ValueError):
            continue
    return total


def client(url: str, job_ids: list[str], threads: int, group_commit: bool,
           out: multiprocessing.Queue, done: Any) -> None:  # type: ignore[type-arg]
    """One client process: `threads` threads claim and succeed their share of `job_ids`."""
    store = StateStore(url, max_connections=threads + 1, group_commit=group_commit)
    latencies: list[float] = []
    lock = threading.Lock()

    def run(chunk: list[str]) -> None:
        mine: list[float] = []
        for job_id in chunk:
            started = time.perf_counter()
            lease = store.claim(job_id, worker_id=f"bench-{os.getpid()}", lease_ttl=60).lease_id
            mine.append(time.perf_counter() - started)
            store.finish(job_id, lease, Event.SUCCEED)
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=run, args=(job_ids[i::threads],)) for i in range(threads)]
    cpu = time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put((time.process_time() - cpu, latencies))
    done.wait(60)  # keep the server sessions alive until their CPU time has been read
    store.close()


def sample_waits(url: str, databases: list[str], stop: threading.Event, counts: Counter[str]) -> None:
    """Count what the benchmark databases' active sessions wait on, every 20 ms, until `stop`."""
    engine = create_engine(url.rsplit("/", 1)[0] + "/postgres")
    with engine.connect() as conn:
        while not stop.is_set():
            rows = conn.execute(text(
                "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS kind, count(*) FROM pg_stat_activity "
                "WHERE datname = ANY(:dbs) AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1"),
                {"dbs": databases}).all()
            conn.commit()
            for kind, n in rows:
                counts[kind] += n
            stop.wait(0.02)
    engine.dispose()


def wal_lsn(url: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        value = int(conn.execute(text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")).scalar_one())
    engine.dispose()
    return value


def shard_of(job_id: str, shards: int) -> int:
    """The shard a job lives in: a hash of its id, fixed when it is created (docs/scaling.md)."""
    return int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=8).digest(), "big") % shards


def run_level(urls: list[str], databases: list[str], jobs: int, processes: int, threads: int,
              group_commit: bool) -> str:
    ids = [uuid.uuid4().hex for _ in range(jobs)]
    by_shard: list[list[str]] = [[] for _ in urls]
    for job_id in ids:
        by_shard[shard_of(job_id, len(urls))].append(job_id)
    started = time.perf_counter()
    for url, mine in zip(urls, by_shard, strict=True):
        store = StateStore(url)
        for i in range(0, len(mine), 500):
            store.register_many([NewJob(j, "bench", "noop", {}) for j in mine[i:i + 500]])
        store.close()
    registrations = jobs / (time.perf_counter() - started)
    out: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    context = multiprocessing.get_context("fork")
    done = context.Event()
    procs = []
    for shard, (url, mine) in enumerate(zip(urls, by_shard, strict=True)):  # each shard gets its own clients
        share = [i for i in range(processes) if i % len(urls) == shard]
        procs += [context.Process(target=client, args=(url, mine[k::len(share)], threads, group_commit, out, done))
                  for k in range(len(share))]
    waits: Counter[str] = Counter()
    stop = threading.Event()
    sampler = threading.Thread(target=sample_waits, args=(urls[0], databases, stop, waits))
    wal, pg_cpu = wal_lsn(urls[0]), postgres_cpu()
    sampler.start()
    started = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - started
    pg_cpu, wal = postgres_cpu() - pg_cpu, wal_lsn(urls[0]) - wal
    done.set()
    for p in procs:
        p.join(timeout=60)
    stop.set()
    sampler.join()
    latencies = [lat for _, lats in results for lat in lats]
    client_cpu = sum(cpu for cpu, _ in results)
    total = sum(waits.values()) or 1
    top = ", ".join(f"{kind} {100 * n / total:.0f}%" for kind, n in waits.most_common(3))
    return (f"{processes}x{threads:<3} {processes * threads:>7} {jobs / elapsed:12.0f} {registrations:10.0f} "
            f"{1000 * percentile(latencies, 0.5):8.2f} {1000 * percentile(latencies, 0.99):8.2f} "
            f"{1000 * pg_cpu / jobs:10.2f} {1000 * client_cpu / jobs:10.2f} {wal / jobs / 1024:8.1f}  {top}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4000, help="job lifecycles per level")
    parser.add_argument("--levels", default="1x1,1x4,2x4,2x8,4x8,4x16", help="processes x threads, comma-separated")
    parser.add_argument("--group-commit", action="store_true", help="the store's group commit (one flush, many writes)")
    parser.add_argument("--shards", type=int, default=1,
                        help="split the jobs over N store databases of the same server by a hash of the job id")
    args = parser.parse_args()
    names = [f"reliable_scaling_{uuid.uuid4().hex[:8]}" for _ in range(args.shards)]
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in names:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    urls = [PG_ADMIN.rsplit("/", 1)[0] + "/" + name for name in names]
    try:
        for url in urls:
            StateStore(url).upgrade()
        print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs); {args.shards} shard(s)"
              f"{', group commit' if args.group_commit else ''}")
        print(f"{'level':<6} {'clients':>7} {'lifecycles/s':>12} {'enqueue/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'pg ms/job':>10} {'cli ms/job':>10} {'WAL KiB':>8}  waits")
        for level in args.levels.split(","):
            processes, threads = (int(x) for x in level.split("x"))
            if processes < args.shards:
                raise SystemExit(f"--levels {level}: fewer processes than --shards {args.shards}")
            print(run_level(urls, names, args.jobs, processes, threads, args.group_commit), flush=True)
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
