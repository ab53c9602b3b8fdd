"""An ASYNCHRONOUS standby promoted after the primary died with a claim it never sent.

The standby is stopped before the claim, so the claim (and a checkpoint of the same lease) exist on
the old primary only; the primary is killed (-9), the standby started and promoted. On the new
primary the job is PENDING again with the lease before the lost one, and another worker claims it.
Counting lease_id + 1 would hand that worker the lost claim's token, and the old holder's writes,
fenced by that same number, would commit: the stale commit of docs/postgresql-failover.md. The
promoted standby runs on a new WAL timeline, so its claim's token is above the timeline's floor
and every write of the old holder is refused. The boot check flags the asynchronous standby before
any of this happens (and refuses it with replication="require_sync").
"""

from __future__ import annotations

import uuid

import pytest
from dramatiq.brokers.stub import StubBroker
from private_postgres import replicated_postgres

from reliable.errors import ActorContractError, ConfigError, LeaseLost, StoreUnavailable
from reliable.middleware import ReliableMiddleware
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore
from reliable.store.replication import check_replication

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMELINE_FLOOR = 1 << 40  # the first token on timeline 2: (2 - 1) << 40


@pytest.mark.timeout(180)
def test_a_claim_lost_in_an_asynchronous_failover_cannot_commit_on_the_promoted_standby() -> None:
    with replicated_postgres(synchronous=False) as pair:
        url = pair.create_database("store")
        store = StateStore(url, max_connections=2)
        try:
            store.upgrade()
            report = check_replication(store.engine, "warn")
            assert report is not None and report.standbys == (("standby1", "async"),)
            assert any("asynchronous" in problem for problem in report.problems), report.problems
            with pytest.raises(ConfigError, match="can lose commits in a failover"):
                check_replication(store.engine, "require_sync")
            refusing = ReliableMiddleware(url, replication="require_sync", recovery=False, metrics=False,
                                          json_logs=False, max_connections=1)
            with pytest.raises(ActorContractError, match="synchronous_standby_names is empty"):
                refusing.before_worker_boot(StubBroker(), None)
            refusing.store.close()

            job_id = f"lost-{uuid.uuid4().hex[:8]}"
            store.register(NewJob(job_id, "payments", "pay", {"args": [], "kwargs": {}}))
            pair.wait_replayed()
            pair.standby.stop()  # from here on, the primary's commits reach no standby
            holder = store.claim(job_id, worker_id="worker-a", lease_ttl=60)
            store.save_checkpoint(job_id, holder.lease_id, 1, lease_ttl=60, worker_id="worker-a")
            pair.primary.kill()
            pair.standby.start()
            pair.promote()

            after = store.get(job_id)  # on the promoted standby: the claim never happened
            assert (after.status, after.lease_id) == (JobStatus.PENDING, holder.lease_id - 1)
            successor = store.claim(job_id, worker_id="worker-b", lease_ttl=60)
            assert successor.lease_id > holder.lease_id
            assert successor.lease_id == TIMELINE_FLOOR

            with pytest.raises(LeaseLost):
                store.save_checkpoint(job_id, holder.lease_id, 2, lease_ttl=60, worker_id="worker-a")
            with pytest.raises(LeaseLost):
                store.record_effect(job_id, holder.lease_id, "pay", attempt_id=holder.attempt_id, worker_id="worker-a")
            with pytest.raises(LeaseLost):
                store.finish(job_id, holder.lease_id, Event.SUCCEED, worker_id="worker-a")
            assert store.renew("worker-a", [(job_id, holder.lease_id)], 60) == {}

            done = store.finish(job_id, successor.lease_id, Event.SUCCEED, worker_id="worker-b")
            assert (done.status, done.checkpoint) == (JobStatus.SUCCEEDED, None)
            rejected = [e for e in store.events(job_id) if e.event == "stale_commit_rejected"]
            assert [e.lease_id for e in rejected] == [holder.lease_id] * 3
            assert store.effects(job_id) == []
        finally:
            store.close()


@pytest.mark.timeout(180)
def test_an_old_primary_back_after_a_failover_is_refused_by_a_process_that_used_the_new_one() -> None:
    with replicated_postgres(synchronous=True) as pair:
        url = pair.create_database("store")
        store = StateStore(url, max_connections=1)
        try:
            store.upgrade()
            job_id = f"split-{uuid.uuid4().hex[:8]}"
            store.register(NewJob(job_id, "payments", "pay", {"args": [], "kwargs": {}}))
            pair.primary.kill()
            pair.promote()
            claim = store.claim(job_id, worker_id="worker-a", lease_ttl=60)  # on the new primary, timeline 2
            assert claim.lease_id == TIMELINE_FLOOR
            pair.primary.start()  # the old primary is back, writable, on timeline 1, first in the URL
            store.engine.dispose()  # the next statement opens a new connection: libpq picks the old primary
            with pytest.raises(StoreUnavailable, match="WAL timeline 1, older than timeline 2"):
                store.get(job_id)
            pair.primary.stop("immediate")
            assert store.get(job_id).lease_id == claim.lease_id  # the new primary again
        finally:
            store.close()
