"""The pieces of a chaos run: workers of the chaos app, a paced producer, the faults, the figures."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
from chaos_services import PgCluster, postgres_outage, rabbitmq_outage
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

import reliable
from reliable.errors import StoreError
from reliable.states import JobStatus
from reliable.store import StateStore

from workers import WorkerProcess

logger = logging.getLogger("chaos")

APP_DIR = Path(__file__).parent / "apps"
POLICY = APP_DIR / "policy.yaml"
ACTOR = "chaos_units"
#: The policy's max_attempts for the actor (apps/policy.yaml): below it, the policy's answer is SUCCEEDED.
MAX_ATTEMPTS = 50


@dataclass(frozen=True)
class ChaosConfig:
    """The size of one chaos run."""

    name: str
    jobs: int
    units: int
    unit_seconds: float
    workers: int
    threads: int
    backlog: int  # jobs the producer keeps queued ahead of the workers
    kills: int
    freezes: int
    rabbitmq_restarts: int
    postgres_restarts: int
    freeze_seconds: float
    rabbitmq_down_seconds: float
    postgres_down_seconds: float
    run_timeout: float  # enqueue + faults + settle, seconds
    settle_timeout: float  # after the last fault, for every job to finish
    seed: int

    @property
    def faults(self) -> int:
        """How many faults the run injects."""
        return self.kills + self.freezes + self.rabbitmq_restarts + self.postgres_restarts


class ChaosWorker(WorkerProcess):
    """A real `dramatiq` CLI worker running tests/chaos/apps/chaos_app.py in its own process group."""

    def __init__(self, env: dict[str, str], log: Path, processes: int = 1, threads: int = 8) -> None:
        super().__init__(env, log, processes, threads, app="chaos_app", app_dir=APP_DIR)

    def pids(self) -> set[int]:
        """Every live process of its group (the CLI's main process and the forked workers)."""
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == self.proc.pid:  # pgrp
                found.add(int(entry.name))
        return found

    def alive(self) -> bool:
        """Whether the CLI's main process still runs."""
        return self.proc.poll() is None


def worker_pid(worker_id: str | None) -> int | None:
    """The process id in a reliable worker id (host:pid:random)."""
    if not worker_id:
        return None
    parts = worker_id.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


class Producer(threading.Thread):
    """Enqueue `total` jobs, keeping about `backlog` PENDING ahead of the workers, through every outage.

    Jobs are registered in the store before they are published (reliable's enqueue_many); a publish
    that fails while RabbitMQ is down leaves a PENDING job for the sweeper, which is the point.
    """

    def __init__(self, broker_url: str, store_url: str, queue: str, total: int, backlog: int,
                 args: tuple[Any, ...]) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.broker = RabbitmqBroker(url=broker_url)
        self.middleware = reliable.install(self.broker, store=store_url, policies=str(POLICY), recovery=False,
                                           metrics=False, json_logs=False)
        self.store = self.middleware.store
        self.queue, self.total, self.backlog, self.args = queue, total, backlog, args
        self.job_ids: list[str] = []
        self.publish_failures = 0
        self.store_waits = 0
        self.done = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while len(self.job_ids) < self.total and not self.stop.is_set():
                try:
                    pending = self.store.count_by_status().get(JobStatus.PENDING, 0)
                except StoreError:
                    self.store_waits += 1
                    time.sleep(0.5)
                    continue
                room = min(self.backlog - pending, 50, self.total - len(self.job_ids))
                if room <= 0:
                    time.sleep(0.05)
                    continue
                batch: list[dramatiq.Message[Any]] = [
                    dramatiq.Message(queue_name=self.queue, actor_name=ACTOR, args=self.args, kwargs={}, options={})
                    for _ in range(room)]
                try:
                    self.middleware.enqueue_many(self.broker, batch)
                except Exception as exc:
                    # Registered (one transaction, before any publish) unless the store said no.
                    self.publish_failures += 1
                    logger.warning("chaos producer: enqueue failed (%s); the sweeper owns what was registered", exc)
                    time.sleep(0.5)
                registered = self._registered([m.message_id for m in batch])
                self.job_ids.extend(registered)
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.error = exc
        finally:
            self.done.set()

    def _registered(self, ids: list[str]) -> list[str]:
        while not self.stop.is_set():
            try:
                return [i for i in ids if self.store.find(i) is not None]
            except StoreError:
                time.sleep(0.5)
        return []

    def close(self) -> None:
        """Stop producing and release the connections."""
        self.stop.set()
        self.join(30)
        self.broker.close()
        self.store.close()


@dataclass
class Fault:
    """One injected fault and what was seen of it."""

    kind: str  # kill | freeze | rabbitmq | postgres
    progress: float  # fraction of jobs SUCCEEDED that triggers it
    at: float = 0.0  # seconds since the run started
    duration: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


def plan_faults(rng: random.Random, kills: int, freezes: int, rabbitmq: int, postgres: int) -> list[Fault]:
    """The faults in a random order, spread over 5%..85% of the run with a little jitter."""
    kinds = ["kill"] * kills + ["freeze"] * freezes + ["rabbitmq"] * rabbitmq + ["postgres"] * postgres
    rng.shuffle(kinds)
    n = len(kinds)
    faults = []
    for i, kind in enumerate(kinds):
        base = 0.05 + 0.80 * (i + 0.5) / n
        faults.append(Fault(kind, round(min(0.9, max(0.03, base + rng.uniform(-0.2, 0.2) / n)), 3)))
    return faults


class Chaos:
    """Runs the workers and injects faults into them and into the services."""

    def __init__(self, env: dict[str, str], logs: Path, store: StateStore, cluster: PgCluster | None, *,
                 workers: int, threads: int, rng: random.Random, started: float) -> None:
        self.env, self.logs, self.store, self.cluster = env, logs, store, cluster
        self.threads, self.rng, self.started = threads, rng, started
        self.workers: list[ChaosWorker] = []
        self.all_workers: list[ChaosWorker] = []
        for _ in range(workers):
            self.start_worker()

    def start_worker(self) -> ChaosWorker:
        """Start one more worker (1 process x `threads` threads)."""
        log = self.logs / f"{self.env['RELIABLE_TEST_QUEUE']}-worker-{len(self.all_workers)}.log"
        worker = ChaosWorker(self.env, log, threads=self.threads)
        self.workers.append(worker)
        self.all_workers.append(worker)
        return worker

    def running_on(self, worker: ChaosWorker) -> list[str]:
        """Job ids the store says run on one of the worker's processes."""
        pids = worker.pids()
        return [j.job_id for j in self.store.list_jobs(status=[JobStatus.RUNNING], limit=10_000)
                if worker_pid(j.worker_id) in pids]

    def _busy_worker(self, timeout: float = 20.0) -> tuple[ChaosWorker, list[str]]:
        """A random worker that holds at least one RUNNING job (waits for one, bounded)."""
        deadline = time.monotonic() + timeout
        while True:
            candidates = list(self.workers)
            self.rng.shuffle(candidates)
            for worker in candidates:
                running = self.running_on(worker)
                if running:
                    return worker, running
            if time.monotonic() > deadline:
                raise AssertionError(f"no worker held a RUNNING job for {timeout}s")
            time.sleep(0.1)

    def inject(self, fault: Fault, *, freeze_seconds: float, rabbitmq_down: float, postgres_down: float) -> None:
        """Inject one fault; returns once it is over (services serving, workers restarted/thawed)."""
        fault.at = round(time.monotonic() - self.started, 2)
        began = time.monotonic()
        if fault.kind == "kill":
            worker, running = self._busy_worker()
            fault.detail = {"pids": sorted(worker.pids()), "running_jobs": len(running)}
            worker.kill()  # SIGKILL to the whole group: no hook runs, unacked messages go back
            self.workers.remove(worker)
            self.start_worker()
        elif fault.kind == "freeze":
            worker, running = self._busy_worker()
            pids = sorted(worker.pids())
            fault.detail = {"pids": pids, "running_jobs": len(running), "seconds": freeze_seconds,
                            "jobs": running}
            worker.signal(signal.SIGSTOP)
            try:
                time.sleep(freeze_seconds)
            finally:
                worker.signal(signal.SIGCONT)
        elif fault.kind == "rabbitmq":
            with rabbitmq_outage(rabbitmq_down) as figures:
                pass
            fault.detail = {"down_seconds": round(figures["up_at"] - figures["down_at"], 2),
                            "ready_after_start": round(figures["ready_after"], 2)}
        elif fault.kind == "postgres":
            assert self.cluster is not None
            with postgres_outage(self.cluster, postgres_down) as figures:
                pass
            fault.detail = {"down_seconds": round(figures["up_at"] - figures["down_at"], 2),
                            "ready_after_start": round(figures["ready_after"], 2)}
        else:  # pragma: no cover
            raise ValueError(fault.kind)
        fault.duration = round(time.monotonic() - began, 2)
        logger.warning("chaos: %s at %.1fs took %.1fs %s", fault.kind, fault.at, fault.duration, fault.detail)

    def revive_dead(self) -> int:
        """Restart workers whose main process exited on its own (a supervisor's job); how many."""
        dead = [w for w in self.workers if not w.alive()]
        for worker in dead:
            worker.stop()
            self.workers.remove(worker)
            self.start_worker()
        return len(dead)

    def stop(self) -> None:
        """Stop every worker (thawed first; SIGKILL if a graceful stop takes too long)."""
        for worker in self.all_workers:
            try:
                worker.stop()
            except Exception:  # pragma: no cover - best effort, never leave a process behind
                logger.exception("stopping a worker failed")
                if worker.proc.poll() is None:
                    os.killpg(worker.proc.pid, signal.SIGKILL)


def wait_for(predicate: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool:
    """Poll `predicate` until true or `timeout` s passed; whether it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except StoreError:
            pass  # the store is coming back
        time.sleep(poll)
    return False


# -- figures ---------------------------------------------------------------------------------------


def collect_figures(store_url: str, job_ids: list[str], units: int, logs: list[Path]) -> dict[str, Any]:
    """Everything the report states, read from the store, the ledger and the worker logs."""
    engine = create_engine(store_url, poolclass=NullPool)
    with engine.connect() as conn:
        statuses = {row.job_id: (row.status, row.attempt) for row in conn.execute(
            text("SELECT job_id, status, attempt FROM reliable_jobs"))}
        effect_rows = conn.execute(text(
            "SELECT job_id, op_key, duplicates, attempt_id FROM reliable_effects")).all()
        ledger = conn.execute(text(
            "SELECT job_id, unit, count(*) AS n FROM chaos_ledger GROUP BY job_id, unit")).all()
        event_counts: dict[str, int] = dict(conn.execute(text(
            "SELECT event, count(*) FROM reliable_job_events GROUP BY event")).all())
        succeed_per_job: dict[str, int] = dict(conn.execute(text(
            "SELECT job_id, count(*) FROM reliable_job_events WHERE event = 'succeed' GROUP BY job_id")).all())
        stale_writes: dict[str, int] = dict(conn.execute(text(
            "SELECT coalesce(detail::json->>'write', '?'), count(*) FROM reliable_job_events "
            "WHERE event = 'stale_commit_rejected' GROUP BY 1")).all())
        # A heartbeat renewal that reached the database just after the job's own successful finish
        # (same lease) is logged by reliable as a stale commit too: counted apart (see docs/chaos.md).
        after_own_success = int(conn.execute(text(
            "SELECT count(*) FROM reliable_job_events e WHERE e.event = 'stale_commit_rejected' "
            "AND EXISTS (SELECT 1 FROM reliable_job_events s WHERE s.job_id = e.job_id AND s.event = 'succeed' "
            "AND s.lease_id = e.lease_id AND s.id < e.id)")).scalar_one())
        recoveries = conn.execute(text(
            "SELECT e.job_id, e.at, (e.detail::json->>'lease_expires_at')::float8 AS expired_at, "
            "e.detail::json->>'expired_worker' AS expired_worker, "
            "(SELECT min(c.at) FROM reliable_job_events c WHERE c.job_id = e.job_id AND c.event = 'claim' "
            " AND c.id > e.id) AS reclaimed_at, "
            # The expired lease's own worker may still finish first (a thawed worker): the store
            # accepts that late completion while nobody re-claimed the job (states.late_target).
            "(SELECT min(c.at) FROM reliable_job_events c WHERE c.job_id = e.job_id AND c.id > e.id "
            " AND c.detail::json->>'late_completion' = 'true') AS completed_late_at "
            "FROM reliable_job_events e WHERE e.event = 'lease_expired'")).all()
        # Each attempt (a claim) with the event that ended it, as reliable.store.job_history reads it.
        attempt_outcomes: dict[str, str | None] = dict(conn.execute(text(
            "SELECT s.attempt_id, (SELECT x.event FROM reliable_job_events x WHERE x.job_id = s.job_id "
            " AND x.attempt_id = s.attempt_id AND x.id > s.id AND x.from_status IN ('RUNNING', 'STOPPING') "
            " AND x.to_status NOT IN ('RUNNING', 'STOPPING') ORDER BY x.id LIMIT 1) "
            "FROM reliable_job_events s WHERE s.event = 'claim'")).all())
        # The whole history of a job whose expired lease was never re-claimed: what the report needs
        # to explain the failure (the database is dropped after the run).
        unreclaimed = sorted({r.job_id for r in recoveries
                              if r.reclaimed_at is None and r.completed_late_at is None})[:3]
        unreclaimed_histories = {job_id: [
            f"{row.id} {row.at:.3f} {row.event} {row.from_status}->{row.to_status} v{row.version} "
            f"lease={row.lease_id} worker={row.worker_id} {row.detail or ''}"
            for row in conn.execute(text(
                "SELECT id, at, event, from_status, to_status, version, lease_id, worker_id, detail "
                "FROM reliable_job_events WHERE job_id = :job_id ORDER BY id"), {"job_id": job_id})]
            for job_id in unreclaimed}
    engine.dispose()

    produced = set(job_ids)
    lost = sorted(j for j in produced if statuses.get(j, ("MISSING", 0))[0] != JobStatus.SUCCEEDED.value)
    unit_rows = [r for r in effect_rows if ":start-" not in r.op_key]
    expected_keys = {f"{j}:{u}" for j in produced for u in range(units)}
    seen_keys = [r.op_key for r in unit_rows]
    ledger_counts = {(r.job_id, r.unit): r.n for r in ledger}
    ledger_doubles = sorted(f"{j}:{u}" for (j, u), n in ledger_counts.items() if n > 1)
    ledger_gaps = sorted(k for k in expected_keys if (k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1]))
                         not in ledger_counts)
    gap_attempts = {r.op_key: attempt_outcomes.get(r.attempt_id) for r in unit_rows if r.op_key in set(ledger_gaps)}
    recovery_times = [r.reclaimed_at - r.at for r in recoveries if r.reclaimed_at is not None]
    expiry_to_claim = [r.reclaimed_at - r.expired_at for r in recoveries
                       if r.reclaimed_at is not None and r.expired_at is not None]
    log_text = "".join(p.read_text(errors="replace") for p in logs if p.exists())
    unavailable_lines = [line for line in log_text.splitlines() if "store unavailable" in line]

    def stat(values: list[float], fn: Callable[[list[float]], float]) -> float | None:
        return round(fn(values), 3) if values else None

    return {
        "jobs_produced": len(produced),
        "jobs_in_store": len(statuses),
        "status_counts": {s: sum(1 for v in statuses.values() if v[0] == s) for s in {v[0] for v in statuses.values()}},
        "jobs_lost": len(lost),
        "lost_job_ids": lost[:20],
        "jobs_not_exactly_one_succeed": sorted(j for j in produced if succeed_per_job.get(j, 0) != 1)[:20],
        "max_attempt": max((a for _, a in statuses.values()), default=0),
        "unit_effect_rows": len(unit_rows),
        "unit_effects_expected": len(expected_keys),
        "unit_effects_missing": len(expected_keys - set(seen_keys)),
        "unit_effects_unexpected": len(set(seen_keys) - expected_keys),
        "effects_applied_twice": len(ledger_doubles),
        "effects_applied_twice_keys": ledger_doubles[:20],
        "replays_detected": sum(r.duplicates for r in unit_rows),
        "duplicate_effect_events": event_counts.get("duplicate_effect", 0),
        "ledger_gaps": len(ledger_gaps),
        "ledger_gap_attempt_outcomes": gap_attempts,
        "stale_commits_rejected": event_counts.get("stale_commit_rejected", 0),
        "stale_commits_by_write": stale_writes,
        "stale_commits_after_own_success": after_own_success,
        "stale_commits_genuine": event_counts.get("stale_commit_rejected", 0) - after_own_success,
        "lease_expired": event_counts.get("lease_expired", 0),
        "lease_expired_workers": sorted({r.expired_worker for r in recoveries if r.expired_worker}),
        "lease_expired_not_reclaimed": sum(1 for r in recoveries
                                           if r.reclaimed_at is None and r.completed_late_at is None),
        "lease_expired_completed_late": sum(1 for r in recoveries
                                            if r.completed_late_at is not None
                                            and (r.reclaimed_at is None or r.completed_late_at < r.reclaimed_at)),
        "lease_expired_not_reclaimed_histories": unreclaimed_histories,
        "other_crash_outcomes": {e: n for e, n in event_counts.items()
                                 if e.startswith("lease_expired_") or e in ("dead_letter", "need_review", "fail")},
        "recovery_seconds_median": stat(recovery_times, statistics.median),
        "recovery_seconds_max": stat(recovery_times, max),
        "expiry_to_claim_seconds_median": stat(expiry_to_claim, statistics.median),
        "expiry_to_claim_seconds_max": stat(expiry_to_claim, max),
        "claims": event_counts.get("claim", 0),
        "claims_refused": event_counts.get("claim_refused", 0),
        "redispatched_by_sweeper": event_counts.get("redispatched", 0),
        "retries_scheduled": event_counts.get("retry_scheduled", 0),
        "store_unavailable_log_lines": len(unavailable_lines),
        "store_unavailable_kept_unacked_lines": sum(1 for line in unavailable_lines if "kept unacked" in line),
        "store_unavailable_sample": unavailable_lines[:3],
    }


def report_paragraph(config_name: str, figures: dict[str, Any], faults: list[Fault], seconds: float) -> str:
    """The one-paragraph report."""
    kinds = {k: sum(1 for f in faults if f.kind == k) for k in ("kill", "freeze", "rabbitmq", "postgres")}
    return (
        f"chaos ({config_name}, seed {figures.get('seed')}): {figures['jobs_produced']} jobs of "
        f"{figures.get('units')} checkpointed units in {seconds:.0f}s with {len(faults)} faults "
        f"({kinds['kill']} worker SIGKILLs, {kinds['freeze']} SIGSTOP/SIGCONT freezes, "
        f"{kinds['rabbitmq']} RabbitMQ restarts, {kinds['postgres']} PostgreSQL restarts); "
        f"jobs lost: {figures['jobs_lost']}; effects applied twice: {figures['effects_applied_twice']} "
        f"(replays detected and skipped: {figures['replays_detected']}, ledger gaps: {figures['ledger_gaps']}); "
        f"stale commits rejected: {figures['stale_commits_genuine']} (plus "
        f"{figures['stale_commits_after_own_success']} spurious heartbeat ones after the job's own success); "
        f"leases expired: {figures['lease_expired']} ({figures['lease_expired_completed_late']} completed late by "
        f"their own worker before a re-claim), "
        f"recovery (lease_expired -> claim) median {figures['recovery_seconds_median']}s, "
        f"max {figures['recovery_seconds_max']}s (from the lease's expiry: median "
        f"{figures['expiry_to_claim_seconds_median']}s, max {figures['expiry_to_claim_seconds_max']}s); "
        f"final states: {figures['status_counts']} (policy says SUCCEEDED; highest attempt "
        f"{figures['max_attempt']} of {MAX_ATTEMPTS}); 'store unavailable' logged "
        f"{figures['store_unavailable_log_lines']} times while PostgreSQL was down; "
        f"{figures['redispatched_by_sweeper']} sweeper re-dispatches, {figures['claims_refused']} refused claims."
    )


def write_report(figures: dict[str, Any]) -> None:
    """Write the figures as JSON to $RELIABLE_CHAOS_REPORT when set."""
    target = os.environ.get("RELIABLE_CHAOS_REPORT")
    if target:
        Path(target).write_text(json.dumps(figures, indent=2, sort_keys=True, default=str) + "\n")
