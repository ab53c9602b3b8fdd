"""Limits across real worker processes (RabbitMQ and PostgreSQL): the concurrency limit holds
fleet-wide, a slot held by a killed worker frees itself when its lease expires, and a rate-limited
actor's concurrency goes down and comes back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import select

from reliable.collector import StoreCollector
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import job_events, limits

from support import wait_for
from workers import WorkerProcess, send

pytestmark = [pytest.mark.integration, pytest.mark.slow]

APP_DIR = Path(__file__).parent / "apps"
LEASE_TTL = 2.0


def _ledger(path: Path) -> list[tuple[str, str, str, float]]:
    if not path.exists():
        return []
    return [(kind, name, job, float(at)) for kind, name, job, at in
            (line.split() for line in path.read_text().splitlines() if line)]


def _max_overlap(entries: list[tuple[str, str, str, float]], name: str) -> int:
    """The most runs of `name` in progress at once (an end before a start at the same instant)."""
    points = sorted((at, 0 if kind == "E" else 1) for kind, n, _job, at in entries if n == name)
    running = peak = 0
    for _at, start in points:
        running += 1 if start else -1
        peak = max(peak, running)
    return peak


def _events(store: StateStore, *names: str) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(job_events.c.event, job_events.c.detail, job_events.c.at)
                                 .where(job_events.c.event.in_(names)).order_by(job_events.c.id)))


def _all(store: StateStore, messages: list[Any], status: JobStatus) -> bool:
    return all((job := store.find(m.message_id)) is not None and job.status is status for m in messages)


@pytest.fixture
def fleet(pg_store: StateStore, rabbitmq_url: str, queue_name: str, tmp_path: Path
          ) -> Iterator[tuple[dict[str, str], list[WorkerProcess], RabbitmqBroker]]:
    """Two worker processes (4 threads each) on this test's queue and store; stopped after."""
    env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": str(pg_store.engine.url.render_as_string(
        hide_password=False)), "RELIABLE_TEST_QUEUE": queue_name, "LIMITS_LEDGER": str(tmp_path / "ledger"),
        "LIMITS_CONCURRENCY": "2", "LIMITS_API_COUNTER": str(tmp_path / "api"), "LIMITS_API_FAIL_FIRST": "12",
        "RELIABLE_TEST_LEASE_TTL": str(LEASE_TTL)}
    workers: list[WorkerProcess] = []
    broker = RabbitmqBroker(url=rabbitmq_url)
    try:
        workers.extend(WorkerProcess(env, tmp_path / f"worker{i}.log", threads=4, app="limits_app", app_dir=APP_DIR)
                       for i in range(2))
        yield env, workers, broker
    finally:
        for worker in workers:
            worker.stop()
        broker.close()


def test_the_concurrency_limit_holds_across_worker_processes(fleet: Any, pg_store: StateStore,
                                                             queue_name: str) -> None:
    env, workers, broker = fleet
    messages = [send(broker, queue_name, "limited", 0.15) for _ in range(24)]
    wait_for(lambda: _all(pg_store, messages, JobStatus.SUCCEEDED), "24 limited jobs SUCCEEDED", timeout=60)
    entries = _ledger(Path(env["LIMITS_LEDGER"]))
    assert sum(kind == "S" for kind, *_ in entries) == 24
    assert _max_overlap(entries, "limited") == 2, "8 threads, a limit of 2: exactly 2 at once at the peak"
    assert len({job for _k, _n, job, _a in entries}) == 24
    assert all(pg_store.get(m.message_id).attempt == 1 for m in messages), "a deferral is not an attempt"
    deferred = _events(pg_store, "limit_deferred")
    assert deferred, "8 threads competing for 2 slots: some deliveries were deferred"
    assert all(w.proc.poll() is None for w in workers)


def test_a_killed_holders_slot_frees_itself_when_its_lease_expires(fleet: Any, pg_store: StateStore,
                                                                   queue_name: str, tmp_path: Path) -> None:
    env, workers, broker = fleet
    ledger = Path(env["LIMITS_LEDGER"])
    workers[1].stop()  # the first job must land on worker 0: the one killed
    release = tmp_path / "release"
    first = send(broker, queue_name, "held", str(release), 60.0)
    wait_for(lambda: any(job == first.message_id for _k, _n, job, _a in _ledger(ledger)), "the first job started",
             timeout=30)
    second = send(broker, queue_name, "held", str(release), 60.0)
    survivor = WorkerProcess(env, tmp_path / "survivor.log", threads=4, app="limits_app", app_dir=APP_DIR)
    workers.append(survivor)
    wait_for(lambda: _events(pg_store, "limit_deferred"), "the second job deferred (its slot is held)",
             timeout=30)
    killed_at = time.time()
    workers[0].kill()
    release.touch()  # whichever runs next ends at once
    wait_for(lambda: _all(pg_store, [first, second], JobStatus.SUCCEEDED), "both held jobs SUCCEEDED",
             timeout=45)
    starts_after_kill = [at for kind, _n, _job, at in _ledger(ledger) if kind == "S" and at > killed_at]
    assert starts_after_kill
    freed_after = min(starts_after_kill) - killed_at
    # Soon after the kill; before the dead attempt's lease (TTL 2 s, renewed every 0.5 s) expired only
    # when a process on this host saw the holder dead for certain (its pid gone) and released it.
    assert freed_after <= LEASE_TTL + 10, freed_after
    if freed_after < LEASE_TTL - 0.6:
        assert any("is dead: pid_gone" in (e.reason or "") for e in pg_store.events(first.message_id)), freed_after
    assert _max_overlap([e for e in _ledger(ledger) if e[3] > killed_at], "held") <= 1
    print(f"slot freed {freed_after:.2f}s after kill -9 (lease ttl {LEASE_TTL}s)")


def test_sustained_rate_limiting_lowers_concurrency_then_quiet_restores_it(
        fleet: Any, pg_store: StateStore, queue_name: str) -> None:
    env, _workers, broker = fleet
    messages = [send(broker, queue_name, "call_api", 0.2) for _ in range(16)]
    wait_for(lambda: _events(pg_store, "concurrency_reduced"), "the concurrency reduced", timeout=30)
    families = {f.name: f for f in StoreCollector(pg_store).collect()}
    sample = {s.labels["actor"]: s.value for s in families["reliable_concurrency_limit"].samples}
    assert sample["call_api"] < 4
    assert {s.labels["actor"]: s.value for s in families["reliable_concurrency_limit_declared"].samples} == \
        {"call_api": 4}

    def restored() -> bool:
        with pg_store.engine.connect() as conn:
            effective = conn.execute(select(limits.c.effective).where(limits.c.name == "call_api")).scalar_one()
        if effective < 4:  # keep the actor busy: a step back up is taken at a delivery after a quiet period
            messages.append(send(broker, queue_name, "call_api", 0.2))
        return bool(effective == 4)

    wait_for(restored, "the concurrency restored to 4", timeout=40, interval=0.5)
    wait_for(lambda: _all(pg_store, messages, JobStatus.SUCCEEDED), "every call_api job SUCCEEDED", timeout=40)
    reduced = [d for e, d, _ in _events(pg_store, "concurrency_reduced")]
    restored_events = _events(pg_store, "concurrency_restored")
    assert reduced and restored_events
    assert '"declared": 4' in reduced[0] or '"declared":4' in reduced[0]
    assert _events(pg_store, "concurrency_reduced")[-1][2] < restored_events[0][2]
    entries = _ledger(Path(env["LIMITS_LEDGER"]))
    assert _max_overlap(entries, "call_api") <= 4
