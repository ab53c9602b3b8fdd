"""A PostgreSQL primary with a synchronous standby, killed (-9) mid-run; the standby promoted.

Both servers are private clusters this test starts on free ports (the shared 5432 is never
touched); the workers are real `dramatiq` processes on the shared RabbitMQ, on a queue of their own,
and they and their recovery loops reach the store through ONE two-host URL with
target_session_attrs=read-write. Each job writes to a ledger file (tests/failover/apps/ledger_app.py)
the claim it saw committed and the effect it applied. After the failover every job must end
SUCCEEDED and the promoted standby must hold every claim and effect record a worker saw committed,
with fencing tokens strictly increasing per job and none issued twice (tests/failover/ledger_run.py).
The recovery times are printed: promote -> first commit on the new primary, promote -> every job
terminal. test_pg_failover_patroni.py is the same run with Patroni deciding the promotion.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ledger_run import FAILOVER_AFTER, JOBS, assert_nothing_lost, ledger_run
from private_postgres import replicated_postgres

from reliable.store.replication import check_replication

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_promoting_a_synchronous_standby_mid_run_loses_no_committed_claim(rabbitmq_url: str, queue_name: str,
                                                                         tmp_path: Path) -> None:
    with replicated_postgres(synchronous=True, max_connections=60) as pair:
        url = pair.create_database("store")
        with ledger_run(url, rabbitmq_url, queue_name, tmp_path) as run:
            report = check_replication(run.observer.engine, "require_sync")  # the boot check passes: nothing to refuse
            assert report is not None and report.problems == [] and report.standbys == (("standby1", "sync"),)
            run.wait_terminal(FAILOVER_AFTER, timeout=90)
            running = run.running()
            pair.primary.kill()
            killed_at = time.time()
            pair.promote()
            promoted_at = time.time()
            first_commit = run.first_commit_after(promoted_at)
            run.wait_terminal(JOBS)
            all_terminal_at = time.time()
        audit = run.audit(before=killed_at, after=promoted_at)

    print(f"\nsynchronous standby promoted after kill -9 of the primary: {JOBS} jobs, {running} running at the kill; "
          f"promote took {promoted_at - killed_at:.2f}s; promote -> first commit {first_commit - promoted_at:.2f}s, "
          f"-> all terminal {all_terminal_at - promoted_at:.2f}s; {audit.summary()}")
    assert_nothing_lost(audit)
