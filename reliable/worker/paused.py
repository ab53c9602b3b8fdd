"""Paused queues at the worker: a delivery of a paused queue is put off before its claim.

The paused set is read from the store at most once per `REFRESH_SECONDS` per process (one small
SELECT, `reliable.queue_pauses.paused`), so the check a delivery pays is a clock read and a set
lookup: a pause or a resume reaches every worker within `REFRESH_SECONDS`. When the store cannot
be read the last set read stays in use (the claim that follows reports the outage).

A deferred delivery is published again later and skipped the way a limit defers one
(`LimitGate.publish_again`): the job stays PENDING, no attempt is spent, no thread waits. Its delay
doubles with each deferral from `FIRST_DELAY` up to `MAX_DELAY` seconds, spread by a jitter, so a
long pause costs few deliveries and a resume is seen within `MAX_DELAY` (plus the refresh). Jobs
already RUNNING are left alone (a pause acts before a claim, never inside an attempt).

A process an operator quieted (reliable.process_commands) treats every queue as paused: its
deliveries go back for the other processes, its running jobs finish.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import dramatiq
from dramatiq.middleware import SkipMessage

from ..errors import ReliableError
from ..limits.gate import deferrals, records_deferral
from ..queue_pauses import paused

if TYPE_CHECKING:
    from ..limits.gate import LimitGate
    from ..store import StateStore
    from .runtime import Runtime

__all__ = ["FIRST_DELAY", "MAX_DELAY", "REFRESH_SECONDS", "PausedDeliveries", "PausedQueues", "pause_delay"]

logger = logging.getLogger("reliable.middleware")

#: How stale a process's paused set may be, in seconds.
REFRESH_SECONDS = 2.0
#: The first deferral's delay, and the longest one, in seconds.
FIRST_DELAY = 1.0
MAX_DELAY = 30.0


def pause_delay(count: int, rand: float) -> float:
    """The delay of a paused queue's delivery deferred for the `count`-th time (1, 2, ...): doubling
    from FIRST_DELAY, at most MAX_DELAY, spread over [0.75, 1.25) of it by `rand` in [0, 1). Pure."""
    base = min(MAX_DELAY, FIRST_DELAY * 2.0 ** min(max(count - 1, 0), 16))
    return min(MAX_DELAY, base * (0.75 + rand / 2))


class PausedQueues:
    """This process's view of the paused queues, refreshed at most every `refresh` seconds."""

    def __init__(self, store: Callable[[], StateStore], *, refresh: float = REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic, quiet: Callable[[], bool] = lambda: False) -> None:
        self._store, self._refresh, self._clock = store, refresh, clock
        #: Whether an operator quieted this process (reliable.worker.commands): every queue is paused for it.
        self.quiet = quiet
        self._names: frozenset[str] = frozenset()
        self._due = float("-inf")
        self._lock = threading.Lock()

    def names(self) -> frozenset[str]:
        """The paused queues, as read at most `refresh` seconds ago."""
        if self._clock() < self._due:
            return self._names
        with self._lock:  # one thread reads; the others due a refresh wait for its one small SELECT
            if self._clock() >= self._due:
                try:
                    self._names = paused(self._store()).names
                except ReliableError as exc:
                    logger.warning("could not read the paused queues (the last known stay in use): %s", exc)
                self._due = self._clock() + self._refresh
        return self._names

    def is_paused(self, queue: str) -> bool:
        """Whether `queue` is paused (see `names`), or this process quieted."""
        return self.quiet() or queue in self.names()


class PausedDeliveries:
    """The worker step that puts off a paused queue's deliveries: the paused set (`queues`), the
    limits gate that publishes a delivery again, and the process's store (`runtime`)."""

    __slots__ = ("gate", "queues", "runtime")

    def __init__(self, queues: PausedQueues, gate: LimitGate, runtime: Runtime) -> None:
        self.queues, self.gate, self.runtime = queues, gate, runtime

    def defer_if_paused(self, broker: dramatiq.Broker, message: Any, queue: str) -> None:
        """Put off this delivery when `queue` is paused (raises SkipMessage); otherwise nothing."""
        if not self.queues.is_paused(queue):
            return
        runtime, job_id = self.runtime, str(message.message_id)
        store = runtime.store
        count = deferrals(message) + 1
        delay = pause_delay(count, random.random())
        try:
            self.gate.publish_again(broker, store, message, delay)
        except Exception:  # the job stays PENDING: the sweeper publishes it again
            logger.warning("job %s: could not publish its deferral; the sweeper will", job_id, exc_info=True)
        if records_deferral(count):
            try:
                store.record_event(job_id, "queue_paused_deferred", worker_id=runtime.worker_id,
                                   reason="this worker process is quiet" if self.queues.quiet()
                                   else f"queue {queue} is paused",
                                   detail={"queue": queue, "delay": round(delay, 3), "deferrals": count})
            except ReliableError:
                logger.warning("job %s: could not record its deferral", job_id, exc_info=True)
        _skip(message, queue)


def _skip(message: Any, queue: str) -> NoReturn:
    message.options["store_results"] = False  # never ran: Results must not store None for it
    raise SkipMessage(f"queue {queue} paused")
