"""Acceptance: three scheduler processes on one PostgreSQL store over a simulated day of one-minute
slots, a real Dramatiq worker on RabbitMQ running the jobs; then a simulated 2-hour outage.

Each scheduler process walks the same simulated minutes at its own pace (an injected clock: the
minute is the tick's argument), so they race for every slot. Every slot must fire exactly once
(slot rows, registered jobs, runs counted by the actor), and after the outage each misfire policy
must fire exactly the slots it declares.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from schedules_support import slot_id
from sqlalchemy import func, select

from reliable.schedules.storage import list_events
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import jobs, schedule_slots

from support import wait_for
from workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).parent
MINUTE = 60
DAY = 1440
NAMES = ("every_minute", "quarter_once", "quarter_catch_up")


class SchedulerProcess:
    """One `scheduler_process.py run`, driven through its stdin."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._log = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "scheduler_process.py"), "run"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True)

    def send(self, first: float, last: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"tick {int(first)} {int(last)}\n")
        self.proc.stdin.flush()

    def result(self) -> dict[str, object]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the process has walked its minutes
        assert line, f"scheduler process {self.proc.pid} ended early (exit {self.proc.poll()})"
        result: dict[str, object] = json.loads(line)
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture
def env(pg_store: StateStore, rabbitmq_url: str, queue_name: str, tmp_path: Path) -> dict[str, str]:
    runs = tmp_path / "runs"
    runs.mkdir()
    return {**os.environ, "RELIABLE_TEST_STORE": str(pg_store.engine.url.render_as_string(hide_password=False)),
            "RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_QUEUE": queue_name,
            "RELIABLE_TEST_RUNS": str(runs), "PYTHONPATH": str(HERE.parent)}


@pytest.fixture
def schedulers(env: dict[str, str], tmp_path: Path) -> Iterator[list[SchedulerProcess]]:
    started = [SchedulerProcess(env, tmp_path / f"scheduler-{i}.log") for i in range(3)]
    yield started
    for process in started:
        process.stop()


def slots_of(store: StateStore) -> dict[str, list[float]]:
    with store.read() as conn:
        rows = conn.execute(select(schedule_slots.c.schedule, schedule_slots.c.slot_at)
                            .order_by(schedule_slots.c.slot_at)).all()
    out: dict[str, list[float]] = {name: [] for name in NAMES}
    for name, slot in rows:
        out[name].append(slot)
    return out


def runs(env: dict[str, str]) -> Counter[str]:
    counted: Counter[str] = Counter()
    for path in Path(env["RELIABLE_TEST_RUNS"]).iterdir():
        counted.update(path.read_text().split())
    return counted


def succeeded(store: StateStore) -> int:
    with store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(jobs)
                                .where(jobs.c.status == JobStatus.SUCCEEDED.value)).scalar_one())


def test_three_schedulers_fire_each_slot_once_then_apply_the_misfire_policies(
        pg_store: StateStore, env: dict[str, str], schedulers: list[SchedulerProcess], tmp_path: Path) -> None:
    started = time.monotonic()
    # Midnight UTC two days ahead: the worker's own scheduler (real clock) never reaches a slot.
    t0 = (int(pg_store.now()) // 86400 + 2) * 86400
    subprocess.run([sys.executable, str(HERE / "scheduler_process.py"), "declare", str(t0 - 30)], env=env,
                   check=True, timeout=60)
    worker = WorkerProcess(env, tmp_path / "worker.log", processes=1, threads=8, app="schedules_app",
                           app_dir=HERE / "apps")
    try:
        # The day: minutes t0 .. t0 + 1439 min, walked by each process at its own pace.
        last = t0 + (DAY - 1) * MINUTE
        for process in schedulers:
            process.send(t0, last)
        day = [process.result() for process in schedulers]
        print(f"day ticked in {time.monotonic() - started:.1f}s")
        slots = slots_of(pg_store)
        assert slots["every_minute"] == [t0 + k * MINUTE for k in range(DAY)]
        quarters = [t0 + k * 15 * MINUTE for k in range(DAY // 15)]
        assert slots["quarter_once"] == quarters and slots["quarter_catch_up"] == quarters
        fired = Counter[str]()
        for result in day:
            fired.update(result["fired"])  # type: ignore[arg-type]
        assert fired == {"every_minute": DAY, "quarter_once": 96, "quarter_catch_up": 96}  # no slot fired twice
        assert all(not r["skipped"] and r["unpublished"] == 0 for r in day)
        total = DAY + 2 * 96
        with pg_store.read() as conn:
            job_ids = set(conn.execute(select(jobs.c.job_id)).scalars())
        assert job_ids == {slot_id(pg_store, name, s) for name, found in slots.items() for s in found}
        assert len(job_ids) == total
        wait_for(lambda: succeeded(pg_store) == total, f"{total} slot jobs done", timeout=90,
                 context=worker.output)
        assert runs(env) == Counter({job_id: 1 for job_id in job_ids})  # each slot's job ran once
        print(f"day ran in {time.monotonic() - started:.1f}s")

        # A 2-hour outage: no tick for the minutes t0 + 1440 .. t0 + 1559; ticks again from t0 + 1560.
        resume = t0 + 1560 * MINUTE
        for process in schedulers:
            process.send(resume, resume + 5 * MINUTE)
        after = [process.result() for process in schedulers]
        slots = slots_of(pg_store)
        new = {name: [s for s in found if s > last] for name, found in slots.items()}
        assert new["every_minute"] == [resume + k * MINUTE for k in range(6)]  # skip: only the on-time slots
        assert new["quarter_once"] == [t0 + 1545 * MINUTE, resume]  # run_once: the most recent missed one
        assert new["quarter_catch_up"] == [t0 + m * MINUTE for m in (1515, 1530, 1545, 1560)]  # the last 3 missed
        misfires = {name: [e.detail for e in list_events(pg_store, name) if e.event == "misfire"] for name in NAMES}
        assert {name: [(d["missed"], d["skipped"]) for d in found] for name, found in misfires.items()} == {
            "every_minute": [(120, 120)], "quarter_once": [(8, 7)], "quarter_catch_up": [(8, 5)]}
        outage_total = 6 + 2 + 4
        wait_for(lambda: succeeded(pg_store) == total + outage_total, "the outage's slot jobs done", timeout=60,
                 context=worker.output)
        counted = runs(env)
        assert len(counted) == total + outage_total and set(counted.values()) == {1}
    finally:
        worker.stop()
    per_process = [sum(r["fired"].values()) for r in day]  # type: ignore[union-attr]
    assert sum(n > 0 for n in per_process) >= 2, per_process  # they did compete for the slots
    print(f"\nslots fired per process (day): {per_process}; after the outage: "
          f"{[sum(r['fired'].values()) for r in after]}; {time.monotonic() - started:.1f}s")  # type: ignore[union-attr]
