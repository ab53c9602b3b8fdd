"""The worker's view of the paused queues: a bounded staleness with an injected clock, and the
deferral delays (pure)."""

from __future__ import annotations

from reliable import queue_pauses
from reliable.operators import Operator
from reliable.store import StateStore
from reliable.worker.paused import FIRST_DELAY, MAX_DELAY, PausedQueues, pause_delay

WHO = Operator("oncall", "h", "test")


def test_pause_delay_doubles_from_the_first_up_to_the_most() -> None:
    assert [pause_delay(n, 0.5) for n in (1, 2, 3, 4)] == [FIRST_DELAY, 2 * FIRST_DELAY, 4 * FIRST_DELAY,
                                                           8 * FIRST_DELAY]
    assert pause_delay(40, 0.999) <= MAX_DELAY and pause_delay(40, 0.0) == MAX_DELAY * 0.75
    assert pause_delay(1, 0.0) == 0.75 * FIRST_DELAY and pause_delay(0, 0.5) == FIRST_DELAY


def test_the_paused_set_is_read_again_only_after_the_refresh(store: StateStore) -> None:
    now = [100.0]
    reads: list[int] = []

    def opened() -> StateStore:
        reads.append(1)
        return store

    view = PausedQueues(opened, refresh=2.0, clock=lambda: now[0])
    assert not view.is_paused("billing")
    queue_pauses.pause(store, "billing", reason="outage", identity=WHO)
    now[0] += 1.9
    assert not view.is_paused("billing") and len(reads) == 1  # within the staleness: no read
    now[0] += 0.2
    assert view.is_paused("billing") and len(reads) == 2
    queue_pauses.resume(store, "billing", reason="over", identity=WHO)
    now[0] += 2.0
    assert not view.is_paused("billing")
