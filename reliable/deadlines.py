"""Deadlines that hold on a silent network: a blocked socket read is cut when its call's time is up.

A network path that drops packets without a reset leaves a client waiting on an open socket: no
error ever comes (keepalives and TCP_USER_TIMEOUT end it after tens of seconds at best, and not at
all when something on the path, a proxy or a pooler, still acknowledges the packets). psycopg and
pika wait in C or in their own loops, where neither a Python timeout nor an async exception
reaches them. So a call that must end in time runs `within(seconds)`: the connections it uses
are armed on a `Watchdog`, which shuts the socket down (`shutdown(SHUT_RDWR)`: the waiting read
returns at once with end-of-stream, the driver raises its connection error, the caller's error
handling takes over) if the call still holds it at the deadline. Nothing is closed under the
driver's feet: the connection is only unusable from then on, and the pool or broker replaces it.

`within` nests: an inner bound never extends an outer one (`remaining()` is what is left of the
nearest). A call outside any `within` is not armed at all.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["Watchdog", "cut_socket", "deadline", "remaining", "unbounded", "within"]

# This process's id, kept current by a fork hook (a watchdog's thread is not inherited by a child).
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("reliable_deadline", default=None)


class within:  # lower case: used as the function it was, `with within(seconds) as until:`
    """Run the block with a deadline `seconds` from now (or the enclosing one, if sooner), its `as` target.

    A class rather than a generator context manager: every store call of a worker runs in one
    (`Runtime.with_store_retry`, several per job), and a generator's frame, its wrapper object
    and their `next` calls cost three times as much as these two slotted methods."""

    __slots__ = ("_seconds", "_token")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    def __enter__(self) -> float:
        until = time.monotonic() + self._seconds
        outer = _deadline.get()
        if outer is not None and outer < until:
            until = outer
        self._token = _deadline.set(until)
        return until

    def __exit__(self, *exc: object) -> None:
        _deadline.reset(self._token)


@contextlib.contextmanager
def unbounded() -> Iterator[None]:
    """Run the block outside any deadline: a connection checked out in it is not armed. For a
    connection kept across many calls (the worker's group commit's), which no one call's deadline
    may cut once that call has returned."""
    token = _deadline.set(None)
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline() -> float | None:
    """The current call's deadline (`time.monotonic()` seconds), None outside any `within`."""
    return _deadline.get()


def remaining() -> float | None:
    """Seconds left before the current call's deadline (never negative), None outside any `within`."""
    until = _deadline.get()
    return None if until is None else max(0.0, until - time.monotonic())


def cut_socket(fd: int) -> None:
    """Shut down the socket behind file descriptor `fd` (a duplicate is used, the driver's stays open)."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


class Watchdog:
    """Cuts the connections whose deadline passed while a call still held them.

    `arm(key, until, cut)` registers `cut` (a callable shutting one connection's socket) to run at
    monotonic time `until` unless `disarm(key)` comes first; arming a key again replaces it. One
    daemon thread per process, started on first use (again after a fork), looks every `tick`
    seconds while something is armed and sleeps otherwise. `cut` runs under the lock `disarm`
    takes, so a connection given back in time is never cut. `on_cut(key, late)` is told of each cut.
    """

    def __init__(self, *, tick: float = 0.05, on_cut: Callable[[object, float], None] | None = None) -> None:
        self._armed: dict[object, tuple[float, Callable[[], None]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._tick = tick
        self._on_cut = on_cut
        self._pid = -1

    def arm(self, key: object, until: float, cut: Callable[[], None]) -> None:
        """Cut with `cut()` at `until` unless `key` is disarmed first."""
        with self._lock:
            self._armed[key] = (until, cut)
        if self._pid != _pid:
            self._start()
        # Set only when the thread sleeps (Event.set takes a lock and notifies): the thread clears
        # it under `_lock` when nothing is armed, so after the entry above it is set or sees it.
        if not self._wake.is_set():
            self._wake.set()

    def disarm(self, key: object) -> None:
        """Forget `key` (its call ended in time); nothing if it is not armed."""
        with self._lock:
            self._armed.pop(key, None)

    def armed(self) -> int:
        """How many connections are armed now."""
        with self._lock:
            return len(self._armed)

    def _start(self) -> None:
        with self._lock:
            if self._pid == _pid:
                return
            self._pid = _pid
        threading.Thread(target=self._run, name="reliable-deadlines", daemon=True).start()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(self._tick)
            now = time.monotonic()
            with self._lock:
                due = [(key, until, cut) for key, (until, cut) in self._armed.items() if until <= now]
                for key, _until, cut in due:
                    del self._armed[key]
                    with contextlib.suppress(Exception):  # a connection closed meanwhile: nothing to cut
                        cut()
                if not self._armed:
                    self._wake.clear()
            for key, until, _cut in due:
                if self._on_cut is not None:
                    self._on_cut(key, now - until)
