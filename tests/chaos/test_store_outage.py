"""A store outage longer than the lease TTL, while job bodies run and return: no body may run twice,
no job may be lost, no unit's side effect may be applied twice.

The store is a private PostgreSQL this test starts, stops and starts again (the shared one is never
touched); the workers are real `dramatiq` processes on the shared RabbitMQ, on a queue of their own.
Each run: 12 jobs are claimed and their bodies are running (each recorded in a file); the store is
stopped; 8 bodies return (their completions cannot be written) and 4 apply three units each (a side
effect, then `record_effect` and `checkpoint`, which cannot be written either); 15 s later (lease
TTL 6 s, heartbeat 2 s, recovery every 0.7 s) the store is back; every job must end SUCCEEDED with
exactly one body execution and every unit applied once. Five runs in a row against the same
workers; the figures are printed per run.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from chaos_run import APP_DIR, wait_for
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from private_postgres import PrivatePostgres, private_postgres

import reliable
from reliable.middleware import ReliableMiddleware
from reliable.states import TERMINAL_STATES, JobStatus
from reliable.store import StateStore

from workers import WorkerProcess

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

RUNS, BODY_JOBS, UNIT_JOBS, UNITS = 5, 8, 4, 3
JOBS = BODY_JOBS + UNIT_JOBS  # fewer than one process's threads: prefetched messages all start
LEASE_TTL, HEARTBEAT, RECOVERY_INTERVAL = 6.0, 2.0, 0.7
OUTAGE = 15.0  # seconds the store is down: two and a half lease TTLs (the scenario)
START_TIMEOUT = 60.0  # for every body of a run to be running (threads may still be retrying the last run's writes)
SETTLE_TIMEOUT = 60.0  # after the store is back, for every job to be terminal


@dataclass
class RunFigures:
    """What one run did to its jobs."""

    run: int
    bodies: Counter[str] = field(default_factory=Counter)  # job_id -> body executions
    statuses: dict[str, str] = field(default_factory=dict)
    settle_seconds: float | None = None  # store back -> every job terminal (None: not within the bound)
    units: Counter[str] = field(default_factory=Counter)  # "job_id unit" -> applications
    detected: int = 0  # duplicate_effect + possible_duplicate_effect events of the run's jobs

    @property
    def twice(self) -> list[str]:
        """Jobs whose body ran more than once."""
        return sorted(job for job, n in self.bodies.items() if n > 1)

    @property
    def lost(self) -> list[str]:
        """Jobs that did not end SUCCEEDED (every body succeeds)."""
        return sorted(job for job, status in self.statuses.items() if status != JobStatus.SUCCEEDED.value)

    @property
    def units_twice(self) -> list[str]:
        """Units whose side effect was applied more than once."""
        return sorted(unit for unit, n in self.units.items() if n > 1)

    def line(self) -> str:
        """One line of the report."""
        settled = f"{self.settle_seconds:.1f}s" if self.settle_seconds is not None else f">{SETTLE_TIMEOUT:.0f}s"
        return (f"run {self.run}: {len(self.twice)}/{JOBS} bodies run twice, {len(self.lost)}/{JOBS} jobs lost, "
                f"{len(self.units_twice)}/{UNIT_JOBS * UNITS} units applied twice ({self.detected} detected), "
                f"settled {settled} after the store came back, statuses {dict(Counter(self.statuses.values()))}")


def body_counts(records: Path, job_ids: list[str]) -> Counter[str]:
    """Body executions per job of `job_ids`, from the app's record file."""
    wanted = set(job_ids)
    path = records / "bodies.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines if line.split()[0] in wanted)


def unit_counts(records: Path, job_ids: list[str]) -> Counter[str]:
    """Side-effect applications per "job_id unit" of `job_ids`, from the app's units file."""
    wanted = set(job_ids)
    path = records / "units.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line for line in lines if line.split()[0] in wanted)


