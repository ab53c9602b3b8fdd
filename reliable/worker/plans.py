"""What reliable needs of each actor, looked up once per actor and only read per message.

An `ActorPlan` holds an actor's declared options (the broker's own mapping, read only), whether
reliable tracks it, its checkpoint codec and its declared contract (what travels with each of its
jobs). A job's `JobContract` depends on the queue and on the Dramatiq retry options a message may
set (max_retries, min_backoff, max_backoff win as they do in Dramatiq), so contracts are kept per
(policy, actor, queue, message retry options), up to `CONTRACT_CACHE` of them. Re-declaring an
actor forgets every plan and contract (`Plans.forget`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dramatiq

from ..errors import PolicyError
from ..options import RETRY_OPTIONS, contract_options, declared_contract
from ..policy import JobContract, Policy

__all__ = ["CONTRACT_CACHE", "ActorPlan", "Plans"]

#: Contracts kept per (policy, actor, queue, message retry options); more distinct keys are computed each time.
CONTRACT_CACHE = 10_000


@dataclass(frozen=True)
class ActorPlan:
    """One actor as reliable sees it (an actor the broker does not declare: no options, tracked)."""

    name: str
    options: Mapping[str, Any]
    tracked: bool
    codec: Any
    #: The contract options declared in code, stored with every job of the actor (options.STORED_CONTRACT).
    declared: Mapping[str, Any]
    #: The queue the actor is declared on (None: the broker does not declare the actor).
    queue: str | None = None

    @classmethod
    def of(cls, name: str, options: Mapping[str, Any], queue: str | None = None) -> ActorPlan:
        """The plan of actor `name` declared on `queue` with `options`."""
        return cls(name, options, bool(options.get("reliable", True)), options.get("checkpoint_codec"),
                   declared_contract(options), queue)


class Plans:
    """The plans of the broker's actors and their contracts (the broker: the first one a hook saw)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.broker: dramatiq.Broker | None = None
        self._plans: dict[str, ActorPlan] = {}
        self._contracts: dict[tuple[Any, ...], JobContract] = {}
        self._fast: dict[tuple[str, str], bool] = {}

    def plan(self, actor_name: str) -> ActorPlan:
        """The plan of `actor_name` (kept once the broker declares the actor)."""
        plan = self._plans.get(actor_name)
        if plan is not None:
            return plan
        if self.broker is None:
            return ActorPlan.of(actor_name, {})
        try:
            actor = self.broker.get_actor(actor_name)
        except dramatiq.errors.ActorNotFound:
            return ActorPlan.of(actor_name, {})  # not kept: it may be declared later
        plan = self._plans[actor_name] = ActorPlan.of(actor_name, actor.options, actor.queue_name)
        return plan

    def options(self, actor_name: str) -> Mapping[str, Any]:
        """The options `actor_name` is declared with ({} for an actor the broker does not declare)."""
        return self.plan(actor_name).options

    def contract(self, actor_name: str, queue: str, message_options: Mapping[str, Any] | None = None) -> JobContract:
        """The job contract: policy defaults, queue and actor sections, actor options, then the
        Dramatiq retry options of the message (max_retries, min_backoff, max_backoff), as Dramatiq."""
        retry_options = tuple(map(message_options.get, RETRY_OPTIONS)) if message_options else ()
        key = (id(self.policy), actor_name, queue, retry_options)
        contract = self._contracts.get(key)
        if contract is None:  # computed once per actor, queue and message retry options (the hot path)
            contract = self.policy.contract(actor_name, queue,
                                            contract_options(self.options(actor_name), message_options))
            if len(self._contracts) < CONTRACT_CACHE:
                self._contracts[key] = contract
        return contract

    def likely_fast(self, message: Any) -> bool:
        """Whether a message waiting in the process is likely a fast-path delivery: the contract of
        the first message seen per (actor, queue), not read again for each waiting message. A hint
        for which jobs a batched look reads ahead (reliable.worker.waiting), never a decision: each
        delivery's own claim reads its own contract."""
        key = (message.actor_name, message.queue_name)
        fast = self._fast.get(key)
        if fast is None:
            try:
                fast = self.contract(message.actor_name, message.queue_name, message.options).fast_path
            except PolicyError:  # options its own claim refuses (reliable.worker.delivery): no hint
                return False
            if len(self._fast) < CONTRACT_CACHE:  # a body may name any queue: the map stays bounded
                self._fast[key] = fast
        return fast

    def check(self, actor: Any) -> None:
        """Resolve a declared actor's contract strictly: PolicyError naming the actor and option for a
        contradiction (e.g. `fast_path=True` with `resumable=True`)."""
        self.policy.contract(actor.actor_name, actor.queue_name, dict(actor.options), strict=True)

    def forget(self) -> None:
        """Drop every plan and contract (an actor was (re-)declared: its options may have changed)."""
        self._plans.clear()
        self._contracts.clear()
        self._fast.clear()
