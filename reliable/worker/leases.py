"""An attempt's lease at the worker: a won claim becomes the thread's running attempt, renewed by
the process's heartbeat until its outcome is written (`release`).

`hold` makes a won claim's JobContext (its contract is the one of the job's own queue as the store
has it, whatever queue delivered it) and hands it to the heartbeat; `start` also ties the actor's
limits slot to the lease, starts the attempt's span and makes it this thread's delivery's attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dramatiq

from . import delivery, spans
from .context import JobContext

if TYPE_CHECKING:
    from ..tracing import Tracing
    from .admission import Limits
    from .context import Delivery
    from .plans import Plans
    from .runtime import Runtime

__all__ = ["Leases"]


class Leases:
    """The leases of this process's running attempts (one per middleware, built when it is installed)."""

    __slots__ = ("_admission", "_plans", "_runtime", "_thread", "_tracing")

    def __init__(self, runtime: Runtime, plans: Plans, admission: Limits, thread: Delivery,
                 tracing: Tracing | None) -> None:
        self._runtime, self._plans, self._admission = runtime, plans, admission
        self._thread, self._tracing = thread, tracing

    def hold(self, message: Any, won: Any, *, span_id: str | None = None) -> JobContext:
        """The running attempt of a won claim, its lease renewed by the heartbeat from now on."""
        runtime, plans, fields = self._runtime, self._plans, delivery.fields(message)
        contract = plans.contract(fields.actor_name, won.job.home_queue, fields.options)
        settings = runtime.settings
        context = JobContext(runtime.store, won, contract, runtime.worker_id, settings.lease_ttl,
                             store_retry_cap=settings.heartbeat_interval, codec=plans.plan(fields.actor_name).codec,
                             span_id=span_id)
        heartbeat = runtime.heartbeat
        assert heartbeat is not None
        heartbeat.add(context)
        heartbeat.start()
        return context

    def start(self, broker: dramatiq.Broker, message: Any, won: Any, context: JobContext | None = None) -> None:
        """Run the attempt of the claim `won` on this thread: its limits slot tied to its lease,
        its span started, held by the heartbeat (`context`: held already, by a claim ahead)."""
        self._admission.bind(broker, message, won)
        span_id = spans.start(self._tracing, message, attempt=won.job.attempt, attempt_id=won.attempt_id)
        if context is None:
            context = self.hold(message, won, span_id=span_id)
        else:
            context.adopt(span_id)
        self._thread.context = context
        context.enter()

    def release(self, context: JobContext) -> None:
        """Stop renewing the lease of `context`'s attempt (it has ended and its outcome is written)."""
        heartbeat = self._runtime.heartbeat
        assert heartbeat is not None
        heartbeat.remove(context)
