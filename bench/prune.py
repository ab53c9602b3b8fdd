"""`reliable db prune` at scale on PostgreSQL: rows/s, and what workers running meanwhile waited.

    .venv/bin/python bench/prune.py [--jobs 1000000] [--worker dramatiq|threads] [--rate 100]
        [--threads 2] [--batch-size 1000]

Creates a database of its own on the shared PostgreSQL (BENCH_PG, the admin URL), migrates it, and
bulk-inserts `--jobs` jobs that finished 40 days ago, each with the rows a claimed job writes (3
events, 1 attempt) by INSERT ... SELECT generate_series. Then, for a baseline of 10 s, during
`reliable.store.retention.prune` of everything older than 30 days (what `reliable db prune
--older-than 30d --yes` runs), and for 5 s after, work goes on:

- `--worker dramatiq` (default): a real `dramatiq bench_app -p 1 -t 4` worker with reliable
  installed (and its recovery loop) on the shared RabbitMQ (BENCH_BROKER) runs no-op jobs a
  producer enqueues at `--rate` per second; each job's latency is its finished_at - created_at in
  the store (enqueue to SUCCEEDED, by the database clock);
- `--worker threads`: `--threads` threads run job lifecycles through the store (register, claim,
  succeed: the worker's store calls without the broker), each call timed.

Prints the prune's rows/s and its longest batch, the latencies (p50, p99, max) before, during and
after the prune, and the longest any session of the database was seen waiting on a lock
(pg_stat_activity sampled every 10 ms; a lock wait shorter than that may go unseen). The database
(and the queue) are dropped at the end. docs/performance.md reads these figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import dramatiq
import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import create_engine, text
from store_transactions import percentile

import reliable
from reliable import Event, StateStore
from reliable.store import NewJob, retention

PG_ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BROKER = os.environ.get("BENCH_BROKER", "amqp://guest:guest@127.0.0.1:5672/")
HERE = Path(__file__).resolve().parent
DAY = 86400.0

#: One chunk of finished jobs [lo, hi], 40 days old, each with 3 events (1 attempt: its claim and succeed;
#: `at`: its time).
_SERIES = "FROM (SELECT g, CAST(:base AS float8) + g * 0.001 AS at FROM generate_series(CAST(:lo AS int), " \
          "CAST(:hi AS int)) g) s"
_FILL = [
    f"""INSERT INTO reliable_jobs (job_id, queue, actor, message, status, version, lease_id, attempt, attempt_id,
           worker_id, started_at, finished_at, created_at, updated_at)
        SELECT 'old-' || g, 'bench', 'noop', '{{"args": [1], "kwargs": {{}}}}', 'SUCCEEDED', 3, 1, 1, 'att-' || g,
               'w', at, at, at, at {_SERIES}""",
    f"""INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, attempt, attempt_id, lease_id)
        SELECT 'old-' || g, at, e.event, e.f, e.t, 1, 'att-' || g, 1 {_SERIES}
        CROSS JOIN (VALUES ('enqueued', NULL, 'PENDING'), ('claim', 'PENDING', 'RUNNING'),
                           ('succeed', 'RUNNING', 'SUCCEEDED')) AS e(event, f, t)""",
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
            job = NewJob(f"new-{self.tag}-{uuid.uuid4().hex}", queue="bench", actor="noop",
                         message={"args": [1], "kwargs": {}})
            self._timed(lambda job=job: self.store.register(job))  # type: ignore[misc]
            claim = self.store.claim(job.job_id, worker_id=self.tag, lease_ttl=30)
            self._timed(lambda job=job, claim=claim: self.store.finish(  # type: ignore[misc]
                job.job_id, claim.lease_id, Event.SUCCEED, worker_id=self.tag))
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


class DramatiqLoad:
    """A real worker (bench_app, reliable installed) and a producer enqueueing no-op jobs at `rate`/s."""

    def __init__(self, url: str, rate: float, log: Path) -> None:
        self.url, self.rate = url, rate
        self.queue = f"bench_prune_{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "BENCH_BROKER": BROKER, "BENCH_QUEUE": self.queue, "PYTHONPATH": str(HERE),
               "BENCH_MODE": "reliable", "BENCH_STORE": url, "BENCH_RECOVERY": "1", "BENCH_METRICS": "0"}
        self.broker = RabbitmqBroker(url=BROKER)
        self.middleware = reliable.install(self.broker, store=url, recovery=False, metrics=False, json_logs=False)
        self.broker.declare_queue(self.queue)
        self.log = log.open("wb")
        self.worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "bench_app", "-p", "1", "-t", "4", "-Q",
                                        self.queue], cwd=HERE, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.sent = 0

    def _produce(self) -> None:
        began = time.monotonic()
        while not self.stop.is_set():
            self.broker.enqueue(dramatiq.Message(queue_name=self.queue, actor_name="noop", args=(self.sent,),
                                                 kwargs={}, options={}))
            self.sent += 1
            time.sleep(max(0.0, began + self.sent / self.rate - time.monotonic()))

    def start(self) -> None:
        """Start producing (the worker started in __init__)."""
        self.thread.start()

    def wait_running(self) -> None:
        """Until the worker has finished a job (its boot is not part of the baseline)."""
        deadline = time.monotonic() + 60
        with create_engine(self.url).connect() as conn:
            query = text("SELECT count(*) FROM reliable_jobs WHERE queue = :q AND status = 'SUCCEEDED'")
            while not conn.execute(query, {"q": self.queue}).scalar_one():
                conn.rollback()
                if time.monotonic() > deadline or self.worker.poll() is not None:
                    raise RuntimeError(f"the worker ran no job, see {self.log.name}")
                time.sleep(0.1)

    def finish(self, store: StateStore) -> list[tuple[float, float | None]]:
        """Stop producing, let the worker drain, stop it; (created_at, finished_at) of every job it ran."""
        self.stop.set()
        self.thread.join()
        deadline = time.monotonic() + 60
        with create_engine(self.url).connect() as conn:
            query = text("SELECT count(*) FROM reliable_jobs WHERE queue = :q AND status <> 'SUCCEEDED'")
            while conn.execute(query, {"q": self.queue}).scalar_one() and time.monotonic() < deadline:
                conn.rollback()
                time.sleep(0.2)
            rows = conn.execute(text("SELECT created_at, finished_at FROM reliable_jobs WHERE queue = :q"),
                                {"q": self.queue}).all()
        self.worker.terminate()
        self.worker.wait(30)
        self.log.close()
        connection = pika.BlockingConnection(pika.URLParameters(BROKER))
        channel = connection.channel()
        for suffix in ("", ".DQ", ".XQ"):
            channel.queue_delete(self.queue + suffix)
        connection.close()
        self.broker.close()
        self.middleware.store.close()
        return [(float(created), None if finished is None else float(finished)) for created, finished in rows]


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
    parser.add_argument("--worker", choices=("dramatiq", "threads"), default="dramatiq")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs/s the producer enqueues (--worker dramatiq)")
    parser.add_argument("--threads", type=int, default=2, help="store threads (--worker threads)")
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
        watch = LockWatch(PG_ADMIN, database)
        watch.start()
        workers = [Worker(store, f"w{i}") for i in range(args.threads)] if args.worker == "threads" else []
        load = DramatiqLoad(url, args.rate, Path(f"/tmp/{database}-worker.log")) if args.worker == "dramatiq" \
            else None
        for worker in workers:
            worker.start()
        if load is not None:
            load.start()
            load.wait_running()
        baseline_began = store.now()
        time.sleep(10)
        for worker in workers:
            worker.phase = "prune"
        baseline_lock = watch.longest
        prune_began = store.now()
        result = retention.prune(store, store.now() - 30 * DAY, batch_size=args.batch_size, operator="bench",
                                 reason="bench/prune.py")
        prune_ended = store.now()
        for worker in workers:
            worker.phase = "after"
        time.sleep(5)
        for worker in workers:
            worker.stop.set()
            worker.join()
        ran = load.finish(store) if load is not None else []
        watch.stop.set()
        watch.join()
        counts = result.counts
        print(f"\npruned {counts.jobs} jobs, {counts.events} events, {counts.attempts} attempts: {counts.rows} rows "
              f"in {result.seconds:.1f}s = {result.rows_per_second:.0f} rows/s ({counts.jobs / result.seconds:.0f} "
              f"jobs/s), {result.batches} batches of {args.batch_size}, longest batch "
              f"{result.longest_batch * 1000:.0f} ms")
        for phase in ("baseline", "prune", "after"):
            if load is not None:
                def within(created: float, phase: str = phase) -> bool:
                    return {"baseline": baseline_began <= created < prune_began,
                            "prune": prune_began <= created < prune_ended, "after": created >= prune_ended}[phase]
                values = [finished - created for created, finished in ran if finished is not None and within(created)]
                print(f"dramatiq jobs (enqueue -> SUCCEEDED), {phase:>8}: {summary(values)}")
            else:
                values = [v for worker in workers for v in worker.latencies.get(phase, [])]
                print(f"worker store ops, {phase:>8}: {summary(values)}")
        if load is not None:
            unfinished = sum(1 for _, finished in ran if finished is None)
            print(f"jobs sent {load.sent}, stored {len(ran)}, not finished {unfinished}")
        print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}; 2 cores shared with other work")
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
