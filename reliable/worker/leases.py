"""An attempt at the worker: its id (`new_attempt_id`), and its lease: a won claim becomes the
thread's running attempt, renewed by the process's heartbeat until its outcome is written (`release`).

`hold` makes a won claim's JobContext (its contract is the one of the job's own queue as the store
has it, whatever queue delivered it) and hands it to the heartbeat; `start` also ties the actor's
limits slot to the lease, starts the attempt's span and makes it this thread's delivery's attempt,
unless the lease was lost before (a claim held ahead that waited): then the run never starts and
the delivery is skipped, as a refused claim's is.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import dramatiq
from dramatiq.middleware import SkipMessage

from . import delivery, spans
from .context import JobContext

if TYPE_CHECKING:
    from ..tracing import Tracing
    from .admission import Limits
    from .context import Delivery
    from .plans import Plans
    from .runtime import Runtime

__all__ = ["Leases", "new_attempt_id"]

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
        tracing = self._tracing
        span_id = None if tracing is None else spans.start(tracing, message, attempt=won.job.attempt,
                                                           attempt_id=won.attempt_id)
        if context is None:
            context = self.hold(message, won, span_id=span_id)
        else:
            context.adopt(span_id)
        # The thread's before entering: an interrupt landing in or just after `enter` (a lost lease,
        # a duplicate claim) escapes Dramatiq's before-hooks, and the after-hook must find the
        # attempt to end it (else the heartbeat holds it for ever).
        self._thread.context = context
        if not context.enter():
            self._thread.context = None  # never run: released here
            self._lost_before_run(message, context)

    def _lost_before_run(self, message: Any, context: JobContext) -> NoReturn:
        """The lease of a claim not run yet (one held ahead) was lost while it waited: dropped as a
        lost lease is (nothing written: the lease is another's, or recovery hands the job on), the
        delivery skipped as a refused claim is (always raises SkipMessage)."""
        self.release(context)
        logger.warning("job %s: lease %d lost before its run (claimed ahead); not run, the job is left to "
                       "its new holder or to recovery", context.job_id, context.fencing_token)
        message.options["store_results"] = False  # never ran: Results must not store None for it
        raise SkipMessage("lease_lost")

    def release(self, context: JobContext) -> None:
        """Stop renewing the lease of `context`'s attempt (it has ended and its outcome is written)."""
        heartbeat = self._runtime.heartbeat
        assert heartbeat is not None
        heartbeat.remove(context)
