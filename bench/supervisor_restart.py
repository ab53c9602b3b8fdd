"""How fast `reliable worker` replaces a child killed with SIGKILL, and that no job is lost meanwhile.

    .venv/bin/python bench/supervisor_restart.py [--processes 4] [--broker amqp://...] [--store URL]

Runs `reliable worker` (the app of tests/supervisor/apps, `-t 2`) on a queue of its own while a
producer sends 0.2 s jobs at --rate per second, kills each child once with SIGKILL (so every restart is a
first crash: one backoff step), and prints per kill the time until the replacement reported ready
and until it claimed its first job; then waits for every job to succeed and prints the restarts
counted in the supervisor's metrics, the jobs lost (0) and the jobs that needed a second attempt.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.message import Message

import reliable
from reliable.states import JobStatus
from reliable.store import StateStore

ROOT = Path(__file__).resolve().parents[1]
APPS = ROOT / "tests" / "supervisor" / "apps"
T = TypeVar("T")


def wait(condition: Callable[[], T], what: str, timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rate", type=float, default=20.0, help="jobs (of 0.2 s) sent per second")
    parser.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--store", default=None, help="default: a SQLite file in a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store_url = args.store or f"sqlite:///{tmp}/bench.db"
        StateStore(store_url).upgrade()
        queue = f"bench_sup_{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "RELIABLE_TEST_BROKER": args.broker, "RELIABLE_TEST_STORE": store_url,
               "RELIABLE_TEST_QUEUE": queue}
        log_path, metrics_path = Path(tmp, "worker.log"), Path(tmp, "worker.prom")
        broker = RabbitmqBroker(url=args.broker)
        middleware = reliable.install(broker, store=store_url, recovery=False, json_logs=False)
        store = middleware.store
        sent: list[str] = []

        stop_producing = threading.Event()

        def produce() -> None:
            while not stop_producing.wait(1 / args.rate):
                sent.append(broker.enqueue(Message(queue_name=queue, actor_name="work", args=(0.2,), kwargs={},
                                                   options={})).message_id)

        producer = threading.Thread(target=produce, daemon=True)

        def events(name: str) -> list[dict[str, object]]:
            lines = log_path.read_text(errors="replace").splitlines()
            return [e for e in (json.loads(x) for x in lines if x.startswith('{"ts"') and '"reliable.worker"' in x)
                    if e["event"] == name]

        def ready() -> dict[int, int]:
            return {int(str(e["child"])): int(str(e["pid"])) for e in events("child_ready")}

        def claimed_by(pid: int, *states: JobStatus) -> bool:
            return any(f":{pid}:" in (j.worker_id or "") for j in store.list_jobs(status=list(states) or None,
                                                                                  limit=100_000))

        def replaced(slot: int, victim: int) -> int:
            pid = ready().get(slot)
            return pid if pid not in (None, victim) else 0

        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", "from reliable.cli.main import main; main()", "worker", "supervised_app",
                 "--path", str(APPS), "-p", str(args.processes), "-t", "2", "-Q", queue, "--crash-loop", "100/60s",
                 "--metrics-file", str(metrics_path)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait(lambda: len(ready()) == args.processes, "children ready")
            producer.start()
            to_ready, to_claim = [], []
            for slot in range(args.processes):
                victim = ready()[slot]
                wait(partial(claimed_by, victim, JobStatus.RUNNING), "the victim running a job")
                os.kill(victim, signal.SIGKILL)
                killed = time.monotonic()
                new = wait(partial(replaced, slot, victim), "the replacement ready")
                to_ready.append(time.monotonic() - killed)
                wait(partial(claimed_by, new), "the replacement claiming")
                to_claim.append(time.monotonic() - killed)
                [boot] = [e["boot_seconds"] for e in events("child_ready") if e["pid"] == new]
                print(f"kill {slot + 1}: child {slot} PID {victim} -> {new}: ready {to_ready[-1]:.2f}s (of which "
                      f"the new child's boot {boot}s), claiming {to_claim[-1]:.2f}s after the kill")
            stop_producing.set()
            producer.join(10)
            wait(lambda: all(store.get(j).status is JobStatus.SUCCEEDED for j in sent), "every job done", 300)
            retried = sum(1 for j in sent if store.get(j).attempt > 1)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            restarts = [line for line in metrics_path.read_text().splitlines()
                        if line.startswith("reliable_worker_restarts_total")]
            print(f"{args.processes} kills, {len(sent)} jobs: 0 lost, {retried} needed a second attempt; "
                  f"kill->ready median {statistics.median(to_ready):.2f}s max {max(to_ready):.2f}s; "
                  f"kill->claiming median {statistics.median(to_claim):.2f}s max {max(to_claim):.2f}s; "
                  f"supervisor exit {code}; " + ", ".join(restarts))
        finally:
            stop_producing.set()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            broker.close()
            store.close()
            connection = pika.BlockingConnection(pika.URLParameters(args.broker))
            for suffix in ("", ".DQ", ".XQ"):
                connection.channel().queue_delete(queue + suffix)
            connection.close()


if __name__ == "__main__":
    main()
