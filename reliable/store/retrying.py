"""Waiting out a store that cannot be reached: the one retry loop every worker write uses."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import StoreNotMigrated, StoreUnavailable

__all__ = ["retry_while_unavailable"]

logger = logging.getLogger("reliable.store")

T = TypeVar("T")

#: The first wait after a failed attempt; each next wait doubles, up to the caller's max_delay.
FIRST_DELAY = 0.25


def retry_while_unavailable(call: Callable[[], T], *, what: str, max_delay: float, note: str = "",
                            sleep: Callable[[float], None] = time.sleep) -> T:
    """Run `call()`; while the store is unreachable (or not migrated yet), wait and run it again.

    Never gives up on its own: a worker's write waits for the store rather than turning an outage
    into a failed attempt. What bounds it is the lease: the heartbeat keeps renewing it once the
    store answers, and interrupts the thread if the store says the lease is gone. `max_delay`
    caps the wait between tries, so the write lands soon after the store comes back. `note` is
    added to each warning (e.g. that the message stays unacknowledged meanwhile).
    """
    delay = FIRST_DELAY
    while True:
        try:
            return call()
        except (StoreUnavailable, StoreNotMigrated) as exc:
            # An unmigrated store is as unusable as an unreachable one: acting without it (failing
            # the attempt, acking messages) would lose work instead of waiting for the operator.
            logger.warning("%s: store unavailable, retrying in %.2fs%s: %s", what, delay, note, exc)
            sleep(delay)
            delay = min(delay * 2, max_delay)
