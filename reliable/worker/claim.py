"""The claim before a run, and the fast path's claim after it: the two halves of a delivery.

`before_run` and `after_run` are what Dramatiq's before/after_process_message hooks hand over.
Before the actor runs (`claim`): a delivery of a paused queue is put off (`paused`), the
delivery is admitted by the actor's limits, then the job is
claimed, a compare-and-set. A refused claim skips the delivery (`refuse`: the one place a refusal
is handled; the store already holds the truth). A message unknown to the store (published by a
producer without reliable) is registered first; one that cannot become a job (reliable.inputs) is
dead-lettered as a delivery that is not a job's message (`delivery.refuse`). A won claim is held
by the heartbeat from then on.

The fast path (an actor with `fast_path=True` whose success nothing has to follow) writes nothing
before the run: it only looks that the job is PENDING (one read for the fast-path messages waiting
in the process, each answer at most a second old: reliable.worker.waiting). After the run `fast_done` commits a success
in one compare-and-set, or claims the job (`claim_after_run`) so that the durable path decides a
failure as for any attempt. `skipped` gives back a job another middleware skipped after our claim.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import dramatiq
from dramatiq.middleware import SkipMessage

from ..dispatch import message_for
from ..errors import ClaimRefused, JobIdConflict, MessageRefused, PolicyError
from ..inputs import clip
from ..limits.gate import fast_path_allowed
from ..states import JobStatus
from ..store import Claim, Job
from ..tracecontext import span_id_for
from . import after_commit, completion, delivery, groups, outcome, paused, spans
from .ahead import Ahead
from .context import FastRun, JobContext, _fast_run
from .continuations import follows_success
from .registration import REGISTERED
from .skips import Skip, end_unclaimed, is_its_message
from .waiting import Row

if TYPE_CHECKING:
    from .state import Worker

__all__ = [
    "after_run",
    "ahead_digest",
    "before_run",
    "claim",
    "claim_after_run",
    "fast_done",
    "hand_back",
    "home_queue",
    "new_attempt_id",
    "refuse",
    "release_lease",
    "skipped",
    "take",
    "take_fast",
]

logger = logging.getLogger("reliable.middleware")


class _AttemptIds:
    """Attempt ids: this process's 64 random bits, then a counter (32 hex digits in all, unique
    across processes and restarts without a random draw per id). `os.urandom` per id released
    the GIL for its system call, and under 32 threads each release was a thread switch; a seeded
    `random` is not used because an application may seed the shared generator (ids would repeat)."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: tuple[str, Iterator[int]] | None = None
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._state = None  # a forked child draws its own prefix

    def __call__(self) -> str:
        state = self._state
        if state is None:  # two threads racing here each use their own prefix and counter: still unique
            state = self._state = (os.urandom(8).hex(), itertools.count())
        return f"{state[0]}{next(state[1]):016x}"


#: A new attempt id (see `_AttemptIds`).
new_attempt_id = _AttemptIds()


def before_run(mw: Worker, broker: dramatiq.Broker, message: Any) -> None:
    """Claim the delivered job of a tracked actor; refuse to run it (skip + ack) unless the claim wins."""
    try:
        claim(mw, broker, message)
    except SkipMessage:
        mw.admission.release()
        mw.delivery.own_skip = message.message_id  # not final: see skipped()
        raise
    except BaseException as exc:
        mw.admission.release()
        mw.delivery.own_skip = message.message_id
        if isinstance(exc, PolicyError):
            _unrunnable(mw, message, exc)
        # Dramatiq swallows any other exception of a before-hook and would run the actor
        # without a claim: never let that happen. The job row is the truth; a PENDING job is
        # re-dispatched by the sweeper.
        logger.exception("claim of message %s failed; skipping it", clip(message.message_id))
        message.options["store_results"] = False  # never ran: Results must not store None for it
        raise SkipMessage("claim failed") from None


def _unrunnable(mw: Worker, message: Any, exc: PolicyError) -> None:
    """A claim that fails the same way at every try (the policy refuses what the message asks for):
    its job ends DEAD, or a message that is not its job's is refused; dead-lettered either way
    (`delivery.end_unrunnable`, `delivery.refuse`: raises SkipMessage). Never a skip the sweeper
    would repeat."""
    try:
        delivery.end_unrunnable(mw.store, message, str(exc), worker_id=mw.worker_id)
        delivery.refuse(mw.store, message, None, worker_id=mw.worker_id, problem=str(exc))
    except SkipMessage:
        message.options["store_results"] = False
        raise
    except Exception:  # the store: the claim failed as any other, the sweeper publishes it again
        logger.warning("job %s: could not end the job of a message that cannot run", clip(message.message_id),
                       exc_info=True)


