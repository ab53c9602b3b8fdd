"""A delivery must match its job, in the store: the digest kept at registration, compared by the
claim (single and group-committed), the refusal read and the fast path's look; a re-send under an
existing id with other arguments is a JobIdConflict, an identical one a de-duplication."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import dramatiq
import pytest

from reliable.delivery_digest import delivery_digest, message_digest
from reliable.dispatch import message_for
from reliable.errors import ClaimRefused, JobIdConflict
from reliable.options import OWN_QUEUE
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore
from reliable.store.schema import jobs
from reliable.worker.delivery import delivered_digest

from support import Clock


def message(actor: str = "export", *args: Any, **options: Any) -> dict[str, Any]:
    return {"queue_name": "default", "actor_name": actor, "args": list(args or ("acct-1", 3)),
            "kwargs": {"force": True}, "options": options, "message_id": "job-1", "message_timestamp": 1}


def new_job(job_id: str = "job-1", data: dict[str, Any] | None = None) -> NewJob:
    data = data or message()
    return NewJob(job_id, queue="default", actor=str(data["actor_name"]), message=data)


def digest_of(data: dict[str, Any]) -> str:
    return delivery_digest(data["actor_name"], data["args"], data["kwargs"], data["options"])


GENUINE = digest_of(message())
FORGED = digest_of(message("export", "acct-2", 3))


def untouched(store: StateStore, job_id: str = "job-1") -> None:
    job = store.get(job_id)
    assert (job.status, job.version, job.lease_id, job.attempt, job.worker_id) == (JobStatus.PENDING, 1, 0, 0, None)
    assert [e.event for e in store.events(job_id)] == ["enqueued"]


def test_registration_stores_the_digest_of_the_stored_message(store: StateStore) -> None:
    store.register(new_job())
    job = store.get("job-1")
    assert job.delivery_digest == GENUINE == message_digest(job.message)
    assert len(GENUINE) == 32 and GENUINE != FORGED


def test_a_claim_by_another_delivery_is_refused_and_leaves_the_job_untouched(store: StateStore) -> None:
    store.register(new_job())
    with pytest.raises(ClaimRefused) as refused:
        store.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=FORGED)
    assert refused.value.reason == "delivery_mismatch" and refused.value.status == "PENDING"
    untouched(store)
    claim = store.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=GENUINE)
    assert claim.job.status is JobStatus.RUNNING and claim.lease_id == 1


def test_a_claim_without_a_digest_is_not_checked(store: StateStore) -> None:
    """Recovery, operators and the limits' key failure claim with no delivery in hand."""
    store.register(new_job())
    assert store.claim("job-1", worker_id="w", lease_ttl=60).job.status is JobStatus.RUNNING


def test_a_mismatch_is_reported_whatever_the_jobs_state(store: StateStore) -> None:
    store.register(new_job())
    claim = store.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=GENUINE)
    for held_or_done in ("RUNNING", "SUCCEEDED"):
        with pytest.raises(ClaimRefused) as refused:
            store.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=FORGED)
        assert (refused.value.reason, refused.value.status) == ("delivery_mismatch", held_or_done)
        with pytest.raises(ClaimRefused) as genuine:
            store.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=GENUINE)
        assert genuine.value.reason == ("held" if held_or_done == "RUNNING" else "finished")
        if held_or_done == "RUNNING":
            store.finish("job-1", claim.lease_id, Event.SUCCEED, worker_id="w")


def test_the_fast_paths_look_compares_the_digest(store: StateStore) -> None:
    store.register(new_job())
    assert store.job_status("job-1", delivery_digest=GENUINE) is JobStatus.PENDING
    assert store.job_status("job-1") is JobStatus.PENDING
    with pytest.raises(ClaimRefused) as refused:
        store.job_status("job-1", delivery_digest=FORGED)
    assert refused.value.reason == "delivery_mismatch"
    assert store.job_status("nope", delivery_digest=FORGED) is None
    untouched(store)


def test_the_limits_look_compares_the_digest(store: StateStore) -> None:
    store.register(new_job())
    assert store.claim_refusal("job-1", delivery_digest=GENUINE) is None
    refusal = store.claim_refusal("job-1", delivery_digest=FORGED)
    assert refusal is not None and refusal.reason == "delivery_mismatch"
    assert store.claim_refusal("nope", delivery_digest=FORGED) is None


def test_a_job_registered_before_digests_is_never_checked(store: StateStore) -> None:
    store.register(new_job())
    with store.engine.begin() as conn:  # as migration 0013 leaves a job registered before it
        conn.execute(jobs.update().where(jobs.c.job_id == "job-1").values(delivery_digest=None))
    assert store.get("job-1").delivery_digest is None
    assert store.job_status("job-1", delivery_digest=FORGED) is JobStatus.PENDING
    assert store.claim_refusal("job-1", delivery_digest=FORGED) is None
    assert store.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=FORGED).lease_id == 1
    assert store.register(new_job("job-1", message("other"))) is False  # nothing to compare a re-send with


