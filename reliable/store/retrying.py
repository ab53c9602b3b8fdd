"""Waiting out a store outage: the one retry loop every write that may wait goes through.

What may be waited out is decided by `faults.classify` (an outage: yes; a configuration error:
only by a worker that holds a message, see `hold`; anything else: never).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import SendTimedOut, StoreError
from .faults import Fault, classify

__all__ = ["retry_while_unavailable"]

logger = logging.getLogger("reliable.store")

T = TypeVar("T")

#: The first wait after a failed attempt; each next wait doubles, up to the caller's max_delay.
FIRST_DELAY = 0.25


def retry_while_unavailable(call: Callable[[], T], *, what: str, max_delay: float, note: str = "",
                            timeout: float | None = None, hold: bool = False,
                            sleep: Callable[[float], None] = time.sleep,
                            clock: Callable[[], float] = time.monotonic) -> T:
    """Run `call()`; while the store has an outage, wait and run it again.

    `timeout` None: never gives up on an outage. A worker's write waits for the store rather than
    turning an outage into a failed attempt; what bounds it is the lease (the heartbeat keeps
    renewing it once the store answers, and interrupts the thread if the store says the lease is
    gone). `timeout` given (a producer's send): the last try runs `timeout` seconds after the first
    (plus the time a try itself takes to fail: PostgreSQL's connect timeout is 5 s), then
    SendTimedOut (a StoreUnavailable) saying how long it waited and why.

    A configuration error (StoreMisconfigured, StoreNotMigrated) is raised at once, unless `hold`:
    a worker holding a message logs it as an error with its fix and waits, as for an outage (acting
    without the store, failing the attempt or acking the message, would lose work). Any other
    error is raised at once.

    `max_delay` caps the wait between tries, so the call lands soon after the store comes back.
    `note` is added to each warning (e.g. that the message stays unacknowledged meanwhile).
    """
    delay = FIRST_DELAY
    deadline = None if timeout is None else clock() + timeout
    while True:
        try:
            return call()
        except StoreError as exc:
            fault = classify(exc).fault
            if fault is Fault.OTHER or (fault is Fault.CONFIGURATION and not hold):
                raise
            pause = delay
            if deadline is not None:
                if (remaining := deadline - clock()) <= 0:
                    raise SendTimedOut(f"{what}: the store stayed unreachable for the send_timeout of {timeout:g}s "
                                       f"(nothing was sent): {exc}") from exc
                pause = min(delay, remaining)  # the last try runs at the deadline
            if fault is Fault.CONFIGURATION:
                logger.error("%s: the store is misconfigured, retrying in %.2fs%s: %s", what, pause, note, exc)
            else:
                logger.warning("%s: store unavailable, retrying in %.2fs%s: %s", what, pause, note, exc)
            sleep(pause)
            delay = min(delay * 2, max_delay)