def after_run(mw: Worker, broker: dramatiq.Broker, message: Any, result: Any,
              exception: BaseException | None) -> None:
    """A delivery ran: commit its attempt's outcome, fenced by its lease; then end the attempt's span."""
    try:
        if take_fast(mw, message):
            fast_done(mw, broker, message, exception)
        elif (context := take(mw, message)) is not None:
            handed_over = False
            try:
                context.leave()
                completion.note_unrecorded_effects(mw, context)
                handed_over = completion.complete(mw, broker, message, context, result, exception,
                                                  release=functools.partial(release_lease, mw, context))
            finally:
                # Only now: the lease is renewed while the final write may still be retried (a slow
                # or blipping store must not let recovery reclaim a job that already finished). A
                # success handed over to the group commit releases it once committed.
                if not handed_over:
                    release_lease(mw, context)
    finally:
        mw.delivery.limits = None  # its slot frees itself: the attempt ended (reliable.limits)
        spans.end(mw.tracing, exception)


def claim(mw: Worker, broker: dramatiq.Broker, message: Any) -> None:
    """Claim the delivered job, or raise SkipMessage (see the module doc)."""
    fields = delivery.fields(message)  # its fields, read without the proxy; `message` is acted on
    job_id = fields.message_id
    digest = delivery.digest_of(mw.store, message, worker_id=mw.worker_id)  # a delivery must match its job
    delivered, consumed = delivery.delivered_queue(message)
    queue = _home_queue(mw, message, delivered, consumed)  # the actor's or the store's, never the body's
    contract = mw.plans.contract(fields.actor_name, queue, fields.options)
    paused.defer_if_paused(mw, broker, message, queue)  # before the limits: a paused queue takes no slot
    refusal = mw.admission.admit(broker, message, digest)
    if refusal is not None:
        refuse(mw, broker, message, refusal)
    if contract.fast_path and _fast_eligible(mw, message, queue == delivered):
        try:
            status = _look(mw, job_id, digest)
        except ClaimRefused as mismatch:
            refuse(mw, broker, message, mismatch)
        if status is JobStatus.PENDING:
            mw.delivery.fast = job_id
            # The run's attempt id is chosen now, so the messages it sends name its span.
            attempt_id = mw.delivery.fast_attempt = new_attempt_id()
            if mw.tracing is None:  # no span to start: the trace is worked out only for a message sent
                _fast_run.set(FastRun(job_id, lambda: spans.message_trace(message).child(span_id_for(attempt_id))))
                return
            trace = spans.message_trace(message)
            span_id = spans.start(mw.tracing, message, attempt=None, attempt_id=attempt_id, parent=trace)
            _fast_run.set(FastRun(job_id, lambda: trace.child(span_id or span_id_for(attempt_id))))
            return
        # Anything else (a retry, a paused or finished job, an unknown message): the durable
        # claim decides, as for any actor.
    held = mw.ahead.take(job_id, digest)
    if held is not None:  # claimed ahead by this process's batch: the claim is won already
        mw.admission.bind(broker, message, held.claim)
        held.context.adopt(spans.start(mw.tracing, message, attempt=held.claim.job.attempt,
                                       attempt_id=held.claim.attempt_id))
        mw.delivery.context = held.context
        held.context.enter()
        return
    try:
        won = _claim_own(mw, broker, message, digest)
    finally:
        mw.ahead.claimed_itself(job_id)
    mw.admission.bind(broker, message, won)
    span_id = spans.start(mw.tracing, message, attempt=won.job.attempt, attempt_id=won.attempt_id)
    context = hold(mw, message, won, span_id=span_id)
    mw.delivery.context = context
    context.enter()


