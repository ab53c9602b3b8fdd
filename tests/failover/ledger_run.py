"""The failover tests' run and audit: real workers, a ledger outside the database, what was lost.

    with ledger_run(url, rabbitmq_url, queue_name, tmp_path) as run:   # JOBS jobs enqueued, 2x8 workers
        run.wait_terminal(FAILOVER_AFTER)
        ...                                                          # the failover, however it happens
        first_commit = run.first_commit_after(failed_at)
        run.wait_terminal(JOBS)
    audit = run.audit(before=failed_at, after=recovered_at)
    assert_nothing_lost(audit)

The workers are real `dramatiq` processes on the shared RabbitMQ (a queue of the test's own) with
`replication="require_sync"`, and they and their recovery loops reach the store through the one
URL the test gives. Each job (tests/failover/apps/ledger_app.py) writes to a ledger file the claim
it saw committed and the effect it applied. The audit compares the ledger with what the store has
after the failover: every job SUCCEEDED, every claim and effect record a worker saw committed
still there, fencing tokens strictly increasing per job and none issued to two attempts, no effect
accepted from a superseded lease, each effect applied once.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import text

import reliable
from reliable.states import TERMINAL_STATES, Event, JobStatus
from reliable.store import StateStore

from support import wait_for
from workers import WorkerProcess

__all__ = ["FAILOVER_AFTER", "JOBS", "Audit", "LedgerRun", "assert_nothing_lost", "ledger_run"]

APPS = Path(__file__).parent / "apps"
JOBS = 300
JOB_SECONDS = 0.1
FAILOVER_AFTER = 100  # jobs terminal when the primary fails: a third of the run is done
TERMINAL = sorted(s.value for s in TERMINAL_STATES)


def ledger_lines(ledger: Path, kind: str) -> list[tuple[str, int, str]]:
    """(job_id, lease_id, attempt_id) of every `kind` line the workers appended."""
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return [(f[1], int(f[2]), f[3]) for f in (line.split() for line in lines) if f[0] == kind]


def scalar(store: StateStore, sql: str, **params: Any) -> Any:
    """One value from the store's database (whichever server is the primary now)."""
    with store.engine.connect() as conn:
        return conn.execute(text(sql), params).scalar()


def rows(store: StateStore, sql: str) -> list[Any]:
    """Every row of `sql` on the store's database."""
    with store.engine.connect() as conn:
        return list(conn.execute(text(sql)).all())


def polled(store: StateStore, sql: str, **params: Any) -> Any:
    """`scalar`, or None while the store cannot answer (the failover is under way)."""
    try:
        return scalar(store, sql, **params)
    except Exception:
        return None


@dataclass(frozen=True)
class Audit:
    """What the store holds after the failover, against what the workers saw committed."""

    statuses: Counter[str]
    lost_claims: list[tuple[str, int, str]]
    lost_effects: list[tuple[str, int, str]]
    reissued: list[tuple[str, int]]
    not_increasing: list[str]
    stale_effects: list[Any]
    applied_twice: list[str]
    effect_rows: Counter[str]
    unreplied: int  # effects recorded whose reply was lost: the retry skipped them
    spanning: int  # jobs claimed before the failure and finished after the recovery
    stale_rejected: int
    waits: int  # worker writes that waited out the outage
    recovery_failures: int

    def summary(self) -> str:
        """The figures in one sentence."""
        return (f"{len(self.lost_claims)} committed claims lost, {len(self.reissued)} tokens issued twice, "
                f"{len(self.not_increasing)} jobs with tokens not increasing, {len(self.stale_effects)} stale "
                f"effects accepted, {len(self.lost_effects)} effect records lost, {len(self.applied_twice)} effects "
                f"applied twice ({self.unreplied} recorded but their reply lost, so skipped by the retry), "
                f"{self.stale_rejected} stale commits rejected, {self.spanning} jobs claimed before the failure and "
                f"finished after it, {self.waits} write retries and {self.recovery_failures} failed recovery "
                f"passes while the store was away, statuses {dict(self.statuses)}")


def assert_nothing_lost(audit: Audit) -> None:
    """Every job SUCCEEDED once, nothing committed lost, no token reissued, no stale commit accepted,
    and the failover did happen under load (a job in flight across it, a write that waited)."""
    assert audit.statuses == {JobStatus.SUCCEEDED.value: JOBS}
    assert audit.spanning > 0 and audit.waits > 0, "no job was in flight across the failover: the test did not test it"
    assert audit.lost_claims == [] and audit.lost_effects == []
    assert audit.reissued == [] and audit.not_increasing == [] and audit.stale_effects == []
    assert audit.applied_twice == [] and set(audit.effect_rows.values()) == {1} and len(audit.effect_rows) == JOBS


