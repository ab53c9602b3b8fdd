"""The claim before a run: what Dramatiq's before_process_message hook hands over (`Claim.before_run`).

Before the actor runs: a delivery of a paused queue is put off (`paused`), the delivery is admitted
by the actor's limits (`admission`), then the job is claimed, a compare-and-set. A refused claim
skips the delivery (`refuse`: the one place a refusal is handled; the store already holds the
truth). A message unknown to the store (published by a producer without reliable) is registered
first; one that cannot become a job (reliable.inputs) is dead-lettered as a delivery that is not a
job's message (`delivery.refuse`). A won claim is held by the heartbeat from then on (`leases`).

The fast path (`fast.FastStart`: an actor with `fast_path=True` whose success nothing has to
follow) writes nothing before the run. A claim taken ahead by this process's batch
(reliable.worker.ahead) is the claim already won (`DurableClaim`). What happens once the run ended
is `reliable.worker.attempt`'s.

Each step is built once per middleware with the few collaborators it uses (`Claim`,
`DurableClaim`, `AheadRule`): none reads the middleware.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

import dramatiq
from dramatiq.middleware import SkipMessage

from ..dispatch import message_for
from ..errors import ClaimRefused, JobIdConflict, MessageRefused, PolicyError
from ..inputs import clip
from ..store import Claim as Won
from ..store import Job
from . import delivery
from .ahead import Ahead
from .leases import new_attempt_id
from .registration import REGISTERED

if TYPE_CHECKING:
    from ..limits.gate import LimitGate
    from .admission import Limits
    from .ahead import ClaimsAhead
    from .context import JobContext
    from .fast import FastStart
    from .groups import Groups
    from .leases import Leases
    from .paused import PausedDeliveries, PausedQueues
    from .plans import Plans
    from .registration import Registration
    from .runtime import Runtime
    from .skips import Skip

__all__ = ["AheadRule", "Claim", "DurableClaim", "refuse"]

logger = logging.getLogger("reliable.middleware")


class Claim:
    """The claim before a run: the process's store (`runtime`), the actors' plans, the paused
    queues, the limits, the fast path and the durable claim."""

    __slots__ = ("admission", "durable", "fast", "pauses", "plans", "runtime")

    def __init__(self, runtime: Runtime, plans: Plans, pauses: PausedDeliveries, admission: Limits,
                 fast: FastStart, durable: DurableClaim) -> None:
        self.runtime, self.plans, self.pauses, self.admission = runtime, plans, pauses, admission
        self.fast, self.durable = fast, durable

    def before_run(self, broker: dramatiq.Broker, message: Any) -> None:
        """Claim the delivered job of a tracked actor; refuse to run it (skip + ack) unless the claim wins."""
        try:
            self.claim(broker, message)
        except SkipMessage:
            self.admission.release()
            raise
        except BaseException as exc:
            self.admission.release()
            if isinstance(exc, PolicyError):
                _unrunnable(self.runtime, message, exc)
            # Dramatiq swallows any other exception of a before-hook and would run the actor
            # without a claim: never let that happen. The job row is the truth; a PENDING job is
            # re-dispatched by the sweeper.
            logger.exception("claim of message %s failed; skipping it", clip(message.message_id))
            message.options["store_results"] = False  # never ran: Results must not store None for it
            raise SkipMessage("claim failed") from None

    def claim(self, broker: dramatiq.Broker, message: Any) -> None:
        """Claim the delivered job, or raise SkipMessage (see the module doc)."""
        runtime = self.runtime
        fields = delivery.fields(message)  # its fields, read without the proxy; `message` is acted on
        job_id = fields.message_id
        digest = delivery.digest_of(runtime.store, message, worker_id=runtime.worker_id)  # must match its job
        delivered, consumed = delivery.delivered_queue(message)
        queue = self._home_queue(message, delivered, consumed)  # the actor's or the store's, never the body's
        contract = self.plans.contract(fields.actor_name, queue, fields.options)
        self.pauses.defer_if_paused(broker, message, queue)  # before the limits: a paused queue takes no slot
        refusal = self.admission.admit(broker, message, digest)
        if refusal is not None:
            refuse(runtime, broker, message, refusal)
        if contract.fast_path:
            try:
                if self.fast.start(message, fields, digest, queue == delivered):
                    return
            except ClaimRefused as mismatch:
                refuse(runtime, broker, message, mismatch)
            # Anything else (a retry, a paused or finished job, an unknown message): the durable
            # claim decides, as for any actor.
        self.durable.claim(broker, message, job_id, digest)

    def home_queue(self, message: Any) -> str:
        """The queue whose contract applies to this delivery: its actor's declared queue, or for a
        delivery on another queue (a routed retry's lane, a queue a producer registered it on), its
        job's own as the store records it. A body naming any other queue, or not the queue it was
        consumed from, is refused (`delivery.queue_problem`): it would choose the contract, the policy
        rules and the operators' rights of the job."""
        return self._home_queue(message, *delivery.delivered_queue(message))

    def _home_queue(self, message: Any, delivered: str, consumed: str | None) -> str:
        """`home_queue`, for a delivery whose `delivery.delivered_queue` is read already."""
        plans = self.plans
        declared = plans.plan(delivery.fields(message).actor_name).queue
        if consumed in (None, delivered) and declared in (None, delivered):
            return delivered
        runtime = self.runtime
        job: Job | None = runtime.with_store_retry("find", lambda: runtime.store.find(message.message_id))
        problem = delivery.queue_problem(delivered, consumed, declared or delivered, job, plans.policy.lanes)
        if problem is not None or job is None:
            delivery.refuse(runtime.store, message, None, worker_id=runtime.worker_id, problem=problem,
                            differs="queue")
        return job.home_queue


class AheadRule:
    """Which waiting messages' jobs may be claimed ahead (the rule of reliable.worker.ahead, in the
    claim's terms): what is tracked (`registration`), the actors' plans and limits (`gate`), the
    paused queues."""

    __slots__ = ("gate", "paused", "plans", "registration")

    def __init__(self, registration: Registration, plans: Plans, paused: PausedQueues, gate: LimitGate) -> None:
        self.registration, self.plans, self.paused, self.gate = registration, plans, paused, gate

    def digest(self, broker: dramatiq.Broker, message: Any) -> str | None:
        """The digest to claim this waiting message's job ahead with, or None when its own claim would
        not be straightforward: a tracked actor off the fast path whose crash is retried
        (`retry_on_crash`), its queue the one it was consumed from and its actor's own (no routed
        retry's lane: `home_queue` reads nothing), that queue not paused, its actor without limits,
        and a well-formed message whose digest can be computed as `delivery.digest_of` does."""
        fields = delivery.fields(message)
        actor = fields.actor_name
        if not self.registration.tracked(broker, actor):
            return None
        delivered, consumed = delivery.delivered_queue(message)
        declared = self.plans.plan(actor).queue
        if consumed not in (None, delivered) or declared not in (None, delivered):
            return None
        contract = self.plans.contract(actor, delivered, fields.options)
        # A claim ahead that its worker's death leaves is recovered as a crashed attempt (nothing tells
        # it from a run): only a job whose crash is retried, never one a crash would send to review.
        if contract.fast_path or not contract.retry_on_crash or self.paused.is_paused(delivered):
            return None
        if self.gate.spec_for(broker, actor) is not None:
            return None
        return delivery.checked_digest(message)[0]  # a message its own claim refuses (digest_of): None


class DurableClaim:
    """The durable claim of a delivery, held ahead by this process's batch or its own, and the
    claims ahead it takes with it: the process's store (`runtime`), the claims ahead and their
    rule, the leases, and how an unknown message becomes a job (`registration`, `groups`)."""

    __slots__ = ("ahead", "groups", "leases", "registration", "rule", "runtime")

    def __init__(self, runtime: Runtime, ahead: ClaimsAhead, rule: AheadRule, leases: Leases,
                 registration: Registration, groups: Groups) -> None:
        self.runtime, self.ahead, self.rule, self.leases = runtime, ahead, rule, leases
        self.registration, self.groups = registration, groups

    def claim(self, broker: dramatiq.Broker, message: Any, job_id: str, digest: str) -> None:
        """Claim the job (or take its claim held ahead) and start its attempt on this thread."""
        ahead = self.ahead
        if not ahead.enabled:  # no claims ahead in this process (the default)
            self.leases.start(broker, message, self._claim_own(broker, message, digest))
            return
        held = ahead.take(job_id, digest)
        if held is not None:  # claimed ahead by this process's batch: the claim is won already
            self.leases.start(broker, message, held.claim, held.context)
            return
        try:
            won = self._claim_own(broker, message, digest)
        finally:
            ahead.claimed_itself(job_id)
        self.leases.start(broker, message, won)

    def _claim_own(self, broker: dramatiq.Broker, message: Any, digest: str) -> Won:
        """The delivery's own claim (nothing was held ahead for it), registering a message unknown to
        the store first; a refusal skips the delivery (`refuse`)."""
        runtime, job_id = self.runtime, message.message_id
        # One attempt id for every try: a retry after a lost reply recognises its own committed claim.
        attempt_id = new_attempt_id()
        try:
            won = self._claim_with_ahead(broker, job_id, attempt_id, digest)
        except ClaimRefused as refused:
            if refused.reason != "not_found":
                refuse(runtime, broker, message, refused)
            store, worker_id = runtime.store, runtime.worker_id
            if (forged := self.groups.forged_member(message)) is not None:
                delivery.refuse(store, message, None, worker_id=worker_id, problem=forged, differs="options.group")
            unknown = message.copy(queue_name=message.queue_name)  # published by a producer without the middleware
            unknown.options.pop(REGISTERED, None)  # whatever it claims, the store has no such job
            try:
                self.registration.register(broker, unknown, None)
                won = store.claim(job_id, worker_id=worker_id, lease_ttl=runtime.settings.lease_ttl,
                                  delivery_digest=digest)
            except JobIdConflict:  # registered meanwhile, from another message
                refuse(runtime, broker, message, ClaimRefused(job_id, delivery.MISMATCH))
            except MessageRefused as bad:  # cannot become a job (its size, its workflow's id): dead-lettered
                delivery.refuse(store, message, None, worker_id=worker_id, problem=str(bad))
            except ClaimRefused as again:
                refuse(runtime, broker, message, again)
        return won

    def _claim_with_ahead(self, broker: dramatiq.Broker, job_id: str, attempt_id: str, digest: str) -> Won:
        """The delivery's claim (raises ClaimRefused as `StateStore.claim`), in the same batch as the
        claims ahead of the messages waiting in the process (reliable.worker.ahead), which are held
        from now on. Only the first try claims ahead: a retry after a lost reply claims its own job
        alone (a claim ahead whose reply was lost is recovered as any unrenewed lease)."""
        runtime, ahead = self.runtime, self.ahead
        picked = self._pick(broker, job_id) if ahead.enabled else None
        lease_ttl = runtime.settings.lease_ttl
        if not picked:
            alone: Won = runtime.with_store_retry("claim", lambda: runtime.store.claim(
                job_id, worker_id=runtime.worker_id, lease_ttl=lease_ttl, attempt_id=attempt_id,
                delivery_digest=digest))
            return alone
        won: dict[str, Ahead] = {}
        tries = 0

        def write() -> Won:
            nonlocal tries
            tries += 1
            store, worker_id = runtime.store, runtime.worker_id
            if tries > 1:
                return store.claim(job_id, worker_id=worker_id, lease_ttl=lease_ttl, attempt_id=attempt_id,
                                   delivery_digest=digest)
            own, others = store.claim_with_ahead(
                job_id, worker_id=worker_id, lease_ttl=lease_ttl, attempt_id=attempt_id,
                delivery_digest=digest, ahead=[(m.message_id, d) for m, d in picked])
            at = ahead.now()
            for waiting, waiting_digest in picked:
                if (claimed := others.get(waiting.message_id)) is not None:
                    won[waiting.message_id] = Ahead(claimed, self.leases.hold(waiting, claimed), waiting_digest, at)
            if isinstance(own, BaseException):  # a refusal or a store error, once the claims ahead are held
                raise own
            return own

        try:
            claimed: Won = runtime.with_store_retry("claim", write)
            return claimed
        finally:
            ahead.settle(picked, won)

    def _pick(self, broker: dramatiq.Broker, job_id: str) -> list[tuple[Any, str]]:
        """The waiting messages whose jobs are claimed ahead with `job_id`'s, once the claims held
        too long are handed back."""
        ahead, rule = self.ahead, self.rule
        if late := ahead.overdue():
            self.hand_back(late, "not taken in time")
        return ahead.pick(job_id, lambda waiting: rule.digest(broker, waiting))

    def held_ahead(self, message: Any) -> Ahead | None:
        """The claim held ahead for this (skipped) delivery, if any (used up)."""
        ahead = self.ahead
        if not ahead.enabled:
            return None
        digest = delivery.checked_digest(message)[0]
        return None if digest is None else ahead.take(message.message_id, digest, claiming=False)

    def give_back(self, context: JobContext, skip: Skip) -> None:
        """A copy of the job's message (`skips.is_its_message` says no) was skipped after our claim:
        the claim goes back (`claim_returned`), the job waits for its real message."""
        runtime = self.runtime
        try:
            returned = runtime.store.return_claim(context.job_id, context.fencing_token, worker_id=runtime.worker_id)
        except Exception:
            returned = None
            logger.warning("job %s: claim of a skipped copy not handed back", context.job_id, exc_info=True)
        finally:
            self.leases.release(context)
        logger.warning("job %s: a copy of its message was skipped %s; the job %s", context.job_id, skip.describe(),
                       "waits for its own message" if returned is not None else "is left to its lease")

    def hand_back(self, claims: list[Ahead], why: str) -> None:
        """Give back claims held ahead and not taken (`StateStore.return_claim`), stop renewing them."""
        runtime = self.runtime
        for held in claims:
            job_id, written = held.context.job_id, False
            try:  # whatever fails here, `returned` below answers the thread that may wait for the claim
                self.leases.release(held.context)
                written = runtime.store.return_claim(job_id, held.context.fencing_token,
                                                     worker_id=runtime.worker_id) is not None
            except Exception:
                logger.warning("job %s: claim ahead not handed back (%s); its lease will expire", job_id, why,
                               exc_info=True)
            else:
                if not written:
                    logger.info("job %s: claim ahead not handed back (%s): the job moved on; its lease will expire",
                                job_id, why)
            finally:
                self.ahead.returned(job_id, written=written)


def _unrunnable(runtime: Runtime, message: Any, exc: PolicyError) -> None:
    """A claim that fails the same way at every try (the policy refuses what the message asks for):
    its job ends DEAD, or a message that is not its job's is refused; dead-lettered either way
    (`delivery.end_unrunnable`, `delivery.refuse`: raises SkipMessage). Never a skip the sweeper
    would repeat."""
    try:
        store, worker_id = runtime.store, runtime.worker_id
        delivery.end_unrunnable(store, message, str(exc), worker_id=worker_id)
        delivery.refuse(store, message, None, worker_id=worker_id, problem=str(exc))
    except SkipMessage:
        message.options["store_results"] = False
        raise
    except Exception:  # the store: the claim failed as any other, the sweeper publishes it again
        logger.warning("job %s: could not end the job of a message that cannot run", clip(message.message_id),
                       exc_info=True)


def refuse(runtime: Runtime, broker: dramatiq.Broker, message: Any, refusal: ClaimRefused) -> NoReturn:
    """Handle a refused claim, then skip this delivery (always raises SkipMessage)."""
    store, worker_id = runtime.store, runtime.worker_id
    if refusal.reason == delivery.MISMATCH:  # not the job's message: dead-lettered, never run
        delivery.refuse(store, message, refusal, worker_id=worker_id)
    if refusal.reason == "not_due" and refusal.retry_in is not None:
        # The delayed message came early (clock skew between worker and database): wait again.
        broker.enqueue(message_for(store.get(message.message_id)), delay=int(refusal.retry_in * 1000) + 50)
    else:
        try:
            store.record_event(message.message_id, "claim_refused", worker_id=worker_id,
                               detail={"reason": refusal.reason, "redelivered": getattr(message, "redelivered", None)})
        except Exception:
            logger.warning("could not record the refused claim of %s", message.message_id, exc_info=True)
        logger.info("message %s skipped: claim refused (%s)", message.message_id, refusal.reason)
    # This delivery never ran: Dramatiq's Results must not store None for it (its
    # after_skip_message would, over a real result or while the job runs elsewhere).
    message.options["store_results"] = False
    raise SkipMessage(refusal.reason) from None
