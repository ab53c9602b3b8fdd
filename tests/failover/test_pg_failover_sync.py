"""A PostgreSQL primary with a synchronous standby, killed (-9) mid-run; the standby promoted.

Both servers are private clusters this test starts on free ports (the shared 5432 is never
touched); the workers are real `dramatiq` processes on the shared RabbitMQ, on a queue of their own,
and they and their recovery loops reach the store through ONE two-host URL with
target_session_attrs=read-write. Each job writes to a ledger file (tests/failover/apps/ledger_app.py)
the claim it saw committed and the effect it applied. After the failover every job must end
SUCCEEDED and the promoted standby must hold every claim and effect record a worker saw committed,
with fencing tokens strictly increasing per job and none issued twice. The recovery times are
printed: promote -> first commit on the new primary, promote -> every job terminal.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from private_postgres import replicated_postgres
from sqlalchemy import text

import reliable
from reliable.states import TERMINAL_STATES, Event, JobStatus
from reliable.store import StateStore
from reliable.store.replication import check_replication

from support import wait_for
from workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

APPS = Path(__file__).parent / "apps"
JOBS = 300
JOB_SECONDS = 0.1
FAILOVER_AFTER = 100  # jobs terminal when the primary is killed: a third of the run is done
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


def terminal_count(store: StateStore) -> int:
    """Jobs in a terminal state (0 while the store cannot answer)."""
    return int(polled(store, "SELECT count(*) FROM reliable_jobs WHERE status = ANY(:t)", t=TERMINAL) or 0)


@pytest.mark.timeout(300)
def test_promoting_a_synchronous_standby_mid_run_loses_no_committed_claim(rabbitmq_url: str, queue_name: str,
                                                                         tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.log"
    with replicated_postgres(synchronous=True, max_connections=60) as pair:
        url = pair.create_database("store")
        observer = StateStore(url, max_connections=2)
        observer.upgrade()
        report = check_replication(observer.engine, "require_sync")  # the boot check passes: nothing to refuse
        assert report is not None and report.problems == [] and report.standbys == (("standby1", "sync"),)
        broker = RabbitmqBroker(url=rabbitmq_url)
        producer = reliable.install(broker, store=url, recovery=False, metrics=False, json_logs=False,
                                    max_connections=1)
        env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_STORE": url, "RELIABLE_TEST_QUEUE": queue_name,
               "RELIABLE_TEST_LEDGER": str(ledger), "RELIABLE_TEST_REPLICATION": "require_sync"}
        worker = WorkerProcess(env, tmp_path / "worker.log", processes=2, threads=8, app="ledger_app", app_dir=APPS)
        try:
            messages: list[dramatiq.Message[Any]] = [
                dramatiq.Message(queue_name=queue_name, actor_name="pay", args=(JOB_SECONDS,), kwargs={}, options={})
                for _ in range(JOBS)]
            producer.enqueue_many(broker, messages)
            wait_for(lambda: terminal_count(observer) >= FAILOVER_AFTER, f"{FAILOVER_AFTER} jobs terminal",
                     timeout=90, context=worker.output)
            running = int(scalar(observer, "SELECT count(*) FROM reliable_jobs WHERE status = 'RUNNING'"))
            pair.primary.kill()
            killed_at = time.time()
            pair.promote()
            promoted_at = time.time()
            first_commit = float(wait_for(lambda: polled(
                observer, "SELECT min(at) FROM reliable_job_events WHERE at > :t", t=promoted_at),
                "a first commit on the promoted standby", timeout=60, context=worker.output))
            wait_for(lambda: terminal_count(observer) == JOBS, "every job terminal after the failover", timeout=120,
                     context=worker.output)
            all_terminal_at = time.time()
        finally:
            worker.stop()
            broker.close()
            producer.store.close()
        log = worker.output()
        waits = log.count("store unavailable, retrying")  # a worker write that waited out the failover
        recovery_failures = log.count("recovery pass failed")
        statuses = Counter(str(r[0]) for r in rows(observer, "SELECT status FROM reliable_jobs"))
        claims = rows(observer, f"SELECT job_id, lease_id, attempt_id, at FROM reliable_job_events "
                                f"WHERE event = '{Event.CLAIM.value}' ORDER BY job_id, id")
        attempts = {(r[0], int(r[1]), r[2]) for r in claims}  # an attempt is its claim's event (job_history)
        finished = {r[0]: float(r[1]) for r in rows(
            observer, f"SELECT job_id, at FROM reliable_job_events WHERE event = '{Event.SUCCEED.value}'")}
        effects = rows(observer, "SELECT job_id, lease_id, attempt_id FROM reliable_effects")
        stale = int(scalar(observer, "SELECT count(*) FROM reliable_job_events WHERE event = 'stale_commit_rejected'"))
        observer.close()

    seen_claims = ledger_lines(ledger, "claim")
    seen_effects = ledger_lines(ledger, "effect")
    lost_claims = [c for c in seen_claims if c not in attempts]
    tokens: dict[str, list[int]] = defaultdict(list)
    holders: dict[tuple[str, int], set[str]] = defaultdict(set)
    for job_id, lease_id, attempt_id, _at in claims:
        tokens[job_id].append(int(lease_id))
        holders[(job_id, int(lease_id))].add(attempt_id)
    for job_id, lease_id, attempt_id in [*seen_claims, *attempts]:
        holders[(job_id, lease_id)].add(attempt_id)
    not_increasing = sorted(j for j, t in tokens.items() if any(b <= a for a, b in itertools.pairwise(t)))
    reissued = sorted(key for key, who in holders.items() if len(who) > 1)
    stale_effects = [e for e in effects if (e[0], int(e[1]), e[2]) not in attempts]
    lost_effects = [e for e in seen_effects if e not in {(r[0], int(r[1]), r[2]) for r in effects}]
    applied = Counter(job_id for job_id, _, _ in seen_effects)
    applied_twice = sorted(j for j, n in applied.items() if n > 1)
    effect_rows = Counter(str(e[0]) for e in effects)
    spanning = sum(1 for job_id, _, _, at in claims if float(at) < killed_at and finished.get(job_id, 0) > promoted_at)
    print(f"\nsynchronous standby promoted after kill -9 of the primary: {JOBS} jobs, {running} running at the kill, "
          f"{spanning} claimed before it and finished after; promote took {promoted_at - killed_at:.2f}s; "
          f"promote -> first commit {first_commit - promoted_at:.2f}s, -> all terminal "
          f"{all_terminal_at - promoted_at:.2f}s; {len(lost_claims)} committed claims lost, {len(reissued)} tokens "
          f"issued twice, {len(not_increasing)} jobs with tokens not increasing, {len(stale_effects)} stale effects "
          f"accepted, {len(lost_effects)} effect records lost, {len(applied_twice)} effects applied twice "
          f"({JOBS - len(applied)} recorded but their reply lost, so skipped by the retry), "
          f"{stale} stale commits rejected, {waits} write retries and {recovery_failures} failed recovery passes "
          f"while the store was away, statuses {dict(statuses)}")
    assert statuses == {JobStatus.SUCCEEDED.value: JOBS}
    assert spanning > 0 and waits > 0, "no job was in flight across the failover: the test did not test it"
    assert lost_claims == [] and lost_effects == []
    assert reissued == [] and not_increasing == [] and stale_effects == []
    assert applied_twice == [] and set(effect_rows.values()) == {1} and len(effect_rows) == JOBS
