"""What the worker's steps read of the installed middleware: a Protocol, so that `claim`,
`completion`, `groups` and `boot` depend on the parts (settings, runtime, plans, registration,
limits, this thread's delivery) and never import the middleware that wires them together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import dramatiq

if TYPE_CHECKING:
    from dramatiq.middleware import GroupCallbacks

    from ..metrics import Metrics
    from ..policy import Policy
    from ..store import StateStore
    from ..tracing import Tracing
    from .acks import HeldAcks
    from .admission import Limits
    from .ahead import ClaimsAhead
    from .context import Delivery
    from .paused import PausedQueues
    from .plans import Plans
    from .registration import Registration
    from .runtime import Runtime
    from .settings import Settings
    from .waiting import Looks

__all__ = ["Worker"]


class Worker(Protocol):
    """The installed middleware as its steps see it (`reliable.worker.middleware.ReliableMiddleware`)."""

    @property
    def settings(self) -> Settings:
        """The constructor's options, resolved."""

    @property
    def runtime(self) -> Runtime:
        """This process's store, worker id, heartbeat and recovery thread."""

    @property
    def plans(self) -> Plans:
        """The actors' plans and contracts."""

    @property
    def registration(self) -> Registration:
        """How a message becomes a job."""

    @property
    def admission(self) -> Limits:
        """The actors' limits."""

    @property
    def delivery(self) -> Delivery:
        """What this worker thread's delivery holds between the hooks."""

    @property
    def paused_queues(self) -> PausedQueues:
        """The paused queues as this process last read them."""

    @property
    def looks(self) -> Looks:
        """The fast path's batched looks."""

    @property
    def ahead(self) -> ClaimsAhead:
        """The claims held ahead for the messages waiting in the process."""

    @property
    def acks(self) -> HeldAcks:
        """The deliveries' acknowledgements held until their fast-path successes commit."""

    @property
    def policy(self) -> Policy:
        """The policy."""

    @property
    def store(self) -> StateStore:
        """This process's store."""

    @property
    def worker_id(self) -> str:
        """This process's worker id."""

    @property
    def lease_ttl(self) -> float:
        """The lease TTL (seconds)."""

    @property
    def heartbeat_interval(self) -> float:
        """The heartbeat interval (seconds)."""

    @property
    def metrics(self) -> Metrics | None:
        """The metrics updated, if any."""

    @property
    def tracing(self) -> Tracing | None:
        """The attempt spans, if tracing is on."""

    @property
    def continuation_kinds(self) -> frozenset[str]:
        """The continuation kinds reliable sends for tracked actors."""

    @property
    def dramatiq_retries(self) -> Any:
        """Dramatiq's Retries middleware of the broker, if any."""

    @property
    def group_callbacks(self) -> GroupCallbacks | None:
        """The broker's GroupCallbacks, once adopted (a TrackedGroupCallbacks)."""

    @property
    def broker(self) -> dramatiq.Broker | None:
        """The broker whose actors are tracked."""

    @broker.setter
    def broker(self, broker: dramatiq.Broker | None) -> None:
        """Remember the broker."""

    def tracked(self, broker: dramatiq.Broker, actor_name: str) -> bool:
        """Whether reliable tracks this actor."""

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        """Register the job of `message` before it is published."""

    def adopt_group_callbacks(self, broker: dramatiq.Broker) -> None:
        """Keep group barriers in the store from now on."""
