"""`dramatiq -p 4 -t 16` against a PostgreSQL with max_connections=50: every job finishes, nobody is
refused a connection, and an operator's CLI still gets in while the workers run.

Before the store's pool was bounded each worker thread pinned a connection of its own (17 or more
per process): 4 such processes exceed 50 and PostgreSQL answers "too many clients" to everyone.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from private_postgres import private_postgres
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

import reliable
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.db import DEFAULT_MAX_CONNECTIONS

from support import wait_for
from workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RELIABLE = str(Path(sys.executable).parent / "reliable")
PROCESSES, THREADS, JOBS = 4, 16, 320
#: Sessions of the test itself (producer, observer, CLI) are tagged so they are not counted as the workers'.
TEST_APP = "reliable-test"


class SessionPeak(threading.Thread):
    """The most sessions the workers (untagged sessions) held on `database` at once, sampled every 50 ms."""

    def __init__(self, admin_url: str, database: str) -> None:
        super().__init__(daemon=True)
        self.engine = create_engine(admin_url, poolclass=NullPool)
        self.database = database
        self.peak = 0
        self.halt = threading.Event()

    def run(self) -> None:
        with self.engine.connect() as conn:
            while not self.halt.wait(0.05):
                count = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = :d "
                                          "AND application_name NOT LIKE :app"),
                                     {"d": self.database, "app": TEST_APP + "%"}).scalar_one()
                self.peak = max(self.peak, int(count))
                conn.rollback()


@pytest.mark.timeout(120)
def test_four_processes_of_sixteen_threads_fit_in_fifty_connections(rabbitmq_url: str, queue_name: str,
                                                                     tmp_path: Path) -> None:
    with private_postgres(max_connections=50) as pg:
        store_url = pg.create_database("store")
        tagged = f"{store_url}?application_name={TEST_APP}"
        observer = StateStore(tagged, max_connections=1)
        observer.upgrade()

        broker = RabbitmqBroker(url=rabbitmq_url)
        producer = reliable.install(broker, store=tagged, recovery=False, metrics=False, json_logs=False,
                                    max_connections=1)
        producer.enqueue_many(broker, [
            dramatiq.Message(queue_name=queue_name, actor_name="units", args=(5, 0.3), kwargs={}, options={})
            for _ in range(JOBS)])
        peak = SessionPeak(pg.url, "store")
        peak.start()
        env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": store_url,
               "RELIABLE_TEST_QUEUE": queue_name, "RELIABLE_TEST_LEASE_TTL": "10",
               "RELIABLE_TEST_HEARTBEAT": "2", "RELIABLE_TEST_RECOVERY_INTERVAL": "1"}
        worker = WorkerProcess(env, tmp_path / "worker.log", processes=PROCESSES, threads=THREADS)
        try:
            def done() -> int:
                return observer.count_by_status().get(JobStatus.SUCCEEDED, 0)

            wait_for(lambda: observer.count_by_status().get(JobStatus.RUNNING, 0) >= PROCESSES * THREADS / 2,
                     "most worker threads busy at once", timeout=40, context=worker.output)
            cli_started = time.monotonic()
            cli = subprocess.run([RELIABLE, "jobs", "list", "--store", f"{store_url}?application_name={TEST_APP}-cli",
                                  "--state", "running", "--json"], capture_output=True, text=True, timeout=30)
            finished_when_cli_returned, cli_seconds = done(), time.monotonic() - cli_started
            assert cli.returncode == 0, cli.stderr
            # It read RUNNING jobs: it got its connection while the workers held theirs (how many jobs
            # had finished by the time it returned depends on the machine's load, so it is only printed).
            assert '"status": "RUNNING"' in cli.stdout
            wait_for(lambda: done() == JOBS, f"all {JOBS} jobs SUCCEEDED", timeout=60, context=worker.output)
        finally:
            worker.stop()
            peak.halt.set()
            peak.join(5)
            broker.close()
            producer.store.close()
        assert observer.count_by_status() == {JobStatus.SUCCEEDED: JOBS}
        observer.close()
        logs = worker.output() + pg.log.read_text(errors="replace")
        assert "too many clients" not in logs
        assert peak.peak <= PROCESSES * DEFAULT_MAX_CONNECTIONS, f"workers held {peak.peak} sessions"
        print(f"\nworkers' peak sessions: {peak.peak} ({PROCESSES} processes x {THREADS} threads); the CLI took "
              f"{cli_seconds:.1f}s, {finished_when_cli_returned}/{JOBS} jobs had finished when it returned")
