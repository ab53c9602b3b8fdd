"""Throughput of plain Dramatiq vs Dramatiq + reliable on the same RabbitMQ, in one run.

    .venv/bin/python bench/throughput.py [--jobs 8000] [--runs 5] [--configs 1x8,2x8,2x32]
        [--modes plain,reliable-pg,reliable-pg-fast,reliable-pg-fast-alone,reliable-pg-nogc,reliable-pg-nometrics,
                 reliable-pg-fullidx,reliable-pg-limited,reliable-sqlite,reliable-sqlite-fast]

Each run enqueues N no-op messages (reliable modes register them first, in bulk), starts a real
`dramatiq` worker and measures how fast the queue drains, from the first message taken to the last
one finished (reliable: SUCCEEDED in the store). Modes alternate run by run; medians are printed
with the ratio to plain Dramatiq, for each worker configuration (processes x threads). PostgreSQL
CPU counts only the backends serving the run's own database. Needs RabbitMQ and (for -pg modes)
PostgreSQL on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import dramatiq
import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

import reliable

HERE = Path(__file__).parent
BROKER = os.environ.get("BENCH_BROKER", "amqp://guest:guest@127.0.0.1:5672/")
PG_ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def proc_cpu(stat: Path) -> float:
    """CPU seconds (user + system) of one process, from its /proc/<pid>/stat."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(match: str) -> float:
    """CPU time (user + system) of every process whose command line contains `match` (Linux /proc)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if match not in cmdline:
                continue
            total += proc_cpu(stat)
        except (OSError, IndexError, ValueError):
            continue
    return total


class BackendCpu:
    """CPU time of the PostgreSQL backends serving one database (not the server's other processes).

    Backends are sampled while the run goes (`sample`), so one that closes before the end still
    counts up to its last sample; a backend already open at the start counts from its first sample.
    """

    def __init__(self, store_url: str) -> None:
        self.database = store_url.rsplit("/", 1)[1]
        self.engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.sample()

    def sample(self) -> None:
        """Read the CPU time of every backend now connected to the database."""
        with self.engine.connect() as conn:
            pids = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = :db AND pid <> "
                                     "pg_backend_pid()"), {"db": self.database}).scalars().all()
        for pid in pids:
            try:
                seconds = proc_cpu(Path(f"/proc/{pid}/stat"))
            except (OSError, IndexError, ValueError):
                continue
            self.first.setdefault(pid, seconds)
            self.last[pid] = seconds

    def seconds(self) -> float:
        """CPU seconds the database's backends used since they were first seen."""
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


def queue_depth(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def fresh_pg() -> str:
    name = f"reliable_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    reliable.StateStore(url).upgrade()
    return url


def full_indexes(url: str) -> None:
    """Replace the partial job indexes (migration 0007) by the full ones of 0006: the A/B of that lever."""
    from reliable.store.schema import PARTIAL_JOB_INDEXES, jobs

    engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with engine.connect() as conn:
        for index in [i for i in jobs.indexes if i.name in PARTIAL_JOB_INDEXES]:
            columns = ", ".join(c.name for c in index.columns)
            conn.execute(text(f"DROP INDEX {index.name}"))
            conn.execute(text(f"CREATE INDEX {index.name} ON reliable_jobs ({columns})"))
    engine.dispose()


def drop_pg(url: str) -> None:
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    admin.dispose()


def batch_size(log: Path) -> float | None:
    """The mean group-commit batch of a run, from the worker processes' shutdown lines."""
    writes = batches = 0
    for match in re.finditer(r"group commit: (\d+) writes in (\d+) batches", log.read_text(errors="replace")):
        writes, batches = writes + int(match.group(1)), batches + int(match.group(2))
    return writes / batches if batches else None


def looks_per_read(log: Path) -> float | None:
    """The fast path's looks per store read of a run (reliable.worker.waiting), from the shutdown lines."""
    looks = reads = 0
    for match in re.finditer(r"fast-path looks: (\d+) looks in (\d+) reads", log.read_text(errors="replace")):
        looks, reads = looks + int(match.group(1)), reads + int(match.group(2))
    return looks / reads if reads else None


def _actor_for(mode: str) -> str:
    """The no-op actor a mode runs: on the fast path, with limits (reliable.limits), or plain."""
    return "fast_noop" if "fast" in mode else "limited_noop" if "limited" in mode else "noop"


def run_once(mode: str, jobs: int, processes: int, threads: int, tmp: Path) -> tuple[float, float, float, float | None]:
    """One run: (jobs/s, worker CPU ms per job, PostgreSQL CPU ms per job, mean group-commit batch)."""
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    store_url = None
    env = {**os.environ, "BENCH_BROKER": BROKER, "BENCH_QUEUE": queue, "PYTHONPATH": str(HERE),
           "BENCH_MODE": "plain" if mode == "plain" else "reliable",
           "BENCH_METRICS": "0" if "nometrics" in mode else "1",
           "BENCH_GROUP_COMMIT": "0" if mode.endswith("nogc") else "1",
           "BENCH_LOOKS": "alone" if mode.endswith("alone") else "batched"}
    if mode.startswith("reliable-pg"):
        store_url = fresh_pg()
        if "fullidx" in mode:
            full_indexes(store_url)
    elif mode.startswith("reliable-sqlite"):
        store_url = f"sqlite:///{tmp / (queue + '.db')}"
        reliable.StateStore(store_url).upgrade()
    if store_url:
        env["BENCH_STORE"] = store_url
    multiproc = tmp / f"prom-{queue}"
    multiproc.mkdir()
    env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc)

    broker = RabbitmqBroker(url=BROKER)
    messages: list[dramatiq.Message[Any]] = [
        dramatiq.Message(queue_name=queue, actor_name=_actor_for(mode), args=(i,),
                         kwargs={}, options={}) for i in range(jobs)
    ]
    broker.declare_queue(queue)
    if store_url:
        middleware = reliable.install(broker, store=store_url, recovery=False, metrics=False, json_logs=False)
        middleware.enqueue_many(broker, messages)
    else:
        for message in messages:
            broker.enqueue(message)
    broker.close()

    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    channel = connection.channel()
    log = (tmp / f"{queue}.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "bench_app", "-p", str(processes), "-t",
                               str(threads), "-Q", queue], cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    backends = BackendCpu(store_url) if store_url and store_url.startswith("postgresql") else None
    try:
        started = None
        start_depth = jobs
        polls = 0
        while True:
            polls += 1
            if backends is not None and polls % 10 == 0:
                backends.sample()
            depth = queue_depth(channel, queue)
            now = time.perf_counter()
            if started is None and depth < jobs:
                started, start_depth = now, depth
            if depth == 0:
                break
            if worker.poll() is not None:
                raise RuntimeError(f"worker exited early, see {log.name}")
            time.sleep(0.05)
        if store_url:  # finished = SUCCEEDED in the store, not just taken off the queue
            store = reliable.StateStore(store_url)
            while store.count_by_status().get(reliable.JobStatus.SUCCEEDED, 0) < jobs:
                if backends is not None:
                    backends.sample()
                time.sleep(0.05)
            store.close()
        else:  # in-flight prefetched messages: at most processes * threads * 2, well under 1% of the run
            time.sleep(0)
        elapsed = time.perf_counter() - (started or time.perf_counter())
        worker_cpu = cpu_seconds(f"-Q {queue}")
        if backends is not None:
            backends.sample()
        pg_cpu = backends.seconds() if backends is not None else 0.0
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
        channel.queue_delete(queue)
        for suffix in (".DQ", ".XQ"):
            channel.queue_delete(queue + suffix)
        connection.close()
        if store_url and store_url.startswith("postgresql"):
            drop_pg(store_url)
    done = start_depth if started else jobs
    if (looks := looks_per_read(tmp / f"{queue}.log")) is not None:
        print(f"    fast-path looks per store read: {looks:.1f}", flush=True)
    return done / elapsed, 1000 * worker_cpu / jobs, 1000 * pg_cpu / jobs, batch_size(tmp / f"{queue}.log")


def parse_configs(text: str) -> list[tuple[int, int]]:
    """`1x8,2x32` -> [(1, 8), (2, 32)]: worker processes x threads per process."""
    configs = []
    for item in text.split(","):
        processes, _, threads = item.strip().partition("x")
        if not (processes.isdigit() and threads.isdigit()) or int(processes) < 1 or int(threads) < 1:
            raise SystemExit(f"--configs: {item!r} is not PROCESSESxTHREADS (e.g. 2x8)")
        configs.append((int(processes), int(threads)))
    return configs


def bench_config(modes: list[str], jobs: int, runs: int, processes: int, threads: int, tmp: Path) -> None:
    """Alternate the modes `runs` times at -p processes -t threads; print each run and the medians."""
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    batches: dict[str, list[float]] = {mode: [] for mode in modes}
    for run in range(runs):
        for mode in modes:
            rate, worker_ms, pg_ms, batch = run_once(mode, jobs, processes, threads, tmp)
            results[mode].append(rate)
            cpu[mode].append((worker_ms, pg_ms))
            if batch is not None:
                batches[mode].append(batch)
            print(f"-p {processes} -t {threads} run {run + 1}/{runs} {mode:>24}: {rate:8.0f} jobs/s  "
                  f"worker {worker_ms:.2f} ms CPU/job  postgres {pg_ms:.2f} ms CPU/job"
                  + (f"  batch {batch:.1f}" if batch is not None else ""), flush=True)
    plain = statistics.median(results["plain"]) if "plain" in results else None
    print(f"\n{jobs} no-op jobs, -p {processes} -t {threads}, median of {runs} alternating runs")
    print(f"{'mode':>24} {'jobs/s':>9} {'ratio':>7} {'worker ms CPU/job':>18} {'postgres ms CPU/job':>20} "
          f"{'batch':>6}")
    for mode, rates in results.items():
        median = statistics.median(rates)
        ratio = f"{median / plain:6.2f}x" if plain else "-"
        worker_ms = statistics.median(c[0] for c in cpu[mode])
        pg_ms = statistics.median(c[1] for c in cpu[mode])
        batch = f"{statistics.median(batches[mode]):6.1f}" if batches[mode] else f"{'-':>6}"
        print(f"{mode:>24} {median:9.0f} {ratio:>7} {worker_ms:18.2f} {pg_ms:20.2f} {batch}")
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--configs", default="1x8,2x8,2x32", help="worker processes x threads, comma-separated")
    parser.add_argument("--modes", default="plain,reliable-pg")
    args = parser.parse_args()
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for processes, threads in parse_configs(args.configs):
            bench_config(modes, args.jobs, args.runs, processes, threads, Path(tmp))


if __name__ == "__main__":
    main()
