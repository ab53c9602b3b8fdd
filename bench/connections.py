"""PostgreSQL connections held by real reliable workers: peak during a run, and held once idle.

    .venv/bin/python bench/connections.py [--processes 2] [--threads 16] [--jobs 4000] [--nap 0.01]
        [--actor nap|steps]

Starts `dramatiq bench_app -p P -t T` (reliable installed, recovery loop on as in production) on a
fresh database of the PostgreSQL at BENCH_PG, enqueues N jobs that each sleep `--nap` seconds (so
every thread is busy at once; `steps` jobs also record two effects and two checkpoints), and
samples `pg_stat_activity` for that database only every 50 ms, leaving out this script's own
session: the peak while the queue drains, and the count 2 s after every job SUCCEEDED (what stays
held).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import dramatiq
import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from throughput import BROKER, PG_ADMIN, drop_pg, fresh_pg

import reliable

HERE = Path(__file__).parent
#: application_name of this script's own session on the measured database (not counted).
OBSERVER = "reliable-bench-observer"


class Sampler(threading.Thread):
    """Counts the sessions of one database every 50 ms; keeps the peak."""

    def __init__(self, database: str) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT", pool_size=1)
        self.peak = 0
        self.stop = threading.Event()

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = :d "
                                         "AND application_name <> :me"),
                                    {"d": self.database, "me": OBSERVER}).scalar_one())

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, self.count())


def measure(processes: int, threads: int, jobs: int, nap: float, actor: str, tmp: Path) -> tuple[int, int, float]:
    """(peak sessions, sessions held when idle, seconds to drain) for one run."""
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    store_url = fresh_pg()
    database = store_url.rsplit("/", 1)[1]
    env = {**os.environ, "BENCH_BROKER": BROKER, "BENCH_QUEUE": queue, "BENCH_MODE": "reliable",
           "BENCH_METRICS": "0", "BENCH_RECOVERY": "1", "BENCH_STORE": store_url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    broker = RabbitmqBroker(url=BROKER)
    broker.declare_queue(queue)
    middleware = reliable.install(broker, store=store_url, recovery=False, metrics=False, json_logs=False)
    messages: list[dramatiq.Message[Any]] = [
        dramatiq.Message(queue_name=queue, actor_name=actor, args=(nap,) if actor == "nap" else (2, nap / 2),
                         kwargs={}, options={}) for _ in range(jobs)]
    middleware.enqueue_many(broker, messages)
    middleware.store.close()
    broker.close()
    sampler = Sampler(database)
    log = (tmp / f"{queue}.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "bench_app", "-p", str(processes), "-t",
                               str(threads), "-Q", queue], cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    store = reliable.StateStore(engine=create_engine(store_url, poolclass=NullPool,
                                                     connect_args={"application_name": OBSERVER}))
    started = time.perf_counter()
    try:
        sampler.start()
        deadline = time.monotonic() + 300
        while store.count_by_status().get(reliable.JobStatus.SUCCEEDED, 0) < jobs:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker exited or stalled, see {log.name}")
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
        store.close()
        time.sleep(2.0)
        idle = sampler.count()
    finally:
        sampler.stop.set()
        sampler.join(5)
        worker.terminate()
        worker.wait(30)
        log.close()
        connection = pika.BlockingConnection(pika.URLParameters(BROKER))
        for suffix in ("", ".DQ", ".XQ"):
            connection.channel().queue_delete(queue + suffix)
        connection.close()
        sampler.engine.dispose()
        drop_pg(store_url)
    if "too many clients" in (tmp / f"{queue}.log").read_text(errors="replace"):
        print("  (the worker log contains 'too many clients')")
    return sampler.peak, idle, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--nap", type=float, default=0.01)
    parser.add_argument("--actor", choices=("nap", "steps"), default="nap")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            peak, idle, elapsed = measure(args.processes, args.threads, args.jobs, args.nap, args.actor,
                                          Path(tmp))
            print(f"run {run + 1}: {args.actor} -p {args.processes} -t {args.threads}: peak {peak} sessions "
                  f"({peak / args.processes:.1f} per process), {idle} held when idle, "
                  f"{args.jobs / elapsed:.0f} jobs/s", flush=True)


if __name__ == "__main__":
    main()
