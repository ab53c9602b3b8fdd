"""Workflows against independent jobs and plain Dramatiq, on the same RabbitMQ, in one run.

    .venv/bin/python bench/workflows.py [--workflows 100] [--runs 3] [--processes 2] [--threads 8]

Three modes run the same number of no-op actor calls (workflows x 20):
  plain      plain Dramatiq, independent messages;
  jobs       reliable on PostgreSQL, independent jobs (registered in bulk, then run);
  workflows  reliable on PostgreSQL, `--workflows` workflows of 20 nodes each (a root, three
             layers of six chains, a fan-in of six), submitted one by one, then run.
Each run starts a real `dramatiq` worker and measures from the first call taken until every call
finished (reliable: from the first claim to the last success in the store, every workflow
SUCCEEDED; worker boot excluded). Modes alternate run by run; medians
are printed with the ratio to plain Dramatiq. Needs RabbitMQ and PostgreSQL on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
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
from sqlalchemy import func, select
from throughput import BROKER, drop_pg, fresh_pg, queue_depth

import reliable
from reliable.store.schema import jobs
from reliable.store.workflows import WorkflowStore

HERE = Path(__file__).parent
NODES = 20


def shape(noop: Any) -> reliable.Workflow:
    """Twenty nodes: root -> a1..a6 -> b1..b6 -> c1..c6 (chains) -> sink (fan-in of six)."""
    nodes = [reliable.node("root", noop.message(0))]
    for i in range(1, 7):
        nodes += [reliable.node(f"a{i}", noop.message(i), after=["root"]),
                  reliable.node(f"b{i}", noop.message(i), after=[f"a{i}"]),
                  reliable.node(f"c{i}", noop.message(i), after=[f"b{i}"])]
    nodes.append(reliable.node("sink", noop.message(7), after=[f"c{i}" for i in range(1, 7)]))
    return reliable.workflow("bench", nodes)


def run_once(mode: str, workflows: int, processes: int, threads: int, tmp: Path) -> tuple[float, float]:
    """One run: (actor calls per second, seconds to submit or enqueue them)."""
    queue = f"wfbench_{uuid.uuid4().hex[:8]}"
    calls = workflows * NODES
    env = {**os.environ, "BENCH_BROKER": BROKER, "BENCH_QUEUE": queue, "PYTHONPATH": str(HERE),
           "BENCH_MODE": "plain" if mode == "plain" else "reliable", "BENCH_METRICS": "1",
           "BENCH_RECOVERY": "1"}
    store_url = fresh_pg() if mode != "plain" else None
    if store_url:
        env["BENCH_STORE"] = store_url
    multiproc = tmp / f"prom-{queue}"
    multiproc.mkdir()
    env["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc)
    broker = RabbitmqBroker(url=BROKER)
    broker.declare_queue(queue)
    started_submit = time.perf_counter()
    if mode == "plain":
        for i in range(calls):
            broker.enqueue(dramatiq.Message(queue_name=queue, actor_name="noop", args=(i,), kwargs={}, options={}))
    else:
        assert store_url is not None
        middleware = reliable.install(broker, store=store_url, recovery=False, metrics=False, json_logs=False)
        noop = dramatiq.Actor(lambda n: None, broker=broker, actor_name="noop", queue_name=queue, priority=0,
                              options={})
        if mode == "jobs":
            middleware.enqueue_many(broker, [noop.message(i) for i in range(calls)])
        else:
            for _ in range(workflows):
                shape(noop).submit(broker)
    submit_seconds = time.perf_counter() - started_submit
    broker.close()

    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    channel = connection.channel()
    log = (tmp / f"{queue}.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "bench_app", "-p", str(processes), "-t",
                               str(threads), "-Q", queue], cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        if mode == "plain":  # from the first message taken to an empty queue (as bench/throughput.py)
            started = None
            while (depth := queue_depth(channel, queue)) > 0:
                if started is None and depth < calls:
                    started = time.perf_counter()
                if worker.poll() is not None:
                    raise RuntimeError(f"worker exited early, see {log.name}")
                time.sleep(0.05)
            elapsed = time.perf_counter() - (started or time.perf_counter())
        else:
            store = reliable.StateStore(store_url)
            rows = WorkflowStore(store)
            while True:
                if worker.poll() is not None:
                    raise RuntimeError(f"worker exited early, see {log.name}")
                if mode == "jobs":
                    done = store.count_by_status().get(reliable.JobStatus.SUCCEEDED, 0) >= calls
                else:
                    done = len(rows.listing(status=["SUCCEEDED"], limit=workflows)) >= workflows
                if done:
                    break
                time.sleep(0.05)
            if mode == "workflows":
                assert store.count_by_status().get(reliable.JobStatus.SUCCEEDED, 0) == calls
            # From the first claim to the last success, by the database's clock (worker boot excluded).
            with store.read() as conn:
                first, last = conn.execute(select(func.min(jobs.c.started_at), func.max(jobs.c.finished_at))).one()
            elapsed = float(last) - float(first)
            store.close()
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
        for name in (queue, queue + ".DQ", queue + ".XQ"):
            channel.queue_delete(name)
        connection.close()
        if store_url:
            drop_pg(store_url)
    return calls / elapsed, submit_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    modes = ["plain", "jobs", "workflows"]
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for mode in modes:
                rate, submit = run_once(mode, args.workflows, args.processes, args.threads, Path(tmp))
                results[mode].append((rate, submit))
                print(f"run {run + 1} {mode:9s} {rate:8.0f} calls/s  (enqueue/submit {submit:.2f} s)", flush=True)
    plain = statistics.median(r for r, _ in results["plain"])
    print(f"\n{args.workflows} x {NODES} calls, -p {args.processes} -t {args.threads}, medians of {args.runs}:")
    for mode in modes:
        rate = statistics.median(r for r, _ in results[mode])
        submit = statistics.median(s for _, s in results[mode])
        print(f"  {mode:9s} {rate:8.0f} calls/s  x{rate / plain:.2f} of plain Dramatiq   submit {submit:.2f} s")


if __name__ == "__main__":
    main()