class LedgerRun:
    """The running workers, the ledger and an observer store of `ledger_run`."""

    def __init__(self, observer: StateStore, ledger: Path, worker: WorkerProcess) -> None:
        self.observer = observer
        self.ledger = ledger
        self.worker = worker

    def terminal_count(self) -> int:
        """Jobs in a terminal state (0 while the store cannot answer)."""
        return int(polled(self.observer, "SELECT count(*) FROM reliable_jobs WHERE status = ANY(:t)", t=TERMINAL)
                   or 0)

    def wait_terminal(self, count: int, *, timeout: float = 120) -> None:
        """Wait (bounded) until `count` jobs are terminal."""
        wait_for(lambda: self.terminal_count() >= count, f"{count} jobs terminal", timeout=timeout,
                 context=self.worker.output)

    def running(self) -> int:
        """Jobs RUNNING now."""
        return int(scalar(self.observer, "SELECT count(*) FROM reliable_jobs WHERE status = 'RUNNING'"))

    def first_commit_after(self, at: float, *, timeout: float = 60) -> float:
        """Wait (bounded) for the first job event committed after `at` (epoch seconds); its time."""
        return float(wait_for(lambda: polled(
            self.observer, "SELECT min(at) FROM reliable_job_events WHERE at > :t", t=at),
            "a first commit after the failover", timeout=timeout, context=self.worker.output))

    def audit(self, *, before: float, after: float) -> Audit:
        """Compare the store with the ledger; `spanning` counts jobs claimed before `before` and
        finished after `after`. Closes the observer."""
        log = self.worker.output()
        observer = self.observer
        statuses = Counter(str(r[0]) for r in rows(observer, "SELECT status FROM reliable_jobs"))
        claims = rows(observer, f"SELECT job_id, lease_id, attempt_id, at FROM reliable_job_events "
                                f"WHERE event = '{Event.CLAIM.value}' ORDER BY job_id, id")
        attempts = {(r[0], int(r[1]), r[2]) for r in claims}  # an attempt is its claim's event (job_history)
        finished = {r[0]: float(r[1]) for r in rows(
            observer, f"SELECT job_id, at FROM reliable_job_events WHERE event = '{Event.SUCCEED.value}'")}
        effects = rows(observer, "SELECT job_id, lease_id, attempt_id FROM reliable_effects")
        stale = int(scalar(observer, "SELECT count(*) FROM reliable_job_events WHERE event = 'stale_commit_rejected'"))
        observer.close()

        seen_claims = ledger_lines(self.ledger, "claim")
        seen_effects = ledger_lines(self.ledger, "effect")
        tokens: dict[str, list[int]] = defaultdict(list)
        holders: dict[tuple[str, int], set[str]] = defaultdict(set)
        for job_id, lease_id, attempt_id, _at in claims:
            tokens[job_id].append(int(lease_id))
            holders[(job_id, int(lease_id))].add(attempt_id)
        for job_id, lease_id, attempt_id in [*seen_claims, *attempts]:
            holders[(job_id, lease_id)].add(attempt_id)
        recorded = {(r[0], int(r[1]), r[2]) for r in effects}
        applied = Counter(job_id for job_id, _, _ in seen_effects)
        return Audit(
            statuses=statuses,
            lost_claims=[c for c in seen_claims if c not in attempts],
            lost_effects=[e for e in seen_effects if e not in recorded],
            reissued=sorted(key for key, who in holders.items() if len(who) > 1),
            not_increasing=sorted(j for j, t in tokens.items() if any(b <= a for a, b in itertools.pairwise(t))),
            stale_effects=[e for e in effects if (e[0], int(e[1]), e[2]) not in attempts],
            applied_twice=sorted(j for j, n in applied.items() if n > 1),
            effect_rows=Counter(str(e[0]) for e in effects),
            unreplied=JOBS - len(applied),
            spanning=sum(1 for job_id, _, _, at in claims if float(at) < before and finished.get(job_id, 0) > after),
            stale_rejected=stale,
            waits=log.count("store unavailable, retrying"),
            recovery_failures=log.count("recovery pass failed"),
        )


@contextlib.contextmanager
def ledger_run(url: str, rabbitmq_url: str, queue_name: str, tmp_path: Path) -> Iterator[LedgerRun]:
    """Migrate the store at `url`, enqueue JOBS ledger jobs, run 2x8 workers on them (require_sync);
    the workers stop on exit (the observer stays open for `LedgerRun.audit`)."""
    ledger = tmp_path / "ledger.log"
    observer = StateStore(url, max_connections=2)
    observer.upgrade()
    broker = RabbitmqBroker(url=rabbitmq_url)
    producer = reliable.install(broker, store=url, recovery=False, metrics=False, json_logs=False, max_connections=1)
    env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": url, "RELIABLE_TEST_QUEUE": queue_name,
           "RELIABLE_TEST_LEDGER": str(ledger), "RELIABLE_TEST_REPLICATION": "require_sync"}
    worker = WorkerProcess(env, tmp_path / "worker.log", processes=2, threads=8, app="ledger_app", app_dir=APPS)
    try:
        messages: list[dramatiq.Message[Any]] = [
            dramatiq.Message(queue_name=queue_name, actor_name="pay", args=(JOB_SECONDS,), kwargs={}, options={})
            for _ in range(JOBS)]
        producer.enqueue_many(broker, messages)
        yield LedgerRun(observer, ledger, worker)
    except BaseException:
        observer.close()
        raise
    finally:
        worker.stop()
        broker.close()
        producer.store.close()
