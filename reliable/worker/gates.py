"""A gate: something in flight (a batched look's read, a claim ahead's write) that other threads wait for."""

from __future__ import annotations

import threading

__all__ = ["Gate"]


class Gate:
    """Closed from its creation until `open()`; a thread that `wait`s passes once it is open.

    A held lock handed on: each waiting thread takes it and releases it for the next one, so the
    end of the work wakes its waiters one after the other, with no condition and no herd onto one
    lock as an Event's `set` would (its Condition, its waiter locks, notify_all)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def open(self) -> None:
        """The work is done: let the waiting threads through (once only)."""
        self._lock.release()

    def wait(self) -> None:
        """Block until the gate is open."""
        with self._lock:
            pass
