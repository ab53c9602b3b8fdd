"""Dramatiq's private parts reliable uses: a delivery's decoded message, and the worker's threads.

`MessageProxy` (what a broker's consumer yields) keeps the decoded `Message` in `_message` and
answers every field through a Python-level `__getattr__` (about a third of a microsecond a read; a
claim reads a dozen). `Worker.workers` is the list of worker threads `Worker.start` fills
(undocumented). Read in Dramatiq 2.0.0, 2.0.1, 2.1.0 and 2.2.0 (tags), tested on the installed 2.2.
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy

from . import release

__all__ = ["DRAMATIQ_VERIFIED", "PROXY_HOLDS_MESSAGE", "VERIFIED_DRAMATIQ", "fields_read_directly",
           "fields_through_proxy", "message_fields", "point_at_queue", "worker_threads"]

#: The Dramatiq releases whose MessageProxy keeps the message in `_message` and whose Worker keeps
#: its threads in `workers`.
VERIFIED_DRAMATIQ = frozenset({"2.0", "2.1", "2.2"})
#: The installed Dramatiq is one of them.
DRAMATIQ_VERIFIED = release(dramatiq.__version__) in VERIFIED_DRAMATIQ


def _proxy_holds_message() -> bool:
    message: dramatiq.Message[Any] = dramatiq.Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={})
    return vars(MessageProxy(message)).get("_message") is message


#: A proxy's message is read directly: a verified Dramatiq whose proxy was seen holding it.
PROXY_HOLDS_MESSAGE = DRAMATIQ_VERIFIED and _proxy_holds_message()


def fields_read_directly(message: Any) -> Any:
    """The decoded message of a delivery (`message` itself when it is no MessageProxy)."""
    return message._message if isinstance(message, MessageProxy) else message


def fields_through_proxy(message: Any) -> Any:
    """The fallback of `fields_read_directly`: the delivery itself, read through its proxy."""
    return message


#: The decoded message of a delivery, to read its fields: the same objects as through the proxy,
#: read without it (the fallback reads through it). Never to be written through or kept:
#: `point_at_queue` may replace it.
message_fields = fields_read_directly if PROXY_HOLDS_MESSAGE else fields_through_proxy


def point_at_queue(message: Any, queue: str) -> None:
    """Make the delivery `message` name `queue`, so Dramatiq acknowledges or dead-letters it on that
    queue's consumer. Fallback: `queue_name` set on the proxy itself, which Dramatiq's worker reads
    before the proxy's `__getattr__` (the decoded message keeps its own). No MessageProxy: unchanged."""
    if not isinstance(message, MessageProxy):
        return
    if PROXY_HOLDS_MESSAGE:
        message._message = message._message.copy(queue_name=queue)
    else:
        message.queue_name = queue


def worker_threads(worker: dramatiq.Worker) -> list[Any]:
    """The list of `worker`'s threads, filled when it starts (the same list object). Fallback: an
    empty list (a --max-jobs recycle then lets the threads take messages until the stop reaches them,
    and no thread is counted as abandoned)."""
    threads = worker.workers if DRAMATIQ_VERIFIED else None
    return threads if isinstance(threads, list) else []