def one_run(run: int, pg: PrivatePostgres, records: Path, broker: RabbitmqBroker, producer: ReliableMiddleware,
            observer: StateStore, queue: str, worker: WorkerProcess) -> RunFigures:
    """Enqueue, stop the store under running bodies, let them return, start it, wait until all is terminal."""
    figures = RunFigures(run)
    messages: list[dramatiq.Message[Any]] = [
        dramatiq.Message(queue_name=queue, actor_name=actor, args=(run,), kwargs={}, options={})
        for actor in ["outage_body"] * BODY_JOBS + ["outage_units"] * UNIT_JOBS]
    producer.enqueue_many(broker, messages)
    job_ids = [m.message_id for m in messages]
    if not wait_for(lambda: len(body_counts(records, job_ids)) == JOBS, START_TIMEOUT, poll=0.1):
        raise RuntimeError(f"run {run}: only {len(body_counts(records, job_ids))}/{JOBS} bodies started within "
                           f"{START_TIMEOUT}s\n{worker.output()[-3000:]}")
    pg.stop()
    down_at = time.monotonic()
    (records / f"gate-{run}").touch()  # the bodies return while the store is down
    time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_at)))  # the outage itself, not a wait for a condition
    pg.start()
    up_at = time.monotonic()

    def all_terminal() -> bool:
        jobs = {job_id: observer.get(job_id).status for job_id in job_ids}
        figures.statuses = {job_id: status.value for job_id, status in jobs.items()}
        return all(status in TERMINAL_STATES for status in jobs.values())

    if wait_for(all_terminal, SETTLE_TIMEOUT):
        figures.settle_seconds = time.monotonic() - up_at
    figures.bodies = body_counts(records, job_ids)
    figures.units = unit_counts(records, job_ids)
    figures.detected = sum(1 for job_id in job_ids for e in observer.events(job_id)
                           if e.event in ("duplicate_effect", "possible_duplicate_effect"))
    return figures


@pytest.mark.timeout(RUNS * (START_TIMEOUT + OUTAGE + SETTLE_TIMEOUT + 30) + 60)
def test_a_store_outage_longer_than_the_lease_runs_no_body_twice(rabbitmq_url: str, queue_name: str,
                                                                 tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    figures: list[RunFigures] = []
    with private_postgres(max_connections=40) as pg:
        store_url = pg.create_database("store")
        observer = StateStore(store_url, max_connections=1)
        observer.upgrade()
        broker = RabbitmqBroker(url=rabbitmq_url)
        producer = reliable.install(broker, store=store_url, recovery=False, metrics=False, json_logs=False,
                                    max_connections=1)
        env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": store_url,
               "RELIABLE_TEST_QUEUE": queue_name, "RELIABLE_OUTAGE_DIR": str(records),
               "RELIABLE_TEST_LEASE_TTL": str(LEASE_TTL), "RELIABLE_TEST_HEARTBEAT": str(HEARTBEAT),
               "RELIABLE_TEST_RECOVERY_INTERVAL": str(RECOVERY_INTERVAL)}
        worker = WorkerProcess(env, tmp_path / "worker.log", processes=2, threads=16, app="outage_app",
                               app_dir=APP_DIR)
        try:
            for run in range(1, RUNS + 1):
                figures.append(one_run(run, pg, records, broker, producer, observer, queue_name, worker))
                print(figures[-1].line(), flush=True)
        finally:
            worker.stop()
            broker.close()
            producer.store.close()
            observer.close()
    twice = sum(len(f.twice) for f in figures)
    lost = sum(len(f.lost) for f in figures)
    units_twice = sum(len(f.units_twice) for f in figures)
    applied = sum(len(f.units) for f in figures)
    report = "\n".join(f.line() for f in figures)
    print(f"\nstore outage {OUTAGE:.0f}s > lease ttl {LEASE_TTL:.0f}s, {RUNS} runs x {JOBS} jobs: {twice} bodies run "
          f"twice, {lost} jobs lost, {units_twice} of {applied} units applied twice\n{report}")
    assert (twice, lost) == (0, 0), f"{twice} bodies ran twice and {lost} jobs were lost:\n{report}"
    assert applied == RUNS * UNIT_JOBS * UNITS and units_twice == 0, f"units applied twice or missing:\n{report}"
