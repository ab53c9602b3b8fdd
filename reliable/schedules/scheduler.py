"""The scheduler: fire every due slot of every schedule, then publish the jobs. No leader.

Runs in every worker process's recovery thread and as `reliable schedules run`. Any number may
run at once: a schedule's slots are decided in one transaction under its row, and a slot's row
(primary key: schedule, slot) is inserted once, with its job, whoever inserts it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import dramatiq

from ..errors import StoreError
from ..store import StateStore
from .storage import Fired, decide, due_names

__all__ = ["Scheduler", "Skipped", "TickReport"]

logger = logging.getLogger("reliable.schedules")


@dataclass(frozen=True)
class Skipped:
    """Missed slots a schedule's misfire policy dropped in one decision."""

    schedule: str
    policy: str
    count: int
    first: int | None
    last: int | None


@dataclass(frozen=True)
class TickReport:
    """What one tick did: the slots fired (published unless listed in `unpublished`) and the
    missed slots dropped, per schedule."""

    now: float
    fired: tuple[Fired, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    unpublished: tuple[str, ...] = ()  # job ids the sweeper will publish (the broker refused)


class Scheduler:
    """Fires the due slots of every stored schedule that is not paused.

    Parameters:
      store: the state store the schedules are in.
      broker: where fired jobs are published (None: left PENDING, the recovery loop's sweeper
        publishes them after its `sweep_after`).
      clock: epoch seconds now; default the store's clock (the database's, or the one a test
        injected into the StateStore): a worker whose own clock is wrong decides nothing early or late.
    """

    def __init__(self, store: StateStore, broker: dramatiq.Broker | None, *,
                 clock: Callable[[], float] | None = None) -> None:
        self.store = store
        self.broker = broker
        self.clock = clock or store.now

    def tick(self, now: float | None = None) -> TickReport:
        """Decide every schedule due at `now` (default: the clock), then publish what fired."""
        at = self.clock() if now is None else now
        fired: list[Fired] = []
        skipped: list[Skipped] = []
        for name in due_names(self.store, at):
            try:
                decision = decide(self.store, name, at)
            except StoreError:
                raise
            except Exception:  # e.g. a stored definition this version refuses: the other schedules still fire
                logger.exception("schedule %s: its due slots could not be decided", name)
                continue
            if decision is None:
                continue
            fired.extend(decision.fired)
            plan = decision.plan
            if plan.skipped:
                skipped.append(Skipped(name, decision.policy, plan.skipped, plan.first_skipped, plan.last_skipped))
        unpublished = tuple(f.job_id for f in fired if not self._publish(f))
        return TickReport(at, tuple(fired), tuple(skipped), unpublished)

    def _publish(self, fired: Fired) -> bool:
        if self.broker is None:
            return False
        try:
            self.broker.enqueue(dramatiq.Message(**fired.message))
        except Exception:  # StoreError or the broker's: the job is registered, the sweeper publishes it
            logger.warning("schedule %s: publishing the job %s of slot %d failed; the recovery loop's sweeper "
                           "will", fired.schedule, fired.job_id, fired.slot, exc_info=True)
            return False
        return True

