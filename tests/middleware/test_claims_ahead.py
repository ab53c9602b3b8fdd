"""Claims ahead (reliable.worker.ahead) with a real Dramatiq Worker (StubBroker), on SQLite and
PostgreSQL: which waiting messages are claimed ahead (the selection rule), a thread waiting for the
batch that claims its job, the hand-back of a claim not taken in time, a run whose claims ride
the batches of the claims before them (PostgreSQL's group commit), and a claim whose lease is lost
while it waits, never run."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dramatiq
import pytest

from reliable import queue_pauses
from reliable.compat.dramatiq_internals import waiting_messages
from reliable.dispatch import dispatch
from reliable.errors import LeaseLost
from reliable.operators import Operator
from reliable.states import Event, JobStatus
from reliable.store import Claim, StateStore
from reliable.worker import claim
from reliable.worker.ahead import Ahead, ClaimsAhead, select

from middleware_harness import Harness, make_harness
from support import wait_for

JOBS = 12


@pytest.fixture
def harness(store_url: str, policy_file: Path) -> Iterator[Harness]:
    made = make_harness(store_url, policy_file, threads=1, metrics=False, json_logs=False, claims_ahead=True)
    made.worker.queue_prefetch = 2 * JOBS
    yield made
    made.close()


def message(job_id: str) -> Any:
    return SimpleNamespace(message_id=job_id)


def test_select_keeps_the_accepted_waiting_messages_next_first_within_the_limit() -> None:
    waiting = [message(i) for i in ("own", "a", "held", "refused", "a", "b", "c", "d")]
    chosen = select(waiting, own_id="own", held={"held"}, limit=3,
                    digest=lambda m: None if m.message_id == "refused" else f"digest-{m.message_id}")
    assert [(m.message_id, d) for m, d in chosen] == [("a", "digest-a"), ("b", "digest-b"), ("c", "digest-c")]
    assert select(waiting, own_id="own", held=set(), limit=0, digest=lambda m: "x") == []


def test_only_straightforward_claims_are_taken_ahead(harness: Harness) -> None:
    broker, mw = harness.broker, harness.middleware

    @dramatiq.actor
    def durable(n: int) -> None: ...

    @dramatiq.actor(fast_path=True)
    def quick(n: int) -> None: ...

    @dramatiq.actor(limits={"concurrency": 1})
    def limited(n: int) -> None: ...

    @dramatiq.actor(queue_name="billing")
    def billing(n: int) -> None: ...

    @dramatiq.actor(reliable=False)
    def untracked(n: int) -> None: ...

    @dramatiq.actor(idempotent=False)
    def charge(n: int) -> None: ...

    @dramatiq.actor(idempotent=False, retry_on_crash=True)
    def resend(n: int) -> None: ...

    def of(actor: Any, **changes: Any) -> Any:
        sent = actor.message(1)
        return sent.copy(**changes)

    plain = of(durable)
    assert mw.durable.rule.digest(broker, plain) is not None  # computed as `delivery.digest_of` does
    assert mw.durable.rule.digest(broker, of(quick)) is None  # the fast path claims nothing before its run
    assert mw.durable.rule.digest(broker, of(limited)) is None  # a slot is taken by its own claim
    assert mw.durable.rule.digest(broker, of(durable, queue_name="elsewhere")) is None  # home_queue would read
    assert mw.durable.rule.digest(broker, of(durable, message_id="not a job id\n")) is None  # refused by its own
    assert mw.durable.rule.digest(broker, of(untracked)) is None
    assert mw.durable.rule.digest(broker, of(charge)) is None  # its worker's death would send it to review
    assert mw.durable.rule.digest(broker, of(resend)) is not None  # a crash is retried
    assert mw.durable.rule.digest(broker, of(billing)) is not None
    queue_pauses.pause(harness.store, "billing", reason="test", identity=Operator("oncall", "h", "test"))
    mw.paused_queues = type(mw.paused_queues)(lambda: harness.store, refresh=0.0)
    assert mw.durable.rule.digest(broker, of(billing)) is None  # a paused queue's delivery is put off


def test_a_thread_waits_for_the_batch_claiming_its_job() -> None:
    ahead = ClaimsAhead(clock=lambda: 0.0)
    ahead.watch(lambda: [message("job-1")], limit=4)
    picked = ahead.pick("own", lambda m: "digest")
    assert [m.message_id for m, _ in picked] == ["job-1"]
    taken: list[Any] = []
    waiter = threading.Thread(target=lambda: taken.append(ahead.take("job-1", "digest")))
    waiter.start()
    held = Ahead(claim=Claim(SimpleNamespace()), context=SimpleNamespace(job_id="job-1"),  # type: ignore[arg-type]
                 digest="digest", at=0.0)
    wait_for(lambda: waiter.is_alive(), "the thread to wait")
    ahead.settle(picked, {"job-1": held})
    waiter.join(10)
    assert taken == [held] and ahead.taken == 1


def test_a_job_whose_thread_claims_it_itself_is_not_claimed_ahead_meanwhile() -> None:
    """A thread that found nothing held for its delivery claims the job itself: another thread's
    batch must not claim it ahead meanwhile (that claim would win and refuse the delivery's)."""
    ahead = ClaimsAhead(clock=lambda: 0.0)
    ahead.watch(lambda: [message("job-1"), message("job-2")], limit=4)
    assert ahead.take("job-1", "digest") is None  # job-1's thread claims it itself
    assert [m.message_id for m, _ in ahead.pick("own", lambda m: "digest")] == ["job-2"]
    ahead.settle([], {})
    ahead.claimed_itself("job-1")
    assert [m.message_id for m, _ in ahead.pick("own-2", lambda m: "digest")] == ["job-1"]


def test_a_skipped_delivery_that_found_nothing_held_leaves_its_job_free_to_be_claimed_ahead() -> None:
    """A delivery reliable skips (refused, put off by a pause, its lease lost) looks for a claim held
    ahead to hand back, and claims nothing itself: its job must not stay marked as claimed by a
    thread, or it is never claimed ahead again in this process (and the mark is never removed)."""
    ahead = ClaimsAhead(clock=lambda: 0.0)
    real = dramatiq.Message(queue_name="default", actor_name="noop", args=(1,), kwargs={}, options={})
    ahead.watch(lambda: [real], limit=4)
    durable = claim.DurableClaim(SimpleNamespace(), ahead, SimpleNamespace(), SimpleNamespace(),  # type: ignore[arg-type]
                                 SimpleNamespace(), SimpleNamespace())
    assert durable.held_ahead(real) is None
    assert [m.message_id for m, _ in ahead.pick("own", lambda m: "digest")] == [real.message_id]


def test_a_batch_that_ends_wakes_only_the_threads_waiting_for_its_jobs() -> None:
    ahead = ClaimsAhead(clock=lambda: 0.0)
    waiting = [message("job-1")]
    ahead.watch(lambda: waiting, limit=4)
    first = ahead.pick("own-1", lambda m: "digest")
    waiting[:] = [message("job-2")]
    second = ahead.pick("own-2", lambda m: "digest")
    taken: dict[str, Any] = {}
    waiters = {job: threading.Thread(target=lambda job=job: taken.setdefault(job, ahead.take(job, "digest")))
               for job in ("job-1", "job-2")}
    for waiter in waiters.values():
        waiter.start()
    wait_for(lambda: ahead.waits == 2, "both threads waiting")
    ahead.settle(first, {})  # job-1's claim ahead lost: its thread claims for itself
    waiters["job-1"].join(10)
    assert taken == {"job-1": None} and waiters["job-2"].is_alive()  # job-2's batch is still in flight
    ahead.settle(second, {})
    waiters["job-2"].join(10)
    assert taken == {"job-1": None, "job-2": None}


def test_a_claim_for_another_digest_is_not_taken_and_an_old_one_is_handed_over() -> None:
    now = [0.0]
    ahead = ClaimsAhead(keep_for=10.0, clock=lambda: now[0])
    ahead.watch(lambda: [message("job-1")], limit=4)
    picked = ahead.pick("own", lambda m: "digest")
    held = Ahead(claim=Claim(SimpleNamespace()), context=SimpleNamespace(job_id="job-1"),  # type: ignore[arg-type]
                 digest="digest", at=0.0)
    ahead.settle(picked, {"job-1": held})
    assert ahead.take("job-1", "forged") is None  # a forged copy never runs under the genuine's claim
    assert ahead.pick("own", lambda m: "digest") == []  # held already
    assert ahead.overdue() == []
    now[0] = 10.5
    assert ahead.overdue() == [held]
    # While it is handed back, the job's delivery waits (its own claim would find it RUNNING).
    taken: list[Any] = []
    waiter = threading.Thread(target=lambda: taken.append(ahead.take("job-1", "digest")))
    waiter.start()
    wait_for(lambda: waiter.is_alive(), "the thread to wait")
    ahead.returned("job-1", written=True)
    waiter.join(10)
    assert taken == [None] and ahead.handed_back == 1  # then it claims the PENDING job itself


def test_claims_ahead_ride_the_batches_and_every_job_runs_once(harness: Harness) -> None:
    setup, store = harness, harness.store

    @dramatiq.actor
    def step(n: int) -> None:
        if n == 0:  # the others wait in the work queue behind the one thread
            wait_for(lambda: len(waiting_messages(setup.worker)) == JOBS - 1, "every job prefetched")

    messages = [step.send(n) for n in range(JOBS)]
    setup.run()
    ahead = setup.middleware.ahead
    for sent in messages:
        job = store.get(sent.message_id)
        assert job.status is JobStatus.SUCCEEDED and job.attempt == 1
        assert [a.outcome for a in store.attempts(sent.message_id)] == ["succeed"]
    if store.group_commit_stats() is None:  # SQLite: nothing to ride, nothing claimed ahead
        assert not ahead.enabled and ahead.claimed == 0
        return
    assert ahead.enabled and ahead.claimed >= (JOBS - 2) // 2  # every other claim at least rode a batch
    assert ahead.taken == ahead.claimed and ahead.handed_back == 0


def test_a_hand_back_that_fails_to_release_still_answers_the_waiting_thread() -> None:
    answered: list[tuple[str, bool]] = []

    def release_fails(context: Any) -> None:
        raise RuntimeError("heartbeat gone")

    ahead: Any = SimpleNamespace(returned=lambda job_id, written: answered.append((job_id, written)))
    runtime: Any = SimpleNamespace(worker_id="w", store=None)
    leases: Any = SimpleNamespace(release=release_fails)
    unused: Any = None
    durable = claim.DurableClaim(runtime, ahead, rule=unused, leases=leases, registration=unused, groups=unused)
    held: Any = SimpleNamespace(context=SimpleNamespace(job_id="job-1", fencing_token=3))
    durable.hand_back([held], "shutdown")
    assert answered == [("job-1", False)]


@pytest.fixture
def pg_harness(pg_store: StateStore, pg_database: str, policy_file: Path) -> Iterator[Harness]:
    """One worker thread claiming ahead, on PostgreSQL (claims ahead ride group commit's batches)."""
    made = make_harness(pg_database, policy_file, threads=1, metrics=False, json_logs=False, claims_ahead=True)
    made.worker.queue_prefetch = 8
    yield made
    made.close()


@pytest.mark.parametrize("lost", ["expired", "stolen"])
def test_a_claim_ahead_whose_lease_is_lost_while_it_waits_never_runs(pg_harness: Harness, lost: str) -> None:
    """Job 2 is claimed ahead with job 1's claim, then its lease is lost while job 1 runs: expired
    by recovery (the job republished) or taken by a newer claim (another worker's). Its delivery
    must not run the body under the lost lease: the job runs once, by its new holder."""
    setup, store, mw = pg_harness, pg_harness.store, pg_harness.middleware
    runs: Counter[int] = Counter()
    first_ends, second_ends = threading.Event(), threading.Event()

    @dramatiq.actor
    def step(n: int) -> None:
        runs[n] += 1
        if n < 2:
            assert (first_ends if n == 0 else second_ends).wait(30)

    first = step.send(0)  # claimed alone: nothing waits behind it yet
    setup.worker.start()
    wait_for(lambda: runs[0] == 1, "job 0 running")
    job_id = [step.send(1), step.send(2)][1].message_id
    wait_for(lambda: len(waiting_messages(setup.worker)) == 2, "jobs 1 and 2 waiting")
    first_ends.set()
    wait_for(lambda: runs[1] == 1, "job 1 running")  # its claim took job 2's ahead (the one thread's limit)
    heartbeat = mw.runtime.heartbeat
    assert heartbeat is not None and mw.ahead.claimed == 1
    [waiting] = [c for c in heartbeat.held() if c.job_id == job_id]

    held = store.get(job_id)
    expired = store.transition(job_id, Event.LEASE_EXPIRED, expected_version=held.version, lease_id=held.lease_id,
                               dispatch=lost == "expired")  # what recovery does to an expired lease
    if lost == "expired":
        dispatch(setup.broker, expired)  # the new holder: this worker's claim of the republished message
    else:
        stolen = store.claim(job_id, worker_id="another-worker", lease_ttl=30)
    heartbeat.beat_once()  # the renewal finds the lease gone
    second_ends.set()
    setup.join()

    assert mw.ahead.taken == 1  # the lost claim's delivery reached it, and skipped it
    job = store.get(job_id)
    if lost == "expired":
        assert runs[2] == 1 and job.status is JobStatus.SUCCEEDED and job.attempt == 2
        assert [a.outcome for a in store.attempts(job_id)] == ["lease_expired", "succeed"]
    else:
        assert runs[2] == 0 and job.status is JobStatus.RUNNING and job.worker_id == "another-worker"
        with pytest.raises(LeaseLost):  # fencing still refuses the lost lease's late commit
            store.finish(job_id, waiting.fencing_token, Event.SUCCEED, worker_id=waiting.worker_id)
        store.finish(job_id, stolen.lease_id, Event.SUCCEED, worker_id="another-worker")
        assert store.get(job_id).status is JobStatus.SUCCEEDED
    assert waiting.lease_lost and "stale_commit_rejected" in setup.events(job_id)  # the renewal that lost
    assert store.get(first.message_id).status is JobStatus.SUCCEEDED
