"""Patroni (on etcd) promotes the synchronous standby after the leader's machine dies mid-run.

The same run as test_pg_failover_sync.py (300 ledger jobs, real `dramatiq` workers on the shared
RabbitMQ, `replication="require_sync"`, tests/failover/ledger_run.py), but the promotion is
Patroni's: two members in `synchronous_mode` on a private etcd (tests/private_patroni.py, free
ports, removed afterwards). After a third of the jobs the leader's machine dies: kill -9 of its
Patroni and of its postgres at once. Killing only the postmaster would not test a failover (the
leader's Patroni restarts postgres in place, it still holds the leader key); killing only Patroni
leaves a primary running that nobody manages (the second test). Nothing else is done: no promote, no restart of a
worker. Patroni waits for the leader key to expire (ttl), promotes the member that /sync names,
and the workers, whose URL names both members with target_session_attrs=read-write as
docs/postgresql-failover.md tells users to write it, find it on their own.

Asserted as in the synchronous test: every job SUCCEEDED, 0 committed claims or effect records
lost, 0 tokens issued twice, tokens strictly increasing per job, 0 stale effects accepted, each
effect applied once. Printed (run with -s): kill -> Patroni's promotion, kill -> first commit,
kill -> every job terminal.

The second test kills the leader's Patroni alone, without workers: the URL keeps choosing the old
primary, whose commits wait for a synchronous standby that left, until its Patroni is restarted,
which acknowledges such a commit and then loses it in the demotion (the doc's "What dies" table).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from ledger_run import FAILOVER_AFTER, JOBS, assert_nothing_lost, ledger_run
from private_patroni import DCS_TIMEOUTS, PatroniMember, patroni_cluster
from sqlalchemy import text

from reliable.errors import LeaseLost, StoreError, StoreUnavailable
from reliable.store import Claim, NewJob, StateStore
from reliable.store.replication import check_replication

from support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]

TIMELINE_FLOOR = 1 << 40  # the first token on timeline 2: (2 - 1) << 40


@pytest.mark.timeout(240)
def test_patroni_promotes_the_sync_standby_when_the_leader_dies_mid_run(rabbitmq_url: str, queue_name: str,
                                                                        tmp_path: Path) -> None:
    with patroni_cluster(members=2) as cluster:
        url = cluster.create_database("store")
        old = cluster.leader()
        sync = next(m for m in cluster.members if m.is_sync_standby())
        with ledger_run(url, rabbitmq_url, queue_name, tmp_path) as run:
            report = check_replication(run.observer.engine, "require_sync")  # Patroni's settings pass the boot check
            assert report is not None and report.problems == [] and report.standbys == ((sync.name, "sync"),)
            run.wait_terminal(FAILOVER_AFTER, timeout=90)
            running = run.running()
            killed_at = time.time()
            old.kill()
            dead_at = time.time()  # events are stamped by the server: one after this is on the new leader
            new = cluster.wait_leader(other_than=old, timeout=60)
            promoted_at = time.time()
            first_commit = run.first_commit_after(dead_at)
            run.wait_terminal(JOBS)
            all_terminal_at = time.time()
        audit = run.audit(before=killed_at, after=first_commit)

    timings = {"ttl": DCS_TIMEOUTS["ttl"], "loop_wait": DCS_TIMEOUTS["loop_wait"],
               "kill_to_promoted": round(promoted_at - killed_at, 2),
               "kill_to_first_commit": round(first_commit - killed_at, 2),
               "kill_to_all_done": round(all_terminal_at - killed_at, 2), "running_at_kill": running}
    print(f"\nPatroni promoted {new.name} after kill -9 of leader {old.name} (Patroni and postgres): {JOBS} jobs; "
          f"timings {json.dumps(timings)}; {audit.summary()}")
    assert new is sync, f"Patroni promoted {new.name}, not the synchronous standby {sync.name}"
    assert_nothing_lost(audit)


@pytest.mark.timeout(180)
def test_a_leader_whose_patroni_died_holds_the_url_and_its_restart_acknowledges_a_lost_claim() -> None:
    """The third row of the doc's "What dies" table: Patroni alone dies on the leader. Patroni
    promotes the synchronous standby, but the old primary runs on, writable: libpq takes it (first
    in the URL) and a claim's commit waits there for a synchronous standby that left. When the
    member's Patroni is restarted, it reloads its postgres without synchronous_standby_names before
    it demotes it: the waiting commit is acknowledged, on the old timeline, and lost with the
    demotion. As after an asynchronous failover, the timeline floor keeps that token from being
    issued again, and the holder of the lost claim cannot commit on the promoted member."""
    with patroni_cluster(members=2) as cluster:
        url = cluster.create_database("store")
        old = cluster.leader()
        store, probe = StateStore(url, max_connections=1), StateStore(url, max_connections=1)
        try:
            store.upgrade()
            job_id = f"orphan-{uuid.uuid4().hex[:8]}"
            store.register(NewJob(job_id, "payments", "pay", {"args": [], "kwargs": {}}))
            old.kill_patroni()
            new = cluster.wait_leader(other_than=old, timeout=60)
            with probe.engine.connect() as conn:  # a new connection: libpq's choice now
                assert conn.execute(text("SELECT inet_server_port()")).scalar() == old.pg_port
            outcome: list[object] = []
            claiming = threading.Thread(target=lambda: outcome.append(claim_or_error(store, job_id)), daemon=True)
            claiming.start()
            wait_for(lambda: sync_waits(old) > 0, "the claim's commit waiting for the synchronous standby", timeout=60,
                     context=cluster.logs)
            assert claiming.is_alive() and outcome == []
            old.start()  # its Patroni is back: it rewrites and reloads its postgres' settings, then demotes it
            claiming.join(timeout=60)
            assert not claiming.is_alive(), "the claim still waits after the old leader's Patroni came back"
            lost = outcome[0]
            assert isinstance(lost, Claim) and lost.lease_id == 1, (
                f"{lost!r}: the restarted Patroni no longer releases the waiting commit before it demotes; "
                "update the Patroni section of docs/postgresql-failover.md")
            wait_for(lambda: not old.accepts_writes(), "the old leader demoted", timeout=60, context=cluster.logs)
            again = wait_for(lambda: claim_or_error(store, job_id, retry=True), "the claim made again", timeout=60,
                             context=cluster.logs)
            assert isinstance(again, Claim) and again.lease_id == TIMELINE_FLOOR, again
            with probe.engine.connect() as conn:
                assert conn.execute(text("SELECT inet_server_port()")).scalar() == new.pg_port
            with pytest.raises(LeaseLost):
                store.save_checkpoint(job_id, lost.lease_id, 1, lease_ttl=60, worker_id="worker-a")
            assert store.get(job_id).lease_id == again.lease_id
        finally:
            store.close()
            probe.close()


def claim_or_error(store: StateStore, job_id: str, *, retry: bool = False) -> object:
    """store.claim's result or the StoreError it raised (with `retry`, None on an outage: poll again)."""
    try:
        return store.claim(job_id, worker_id="worker-a", lease_ttl=60)
    except StoreError as exc:
        return None if retry and isinstance(exc, StoreUnavailable) else exc


def sync_waits(member: PatroniMember) -> int:
    """Sessions on `member` whose commit waits for a synchronous standby."""
    with psycopg.connect(member.dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchone()
    return int(row[0]) if row else 0
