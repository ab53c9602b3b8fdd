"""send_timeout over the broker's part of a send: the publish and its confirmation.

A send is Dramatiq's `broker.enqueue`: reliable's `before_enqueue` registers the job, then the
broker publishes (and, with `confirm_delivery=True`, waits for RabbitMQ's confirmation), then
`after_enqueue` runs. On a silent network pika waits in its own loop for as long as its heartbeat
allows (minutes). So `begin` (in `before_enqueue`, before the registration) fixes the send's
deadline, `send_timeout` seconds from its start, and `arm` (after it) arms the sending thread's
connection with what is left: if the publish is still waiting at the deadline, its socket is shut
down, pika raises a connection error, Dramatiq's retry calls `before_enqueue` again and `arm` raises
SendTimedOut instead of letting it open a new connection. `end` (`after_enqueue`) disarms.

A publish without confirmations returns once the bytes are in the socket's buffer; on a silent
network they are lost with the connection, and the sweeper publishes the registered job again.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import dramatiq

from ..compat.pika_internals import publishing_socket
from ..deadlines import Watchdog
from ..errors import SendTimedOut
from ..options import SEND_TIMEOUT
from .context import in_job_run

__all__ = ["PublishDeadlines"]


class _Sending(threading.local):
    """The send in progress on this thread: its message id, its deadline and its timeout."""

    message_id: str | None = None
    until: float = 0.0
    timeout: float = 0.0


class PublishDeadlines:
    """The deadlines of this process's sends on the broker's side (see the module doc)."""

    def __init__(self, default_timeout: float) -> None:
        self._default = default_timeout
        self._sending = _Sending()
        self._watchdog = Watchdog()

    def begin(self, message: dramatiq.Message[Any]) -> None:
        """Fix the send's deadline at its first `before_enqueue` (a retry of the same publish keeps it).

        Called before the registration reads (and removes) the message's own send_timeout. Inside
        a job's run the registration waits for the store as the job's writes do: the publish gets
        its own send_timeout from `arm` on.
        """
        if self._sending.message_id == message.message_id or in_job_run():
            return
        self._start(message)

    def _start(self, message: dramatiq.Message[Any]) -> None:
        sending = self._sending
        self._watchdog.disarm(threading.get_ident())  # a send that ended without after_enqueue (it raised)
        given = message.options.get(SEND_TIMEOUT)
        timeout = given if isinstance(given, int | float) and not isinstance(given, bool) and given > 0 \
            else self._default
        sending.message_id, sending.timeout = message.message_id, float(timeout)
        sending.until = time.monotonic() + sending.timeout

    def arm(self, broker: dramatiq.Broker, message: dramatiq.Message[Any]) -> None:
        """Bound the publish about to start on this thread by what is left of the send's time;
        SendTimedOut if nothing is (a publish cut at the deadline, retried by Dramatiq)."""
        sending = self._sending
        if sending.message_id != message.message_id:
            self._start(message)
        if time.monotonic() >= sending.until:
            timeout, sending.message_id = sending.timeout, None
            raise SendTimedOut(
                f"send {message.message_id} (actor {message.actor_name}): RabbitMQ did not take the message within "
                f"the send_timeout of {timeout:g}s (a silent network?); a tracked job is registered and the "
                "sweeper publishes it (sending the same message again is safe)")
        sock = publishing_socket(broker)
        if sock is not None:
            key = threading.get_ident()
            self._watchdog.arm(key, sending.until, lambda: _shutdown(sock))

    def end(self, message: dramatiq.Message[Any]) -> None:
        """The publish of `message` went through in time: disarm and forget its deadline."""
        self._watchdog.disarm(threading.get_ident())
        if self._sending.message_id == message.message_id:
            self._sending.message_id = None


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # closed meanwhile: nothing to cut
        sock.shutdown(socket.SHUT_RDWR)