def _claim_own(mw: Worker, broker: dramatiq.Broker, message: Any, digest: str) -> Claim:
    """The delivery's own claim (nothing was held ahead for it), registering a message unknown to
    the store first; a refusal skips the delivery (`refuse`)."""
    job_id = message.message_id
    # One attempt id for every try: a retry after a lost reply recognises its own committed claim.
    attempt_id = new_attempt_id()
    try:
        won = _claim_with_ahead(mw, broker, job_id, attempt_id, digest)
    except ClaimRefused as refused:
        if refused.reason != "not_found":
            refuse(mw, broker, message, refused)
        if (forged := groups.forged_member(mw, message)) is not None:
            delivery.refuse(mw.store, message, None, worker_id=mw.worker_id, problem=forged, differs="options.group")
        unknown = message.copy(queue_name=message.queue_name)  # published by a producer without the middleware
        unknown.options.pop(REGISTERED, None)  # whatever it claims, the store has no such job
        try:
            mw.before_enqueue(broker, unknown, None)
            won = mw.store.claim(job_id, worker_id=mw.worker_id, lease_ttl=mw.lease_ttl, delivery_digest=digest)
        except JobIdConflict:  # registered meanwhile, from another message
            refuse(mw, broker, message, ClaimRefused(job_id, delivery.MISMATCH))
        except MessageRefused as bad:  # cannot become a job (its size, its workflow's id): dead-lettered
            delivery.refuse(mw.store, message, None, worker_id=mw.worker_id, problem=str(bad))
        except ClaimRefused as again:
            refuse(mw, broker, message, again)
    return won


def _claim_with_ahead(mw: Worker, broker: dramatiq.Broker, job_id: str, attempt_id: str, digest: str) -> Claim:
    """The delivery's claim (raises ClaimRefused as `StateStore.claim`), in the same batch as the
    claims ahead of the messages waiting in the process (reliable.worker.ahead), which are held
    from now on. Only the first try claims ahead: a retry after a lost reply claims its own job
    alone (a claim ahead whose reply was lost is recovered as any unrenewed lease)."""
    if late := mw.ahead.overdue():
        hand_back(mw, late, "not taken in time")
    picked = mw.ahead.pick(job_id, lambda waiting: ahead_digest(mw, broker, waiting))
    if not picked:
        alone: Claim = mw.runtime.with_store_retry("claim", lambda: mw.store.claim(
            job_id, worker_id=mw.worker_id, lease_ttl=mw.lease_ttl, attempt_id=attempt_id, delivery_digest=digest))
        return alone
    won: dict[str, Ahead] = {}
    tries = 0

    def write() -> Claim:
        nonlocal tries
        tries += 1
        if tries > 1:
            return mw.store.claim(job_id, worker_id=mw.worker_id, lease_ttl=mw.lease_ttl,
                                  attempt_id=attempt_id, delivery_digest=digest)
        own, others = mw.store.claim_with_ahead(
            job_id, worker_id=mw.worker_id, lease_ttl=mw.lease_ttl, attempt_id=attempt_id,
            delivery_digest=digest, ahead=[(m.message_id, d) for m, d in picked])
        at = mw.ahead.now()
        for waiting, waiting_digest in picked:
            if (claimed := others.get(waiting.message_id)) is not None:
                won[waiting.message_id] = Ahead(claimed, hold(mw, waiting, claimed), waiting_digest, at)
        if isinstance(own, BaseException):  # a refusal or a store error, once the claims ahead are held
            raise own
        return own

    try:
        claimed: Claim = mw.runtime.with_store_retry("claim", write)
        return claimed
    finally:
        mw.ahead.settle(picked, won)


def ahead_digest(mw: Worker, broker: dramatiq.Broker, message: Any) -> str | None:
    """The digest to claim this waiting message's job ahead with, or None when its own claim would
    not be straightforward (the rule of reliable.worker.ahead, in `claim`'s terms): a tracked
    actor off the fast path whose crash is retried (`retry_on_crash`), its queue the one it was
    consumed from and its actor's own (no routed retry's lane: `home_queue` reads nothing), that
    queue not paused, its actor without limits, and a well-formed message whose digest can be
    computed as `delivery.digest_of` does."""
    fields = delivery.fields(message)
    actor = fields.actor_name
    if not mw.tracked(broker, actor):
        return None
    delivered, consumed = delivery.delivered_queue(message)
    declared = mw.plans.plan(actor).queue
    if consumed not in (None, delivered) or declared not in (None, delivered):
        return None
    contract = mw.plans.contract(actor, delivered, fields.options)
    # A claim ahead that its worker's death leaves is recovered as a crashed attempt (nothing tells
    # it from a run): only a job whose crash is retried, never one a crash would send to review.
    if contract.fast_path or not contract.retry_on_crash or mw.paused_queues.is_paused(delivered):
        return None
    if mw.admission.gate.spec_for(broker, actor) is not None:
        return None
    return delivery.checked_digest(message)[0]  # a message its own claim refuses (digest_of): None


