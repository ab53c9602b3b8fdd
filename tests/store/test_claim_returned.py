"""A claim taken ahead and handed back unused (`claim_returned`), on SQLite and PostgreSQL: RUNNING ->
PENDING fenced by its lease, no attempt spent (the attempt counter and the derived attempts read as
before the claim), its event in the history; and the claim batched with claims ahead."""

from __future__ import annotations

import pytest

from reliable.control import Control
from reliable.delivery_digest import delivery_digest
from reliable.errors import ClaimRefused
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore

MESSAGE = {"queue_name": "default", "actor_name": "work", "args": [1], "kwargs": {}, "options": {}}
DIGEST = delivery_digest("work", [1], {}, {})  # every job here is registered from the same body


def register(store: StateStore, *job_ids: str) -> None:
    for job_id in job_ids:
        store.register(NewJob(job_id, queue="default", actor="work", message={**MESSAGE, "message_id": job_id}))


def test_a_returned_claim_spends_no_attempt(store: StateStore) -> None:
    register(store, "job-1")
    before = store.get("job-1")
    claim = store.claim("job-1", worker_id="w1", lease_ttl=30, delivery_digest=DIGEST)
    assert claim.job.attempt == before.attempt + 1

    job = store.return_claim("job-1", claim.lease_id, worker_id="w1")

    assert job is not None and job.status is JobStatus.PENDING
    assert job.attempt == before.attempt  # as before the claim
    assert job.lease_id == claim.lease_id  # a token is never reissued
    assert job.lease_expires_at is None and job.dispatched_at == before.dispatched_at
    assert store.attempts("job-1") == []  # a returned claim is no attempt
    events = store.events("job-1")
    assert [e.event for e in events][-2:] == ["claim", "claim_returned"]
    assert (events[-1].from_status, events[-1].to_status, events[-1].worker_id) == ("RUNNING", "PENDING", "w1")
    # The next claim is the job's first attempt.
    again = store.claim("job-1", worker_id="w2", lease_ttl=30, delivery_digest=DIGEST)
    assert again.job.attempt == before.attempt + 1 and again.lease_id > claim.lease_id
    store.finish("job-1", again.lease_id, Event.SUCCEED, worker_id="w2")
    attempts = store.attempts("job-1")
    assert [(a.attempt, a.worker_id, a.outcome) for a in attempts] == [(1, "w2", "succeed")]


def test_a_hand_back_is_fenced_by_the_lease(store: StateStore) -> None:
    register(store, "job-1")
    first = store.claim("job-1", worker_id="w1", lease_ttl=30)
    assert store.return_claim("job-1", first.lease_id + 1, worker_id="w1") is None  # not our lease
    assert store.get("job-1").status is JobStatus.RUNNING
    store.return_claim("job-1", first.lease_id, worker_id="w1")
    second = store.claim("job-1", worker_id="w2", lease_ttl=30)
    assert store.return_claim("job-1", first.lease_id, worker_id="w1") is None  # a stale lease
    assert store.get("job-1").lease_id == second.lease_id and store.get("job-1").status is JobStatus.RUNNING


@pytest.mark.parametrize("command", ["pause", "stop"])
def test_a_hand_back_never_drops_a_request(store: StateStore, command: str) -> None:
    register(store, "job-1")
    claim = store.claim("job-1", worker_id="w1", lease_ttl=30)
    getattr(Control(store), command)("job-1", reason="maintenance")
    # Refused: recovery ends the lease when it expires and honours the request (as for any lease).
    assert store.return_claim("job-1", claim.lease_id, worker_id="w1") is None
    job = store.get("job-1")
    assert job.status is (JobStatus.RUNNING if command == "pause" else JobStatus.STOPPING)
    assert job.pause_requested or job.stop_requested


def test_claims_ahead_ride_the_claim(store: StateStore) -> None:
    register(store, "own", "ahead-1", "ahead-2", "forged", "taken")
    store.claim("taken", worker_id="other", lease_ttl=30)
    own, won = store.claim_with_ahead(
        "own", worker_id="w1", lease_ttl=30, attempt_id="a-own", delivery_digest=DIGEST,
        ahead=[("ahead-1", DIGEST), ("ahead-2", None), ("forged", "f" * 64), ("taken", DIGEST), ("unknown", None)])
    assert not isinstance(own, ClaimRefused) and own.attempt_id == "a-own"
    assert sorted(won) == ["ahead-1", "ahead-2"]  # refused ones are simply not claimed ahead
    assert all(c.job.status is JobStatus.RUNNING and c.job.worker_id == "w1" for c in won.values())
    assert store.get("forged").status is JobStatus.PENDING  # a forged delivery is refused as by `claim`
    assert store.get("taken").worker_id == "other"
    # The delivery's own refusal is returned, never raised past the claims ahead that won.
    refused, won_too = store.claim_with_ahead("taken", worker_id="w1", lease_ttl=30, attempt_id="a-2",
                                             delivery_digest=DIGEST, ahead=[("forged", DIGEST)])
    assert isinstance(refused, ClaimRefused) and list(won_too) == ["forged"]


def test_claims_ahead_share_the_claims_group_commit_batch(pg_store: StateStore, pg_database: str) -> None:
    register(pg_store, "own", "ahead-1", "ahead-2")
    batched = StateStore(pg_database, group_commit=True)
    try:
        own, won = batched.claim_with_ahead("own", worker_id="w1", lease_ttl=30, attempt_id="a-own",
                                            delivery_digest=DIGEST, ahead=[("ahead-1", DIGEST), ("ahead-2", DIGEST)])
        assert not isinstance(own, ClaimRefused) and sorted(won) == ["ahead-1", "ahead-2"]
        assert batched.group_commit_stats() == (1, 3)  # one statement, one commit for the three claims
        assert batched.return_claim("ahead-1", won["ahead-1"].lease_id, worker_id="w1") is not None
    finally:
        batched.close()
    assert pg_store.get("ahead-1").status is JobStatus.PENDING and pg_store.get("ahead-1").attempt == 0
