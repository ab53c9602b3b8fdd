"""Dramatiq's private parts reliable uses: a delivery's decoded message, the worker's threads, and
the messages waiting in its work queue.

`MessageProxy` (what a broker's consumer yields) keeps the decoded `Message` in `_message` and
answers every field through a Python-level `__getattr__` (about a third of a microsecond a read; a
claim reads a dozen). `Worker.workers` is the list of worker threads `Worker.start` fills
(undocumented). Both read in Dramatiq 2.0.0, 2.0.1, 2.1.0 and 2.2.0 (tags), tested on the
installed 2.2. `Worker.work_queue` (a PriorityQueue of `_WorkQueueItem`: message, priority,
`_queued_time`) and `Worker.consumers` are read on the exact releases of `VERIFIED_WORK_QUEUE` only.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy

from . import release

__all__ = ["DRAMATIQ_VERIFIED", "PROXY_HOLDS_MESSAGE", "VERIFIED_DRAMATIQ", "VERIFIED_WORK_QUEUE",
           "fields_read_directly", "fields_through_proxy", "message_fields", "point_at_queue", "waiting_messages",
           "work_queue_readable", "worker_threads"]

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


#: The Dramatiq releases (exact) whose `Worker.work_queue` and `Worker.consumers` were read and tested.
VERIFIED_WORK_QUEUE = frozenset({"2.2.1"})

# The order of `_WorkQueueItem` (a dataclass with order=True: priority, then _queued_time), as a
# key compared in C rather than its Python-level __lt__ (a third of the cost).
_NEXT_FIRST = attrgetter("priority", "_queued_time")


def work_queue_readable(version: str | None = None) -> bool:
    """Whether the work queue and consumers of this Dramatiq release (default: the installed one) may
    be read. Fallback (False): nothing is seen waiting, and no acknowledgement is held."""
    return (version or dramatiq.__version__) in VERIFIED_WORK_QUEUE


def waiting_messages(worker: Any, *, version: str | None = None) -> list[Any]:
    """The messages waiting in `worker`'s work queue, next first (no item is taken); [] on a
    release not in VERIFIED_WORK_QUEUE, or when `worker` has no work queue."""
    if not work_queue_readable(version):
        return []
    queue = getattr(worker, "work_queue", None)
    if queue is None:
        return []
    with queue.mutex:  # the heap as it is now; a worker thread may take any of them meanwhile
        items = list(queue.queue)
    items.sort(key=_NEXT_FIRST)  # out of the mutex, which every worker thread's get needs
    return [item.message for item in items]