def hand_back(mw: Worker, claims: list[Ahead], why: str) -> None:
    """Give back claims held ahead and not taken (`StateStore.return_claim`), stop renewing them."""
    for held in claims:
        job_id, written = held.context.job_id, False
        try:  # whatever fails here, `returned` below answers the thread that may wait for the claim
            release_lease(mw, held.context)
            written = mw.store.return_claim(job_id, held.context.fencing_token, worker_id=mw.worker_id) is not None
        except Exception:
            logger.warning("job %s: claim ahead not handed back (%s); its lease will expire", job_id, why,
                           exc_info=True)
        else:
            if not written:
                logger.info("job %s: claim ahead not handed back (%s): the job moved on; its lease will expire",
                            job_id, why)
        finally:
            mw.ahead.returned(job_id, written=written)


def home_queue(mw: Worker, message: Any) -> str:
    """The queue whose contract applies to this delivery: its actor's declared queue, or for a
    delivery on another queue (a routed retry's lane, a queue a producer registered it on), its
    job's own as the store records it. A body naming any other queue, or not the queue it was
    consumed from, is refused (`delivery.queue_problem`): it would choose the contract, the policy
    rules and the operators' rights of the job."""
    return _home_queue(mw, message, *delivery.delivered_queue(message))


def _home_queue(mw: Worker, message: Any, delivered: str, consumed: str | None) -> str:
    """`home_queue`, for a delivery whose `delivery.delivered_queue` is read already."""
    declared = mw.plans.plan(delivery.fields(message).actor_name).queue
    if consumed in (None, delivered) and declared in (None, delivered):
        return delivered
    job: Job | None = mw.runtime.with_store_retry("find", lambda: mw.store.find(message.message_id))
    problem = delivery.queue_problem(delivered, consumed, declared or delivered, job, mw.plans.policy.lanes)
    if problem is not None or job is None:
        delivery.refuse(mw.store, message, None, worker_id=mw.worker_id, problem=problem, differs="queue")
    return job.home_queue


def hold(mw: Worker, message: Any, won: Any, *, span_id: str | None = None) -> JobContext:
    """The running attempt of a won claim, its lease renewed by the heartbeat from now on; its
    contract is the one of the job's own queue as the store has it (whatever queue delivered it)."""
    fields = delivery.fields(message)
    contract = mw.plans.contract(fields.actor_name, won.job.home_queue, fields.options)
    codec = mw.plans.plan(fields.actor_name).codec
    context = JobContext(mw.store, won, contract, mw.worker_id, mw.lease_ttl,
                         store_retry_cap=mw.heartbeat_interval, codec=codec, span_id=span_id)
    heartbeat = mw.runtime.heartbeat
    assert heartbeat is not None
    heartbeat.add(context)
    heartbeat.start()
    return context


def refuse(mw: Worker, broker: dramatiq.Broker, message: Any, refusal: ClaimRefused) -> NoReturn:
    """Handle a refused claim, then skip this delivery (always raises SkipMessage)."""
    if refusal.reason == delivery.MISMATCH:  # not the job's message: dead-lettered, never run
        delivery.refuse(mw.store, message, refusal, worker_id=mw.worker_id)
    if refusal.reason == "not_due" and refusal.retry_in is not None:
        # The delayed message came early (clock skew between worker and database): wait again.
        broker.enqueue(message_for(mw.store.get(message.message_id)), delay=int(refusal.retry_in * 1000) + 50)
    else:
        try:
            mw.store.record_event(message.message_id, "claim_refused", worker_id=mw.worker_id,
                                  detail={"reason": refusal.reason,
                                          "redelivered": getattr(message, "redelivered", None)})
        except Exception:
            logger.warning("could not record the refused claim of %s", message.message_id, exc_info=True)
        logger.info("message %s skipped: claim refused (%s)", message.message_id, refusal.reason)
    # This delivery never ran: Dramatiq's Results must not store None for it (its
    # after_skip_message would, over a real result or while the job runs elsewhere).
    message.options["store_results"] = False
    raise SkipMessage(refusal.reason) from None


