"""Patroni (on etcd) promotes the synchronous standby after the leader's machine dies mid-run.

The same run as test_pg_failover_sync.py (300 ledger jobs, real `dramatiq` workers on the shared
RabbitMQ, `replication="require_sync"`, tests/failover/ledger_run.py), but the promotion is
Patroni's: two members in `synchronous_mode` on a private etcd (tests/private_patroni.py, free
ports, removed afterwards). After a third of the jobs the leader's machine dies: kill -9 of its
Patroni and of its postgres at once. Killing only the postmaster would not test a failover (the
leader's Patroni restarts postgres in place, it still holds the leader key); killing only Patroni
leaves a primary running that nobody manages. Nothing else is done: no promote, no restart of a
worker. Patroni waits for the leader key to expire (ttl), promotes the member that /sync names,
and the workers, whose URL names both members with target_session_attrs=read-write as
docs/postgresql-failover.md tells users to write it, find it on their own.

Asserted as in the synchronous test: every job SUCCEEDED, 0 committed claims or effect records
lost, 0 tokens issued twice, tokens strictly increasing per job, 0 stale effects accepted, each
effect applied once. Printed (run with -s): kill -> Patroni's promotion, kill -> first commit,
kill -> every job terminal.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from ledger_run import FAILOVER_AFTER, JOBS, assert_nothing_lost, ledger_run
from private_patroni import DCS_TIMEOUTS, patroni_cluster

from reliable.store.replication import check_replication

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]


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