def test_an_identical_resend_is_deduplicated(store: StateStore) -> None:
    assert store.register(new_job()) is True
    # What changes from one send of the same message to the next is not part of the digest.
    noise = message(eta=123, traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01", trace_id="a" * 32,
                    reliable_registered=True, retries=2, parent_job_id="p", workflow_id="w")
    noise["message_timestamp"] = 99
    assert store.register(new_job("job-1", noise)) is False
    assert store.register_many([new_job(), new_job("job-2")]) == 1


@pytest.mark.parametrize(("resent", "differs"), [
    (message("import"), "actor"),
    (message("export", "acct-2", 3), "arguments or options"),
    (message(on_success="notify"), "arguments or options"),
])
def test_a_resend_with_another_digest_is_a_conflict(store: StateStore, resent: dict[str, Any],
                                                   differs: str) -> None:
    store.register(new_job())
    with pytest.raises(JobIdConflict) as conflict:
        store.register(new_job("job-1", resent))
    assert conflict.value.job_id == "job-1" and conflict.value.differs == differs
    assert "job-1" in str(conflict.value) and "acct" not in str(conflict.value)  # never an argument's value
    # A batch holding one conflict registers nothing.
    with pytest.raises(JobIdConflict):
        store.register_many([new_job("job-2"), new_job("job-1", resent)])
    assert store.find("job-2") is None
    untouched(store)


def test_one_batch_reusing_an_id_with_other_arguments_is_a_conflict(store: StateStore) -> None:
    with pytest.raises(JobIdConflict, match="job-7"):
        store.register_many([new_job("job-7"), new_job("job-7", message("export", "other"))])
    assert store.find("job-7") is None


def test_the_refusal_of_a_retry_that_is_not_due_names_the_mismatch_first(store: StateStore) -> None:
    clock = Clock()
    timed = StateStore(engine=store.engine, clock=clock)
    timed.register(new_job())
    claim = timed.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=GENUINE)
    timed.finish("job-1", claim.lease_id, Event.RETRY, worker_id="w", retry_delay=30)
    with pytest.raises(ClaimRefused) as refused:
        timed.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=FORGED)
    assert refused.value.reason == "delivery_mismatch"
    clock.now += 31
    with pytest.raises(ClaimRefused):
        timed.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=FORGED)
    assert timed.claim("job-1", worker_id="w", lease_ttl=60, delivery_digest=GENUINE).job.attempt == 2


def test_group_commit_checks_each_claims_digest(pg_store: StateStore) -> None:
    batched = StateStore(engine=pg_store.engine, group_commit=True)
    ids = [f"job-{i}" for i in range(16)]
    batched.register_many([new_job(job_id) for job_id in ids])
    outcomes: dict[str, str] = {}
    start = threading.Barrier(len(ids))

    def claim(job_id: str, digest: str) -> None:
        start.wait()
        try:
            batched.claim(job_id, worker_id="w", lease_ttl=60, delivery_digest=digest)
            outcomes[job_id] = "claimed"
        except ClaimRefused as refused:
            outcomes[job_id] = refused.reason

    threads = [threading.Thread(target=claim, args=(job_id, FORGED if i % 2 else GENUINE))
               for i, job_id in enumerate(ids)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes == {job_id: "delivery_mismatch" if i % 2 else "claimed" for i, job_id in enumerate(ids)}
    assert [batched.get(job_id).status for job_id in ids[1::2]] == [JobStatus.PENDING] * 8
    batches = batched.group_commit_stats()
    assert batches is not None and batches[1] >= len(ids)


def test_every_copy_the_worker_publishes_matches(store: StateStore) -> None:
    """A retry re-published from the store (dispatch.message_for), on a routed lane, delayed (eta),
    with Dramatiq's per-delivery options: the same digest as the job's."""
    store.register(new_job(data=message(on_success="notify", reliable_registered=True,
                                        reliable_contract={"idempotent": False})))
    job = store.get("job-1")
    retried = dataclasses.replace(job, queue="slow-lane", retry_count=2)
    copy = message_for(retried, traceback="Traceback ...")
    assert copy.options[OWN_QUEUE] == "default" and copy.options["retries"] == 2
    delayed = copy.copy(queue_name="slow-lane.DQ", options={"eta": 1, "reliable_deferrals": 3})
    for each in (copy, delayed):
        assert delivered_digest(dramatiq.Message.decode(each.encode())) == job.delivery_digest