def _look(mw: Worker, job_id: str, digest: str | None) -> JobStatus | None:
    """The fast path's look: the job's state, batched with the fast-path jobs waiting in the
    process when their queue can be read (reliable.worker.waiting), else read alone."""
    if not mw.looks.batched:
        alone: JobStatus | None = mw.runtime.with_store_retry("job_status", lambda: mw.store.job_status(
            job_id, delivery_digest=digest))
        return alone
    found: Row = mw.runtime.with_store_retry("job_status", lambda: mw.looks.look(job_id))
    return mw.store.looked_status(job_id, found, delivery_digest=digest)


def _fast_eligible(mw: Worker, message: Any, at_home: bool) -> bool:
    """Whether this delivery may run on the fast path: nothing follows its success (a pipeline
    step, on_success, a group's completion) that would have to be registered with it."""
    broker, fields = mw.plans.broker, delivery.fields(message)
    limited = mw.admission.gate.spec_for(broker, fields.actor_name) if broker is not None else None
    if not fast_path_allowed(limited):
        return False  # a concurrency slot is tied to a claim's lease, whatever the policy says
    if fields.options.get("group_completion_uuid") or fields.options.get("workflow_node"):
        return False  # a group's barrier or a workflow node's result commits with the success
    if not at_home:  # its home queue (`home_queue`) is not the queue its body names
        # On a routed retry's lane: the claim reads the job's own queue from the store, which
        # a message cannot misstate (a routed job is PENDING after a resume or a crash only).
        return False
    return not follows_success(fields, mw.plans.options(fields.actor_name))


def fast_done(mw: Worker, broker: dramatiq.Broker, message: Any, exception: BaseException | None) -> None:
    """A fast-path run ended: commit a success in one compare-and-set; claim a failure and
    let the durable path decide it (policy, retry, callbacks) as for any attempt."""
    # One for every try: a retry after a lost reply finds its commit.
    attempt_id: str = mw.delivery.fast_attempt or new_attempt_id()
    if exception is None:
        # Nothing is written before a fast-path run, so a run cut short by a crash leaves no
        # trace; the broker's redelivered flag says an earlier run may have happened.
        detail = {"redelivered": True} if getattr(message, "redelivered", False) else None
        if not _commit_later(mw, message, attempt_id, detail):
            _fast_succeed(mw, message, attempt_id, detail)
        return
    context = claim_after_run(mw, message, attempt_id, "failure")
    if context is None:
        return
    try:
        completion.complete(mw, broker, message, context, None, exception)
    finally:
        release_lease(mw, context)


def _fast_succeed(mw: Worker, message: Any, attempt_id: str, detail: dict[str, Any] | None) -> None:
    """Commit a fast-path success and wait for it (the store's retry loop while it cannot be reached)."""
    job_id = message.message_id
    committed = mw.runtime.with_store_retry("fast_succeed", lambda: mw.store.fast_committed(
        job_id, worker_id=mw.worker_id, attempt_id=attempt_id, detail=detail))
    if not committed:
        logger.warning("job %s: fast-path result discarded, the job left PENDING during the run", job_id)
        message.options["store_results"] = False


def _commit_later(mw: Worker, message: Any, attempt_id: str, detail: dict[str, Any] | None) -> bool:
    """Submit a fast-path success to the group commit with the delivery's acknowledgement held
    until it has committed (reliable.worker.acks); False: not here, wait for it instead."""
    return mw.acks.hand_over(message, lambda done: mw.store.fast_commit_later(
        message.message_id, worker_id=mw.worker_id, attempt_id=attempt_id, detail=detail, done=done),
        settle=lambda: _fast_succeed(mw, message, attempt_id, detail))


def claim_after_run(mw: Worker, message: Any, attempt_id: str, what: str) -> JobContext | None:
    """Claim a fast-path job whose run ended without a success, so the durable path decides
    what follows (held in the heartbeat while it does). Only from PENDING: a job that moved on
    meanwhile (a duplicate's outcome, an operator) is left alone."""
    job_id = message.message_id
    try:
        won = mw.runtime.with_store_retry("claim", lambda: mw.store.claim(
            job_id, worker_id=mw.worker_id, lease_ttl=mw.lease_ttl, attempt_id=attempt_id,
            from_states=(JobStatus.PENDING,)))
    except ClaimRefused as refusal:
        logger.warning("job %s: fast-path %s not recorded, the job left PENDING during the run (%s)",
                       job_id, what, refusal.reason)
        return None
    active = mw.tracing.current() if mw.tracing is not None else None  # the run's span, still current
    return hold(mw, message, won, span_id=active.span_id if active else None)


def skipped(mw: Worker, broker: dramatiq.Broker, message: Any, skip: Skip) -> None:
    """A delivery was skipped. reliable's own skip (a refused claim, a deferral) changes nothing;
    another middleware's ends the job, as Dramatiq acks a skipped message for good: fenced by the
    lease when reliable had claimed it, by the version read when not (`skips.end_unclaimed`)."""
    context = None if take_fast(mw, message) else take(mw, message)
    if context is None and (held := _held_ahead(mw, message)) is not None:
        if skip.own:  # put off or refused by reliable before its claim: the claim ahead goes back
            hand_back(mw, [held], "its delivery was put off")
        else:  # another middleware skipped it before our hook: end it under the claim ahead's lease
            held.context.adopt(None)
            context = held.context
    if context is None:
        if not skip.own and mw.tracked(broker, message.actor_name):
            job = mw.runtime.with_store_retry("skipped", lambda: end_unclaimed(mw.store, message, skip))
            if job is not None and job.workflow_id and message.options.get("workflow_node"):
                after_commit.advance_workflow(mw.runtime, mw.metrics, broker, job.workflow_id)
            if job is not None and job.status is JobStatus.CANCELLED:  # effects of earlier attempts
                contract = mw.plans.contract(message.actor_name, job.home_queue, message.options)
                after_commit.compensate_cancelled(mw.runtime, broker, job, contract.compensation)
        return
    context.leave()
    if not skip.own and not is_its_message(context.claim.job, message):
        _copy_skipped(mw, context, skip)
        return
    try:
        logger.warning("job %s: skipped %s after its claim", context.job_id, skip.describe())
        job = completion.finish(mw, context, outcome.skipped(skip))
        after_commit.conclude(mw.runtime, mw.metrics, broker, message, context, job, None, [])
    finally:
        release_lease(mw, context)


def _copy_skipped(mw: Worker, context: JobContext, skip: Skip) -> None:
    """A copy of the job's message (`skips.is_its_message` says no) was skipped after our claim:
    the claim goes back (`claim_returned`), the job waits for its real message."""
    try:
        returned = mw.store.return_claim(context.job_id, context.fencing_token, worker_id=mw.worker_id)
    except Exception:
        returned = None
        logger.warning("job %s: claim of a skipped copy not handed back", context.job_id, exc_info=True)
    finally:
        release_lease(mw, context)
    logger.warning("job %s: a copy of its message was skipped %s; the job %s", context.job_id, skip.describe(),
                   "waits for its own message" if returned is not None else "is left to its lease")


def _held_ahead(mw: Worker, message: Any) -> Ahead | None:
    """The claim held ahead for this skipped delivery, if any (used up)."""
    if not mw.ahead.enabled:
        return None
    digest = delivery.checked_digest(message)[0]
    return None if digest is None else mw.ahead.take(message.message_id, digest)


def take_fast(mw: Worker, message: Any) -> bool:
    """Whether this thread's delivery is `message`'s fast-path run (forgotten from now on)."""
    fast = mw.delivery.fast
    mw.delivery.fast = None
    _fast_run.set(None)
    return fast is not None and fast == message.message_id


def take(mw: Worker, message: Any) -> JobContext | None:
    """This thread's running attempt of `message`'s job, if any (forgotten from now on)."""
    context = mw.delivery.context
    mw.delivery.context = None
    if context is None or context.job_id != message.message_id:
        return None
    return context


def release_lease(mw: Worker, context: JobContext) -> None:
    """Stop renewing the lease of `context`'s attempt (it has ended and its outcome is written)."""
    heartbeat = mw.runtime.heartbeat
    assert heartbeat is not None
    heartbeat.remove(context)
