"""A delivery acknowledged once its success has committed, without its thread waiting.

Dramatiq acknowledges a delivery when the hooks after its run have returned: the worker thread
calls `post_process_message` of the consumer thread that received it. A success (every fast-path
one; a durable one that nothing follows, reliable.worker.completion) commits in the process's
group commit (reliable.store.batching), and waiting for that batch cost each worker thread a
wake-up per job. Where `HeldAcks.hold` accepts a delivery, its success is submitted instead
(`StateStore.fast_commit_later`, `succeed_later`) and its acknowledgement held: the consumer
thread's `post_process_message` is wrapped, so the acknowledgement Dramatiq asks for is recorded
as due and, once the success has committed, acknowledged (by the worker thread itself when the
commit came first). The acknowledgements come due on one RabbitMQ consumer go together, in one
hand-off to the consumer's connection thread and one flush (reliable.rabbitmq.acks: Dramatiq's ack
hooks still run for each), sent by the thread that ran the batch's callbacks (the group commit's
flusher or callbacks thread, `together`) once they have all run: that hand-off only queues the
frames for the connection's thread, and fails at once on a closed connection, so a broker cut
delays acknowledgements, never the store's batches. What cannot go that way (an app's own
`post_process_message`; Dramatiq's own one, which retries for as long as the broker connection is
down), and every acknowledgement released outside a batch's callbacks (a settled success), goes
to the process's acknowledging thread, which sends them the same way or leaves them to the
consumer thread's `post_process_message`. Measured (docs/performance.md): one thread woken fewer
per batch. No guarantee moves: a
message is never acknowledged before its job's success is in the store, so a crash before the
commit leaves it to be redelivered, as a crash during a waited commit did.

`hold` accepts only when:
- the worker booted on a Dramatiq version whose `Worker.consumers` was verified
  (`compat.dramatiq_internals.work_queue_readable`: private API, as the work queue's);
- the broker has no Results middleware: a result must not be stored for a success that the store
  then refuses (`store_results`), and that is known only after the commit;
- the worker is not shutting down: from `drain` on (`before_worker_shutdown`) successes are
  waited for again, and `drain` waits for the held ones, whose acknowledgements must reach the
  broker while the consumers still run.

A success its batch did not commit (the store could not be reached, its guard did not match) is
settled by this process's settling thread with the waited path (`fast_committed` in the store's
retry loop, which tells a lost reply from a refusal and records a stale run), then acknowledged.

Held acknowledgements take prefetch slots: RabbitMQ counts a delivery until it is acknowledged,
so with Dramatiq's prefetch (2 x threads) the threads of a busy process would find fewer
messages waiting than without reliable. The consumer of a queue whose actors are all on the fast
path (short jobs, by its contract) prefetches up to one group-commit batch more (`prefetch`:
+min(prefetch, 64)), which is about what its held acknowledgements take; only where
acknowledgements are held and Dramatiq's default prefetch is in force (an app that sets
`dramatiq_queue_prefetch` keeps its own). Other queues keep Dramatiq's prefetch: their jobs may be
long, and extra prefetched deliveries would wait behind them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import dramatiq
from dramatiq import worker as dramatiq_worker
from dramatiq.results import Results

from ..compat.dramatiq_internals import work_queue_readable

if TYPE_CHECKING:
    from ..rabbitmq.acks import Acked

__all__ = ["DRAIN_TIMEOUT", "EXTRA_PREFETCH", "HeldAcks"]

logger = logging.getLogger("reliable.middleware")

#: How long `drain` waits at shutdown for the held acknowledgements (seconds); past it, their
#: messages are requeued when the consumers close, and redelivered.
DRAIN_TIMEOUT = 30.0
#: The most a fast-path queue's consumer prefetches beyond Dramatiq's prefetch: a group-commit
#: batch's bound (reliable.store.batching.GroupCommit.max_batch).
EXTRA_PREFETCH = 64
#: The consumer-thread attribute marking its `post_process_message` wrapped.
_WRAPPED = "reliable_acks_held"


class _Held:
    """One held acknowledgement: its delivery (kept, so that no other delivery can take its id), the
    consumer thread it came from, and Dramatiq's own `post_process_message` once it asked for it."""

    __slots__ = ("consumer", "due", "message")

    def __init__(self, message: Any, consumer: Any) -> None:
        self.message, self.consumer = message, consumer
        self.due: Callable[[Any], None] | None = None


def _dramatiqs_own(post_process: Callable[[Any], None] | None) -> bool:
    """Whether `post_process` is Dramatiq's own ConsumerThread.post_process_message (an app's
    override or wrapper is called as it is, never bypassed)."""
    return getattr(post_process, "__func__", None) is dramatiq_worker.ConsumerThread.post_process_message


class HeldAcks:
    """The acknowledgements held until their successes commit (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._empty = threading.Condition(self._lock)
        self._held: dict[int, _Held] = {}  # id(delivery) -> its acknowledgement, until done
        self._consumers: dict[str, Any] | None = None
        self._fast_queue: Callable[[str], bool] | None = None
        self._stopping = False
        self._pid = os.getpid()
        self._acking: queue.SimpleQueue[_Held] | None = None
        self._stranded: list[_Held] = []  # due, but the acknowledging thread could not start (`_to_acking`)
        self._settling: queue.SimpleQueue[tuple[Any, Callable[[], None]]] | None = None
        #: Deliveries held, those settled by the waited path (a batch did not commit them), and the
        #: hand-offs that acknowledged them (several at a time: reliable.rabbitmq.acks).
        self.held = self.settled = self.handoffs = 0
        self._together: Callable[[Any, list[Any]], Acked] | None = None
        #: In a thread inside `together`: the acknowledgements released there, sent when it ends.
        self._local = threading.local()

    def watch(self, broker: dramatiq.Broker, worker: Any, fast_queue: Callable[[str], bool]) -> None:
        """At worker boot: hold acknowledgements from now on, if `worker` and `broker` allow it.
        `fast_queue(name)`: whether every actor of that queue is on the fast path (`prefetch`)."""
        consumers = getattr(worker, "consumers", None)
        if not work_queue_readable() or not isinstance(consumers, dict):
            return
        if any(isinstance(middleware, Results) for middleware in broker.middleware):
            return
        try:
            from ..rabbitmq.acks import ack_together  # here, not at import: pika only where acks are held
        except ImportError:  # no pika: every acknowledgement through Dramatiq's own path
            self._together = None
        else:
            self._together = ack_together
        with self._lock:  # in this (forked) process: nothing held yet, no thread of ours
            self._consumers, self._stopping, self._pid = consumers, False, os.getpid()
            self._held, self._acking, self._settling, self._stranded = {}, None, None, []
            self._fast_queue = fast_queue

    def prefetch(self, queue_name: str, prefetch: int) -> int:
        """The prefetch of a consumer of `queue_name` whose Dramatiq prefetch is `prefetch` (see the
        module doc): more for a fast-path queue while acknowledgements are held."""
        fast_queue = self._fast_queue
        if not self.enabled or fast_queue is None or dramatiq_worker.QUEUE_PREFETCH or not fast_queue(queue_name):
            return prefetch
        return prefetch + min(prefetch, EXTRA_PREFETCH)

    @property
    def enabled(self) -> bool:
        """Whether `hold` may accept deliveries."""
        return self._consumers is not None and not self._stopping

    def hold(self, message: Any) -> bool:
        """Hold `message`'s acknowledgement until `release`; False: not here (wait for the commit)."""
        consumers = self._consumers
        if consumers is None or self._stopping or self._pid != os.getpid():
            return False
        # Dramatiq acknowledges on the consumer its body names (reliable.consumed).
        consumer = consumers.get(message.queue_name)
        if consumer is None:
            return False
        with self._lock:
            if self._stopping:
                return False
            if not getattr(consumer, _WRAPPED, False):
                original = consumer.post_process_message
                consumer.post_process_message = functools.partial(self._post_process, original)
                setattr(consumer, _WRAPPED, True)
            self._held[id(message)] = _Held(message, consumer)
            self.held += 1
        return True

    def hand_over(self, message: Any, submit: Callable[[Callable[[bool], None]], bool], settle: Callable[[], None],
                  *, committed: Callable[[], None] | None = None) -> bool:
        """Hold `message`'s acknowledgement and `submit` its success, given the callback its batch
        answers: True (committed) runs `committed`, then acknowledges; False has the settling thread
        run `settle` (the waited path), then acknowledges. False, nothing held: not here (`hold`
        refused, or `submit` queued nothing), wait for the success instead."""
        def done(ok: bool) -> None:
            if not ok:
                self.settle(message, settle)
                return
            try:
                if committed is not None:
                    committed()
            finally:
                self.release(message)

        queued = False
        try:  # held and submitted in one try: an interrupt between the two (or inside `hold`) leaves nothing held
            if self.hold(message):
                queued = submit(done)
        finally:
            if not queued:
                self.forget(message)
        return queued

    def forget(self, message: Any) -> None:
        """`message` was not submitted after all: Dramatiq acknowledges it as usual."""
        if id(message) not in self._held:  # held by nobody (refused by `hold`): no lock, no wake-up
            return
        with self._lock:
            held = self._held.get(id(message))
            if held is not None and held.message is message:
                del self._held[id(message)]
            self._empty.notify_all()

    def release(self, message: Any) -> None:
        """`message`'s success committed (or was settled): acknowledge it in the acknowledging
        thread if Dramatiq already asked, else let Dramatiq's own call do it. Any thread."""
        with self._lock:
            held = self._held.get(id(message))
            if held is None or held.message is not message:
                return
            if held.due is None:
                del self._held[id(message)]
                self._empty.notify_all()
                return
            collected: list[_Held] | None = getattr(self._local, "due", None)
            if collected is not None:  # sent when the batch's callbacks have all run (`together`)
                collected.append(held)
                return
            self._to_acking([held])

    def _to_acking(self, due: list[_Held]) -> None:
        """Hand `due` to the acknowledging thread, started if need be (with the lock held). Never
        raises: when the thread cannot start (can't start new thread), they stay held, with those
        left so before, for the next hand-off (else the shutdown's requeue: `drain`)."""
        self._stranded.extend(due)
        if self._acking is None:
            try:
                self._acking = self._start(self._ack_loop, "reliable-acks")
            except Exception:
                logger.exception("the acknowledging thread could not start: %d acknowledgements left held",
                                 len(self._stranded))
                return
        for held in self._stranded:
            self._acking.put(held)
        self._stranded = []

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Around a group-commit batch's callbacks (StoreCore.scope_submitted_callbacks), in the thread
        that runs them: the acknowledgements they release are sent when they have all run, by this
        thread, those of one consumer in one hand-off (`_send_together`: queued for the consumer's
        connection thread, never waiting for the broker); the others (an app's
        `post_process_message`, Dramatiq's own retries while the broker is cut) go to the
        acknowledging thread as before. One thread woken fewer per batch. Never raises."""
        collected: list[_Held] = []
        self._local.due = collected
        try:
            yield
        finally:
            self._local.due = None
            if collected:
                self._ack_here(collected)

    def _ack_here(self, due: list[_Held]) -> None:
        """`together`'s end: send what goes together here, hand the rest to the acknowledging thread."""
        rest: list[_Held] = due
        sent: list[_Held] = []
        try:
            rest, by_consumer = [], self._by_consumer(due)
            for group in by_consumer:
                left = self._send_together(group)
                sent.extend(held for held in group if id(held) not in left)
                rest.extend(held for held in group if id(held) in left)
        except Exception:  # not expected: ack_together logs each delivery's own errors
            logger.exception("acknowledging %d deliveries together failed; left to the acknowledging thread", len(due))
            sent_ids = set(map(id, sent))
            rest = [held for held in due if id(held) not in sent_ids]
        finally:
            with self._lock:
                for held in sent:
                    if self._held.get(id(held.message)) is held:
                        del self._held[id(held.message)]
                if sent:
                    self._empty.notify_all()
                if rest:
                    self._to_acking(rest)

    def settle(self, message: Any, settle: Callable[[], None]) -> None:
        """Run `settle` (the waited path) in the settling thread, then release `message`."""
        with self._lock:
            if self._settling is None:
                self._settling = self._start(self._settle_loop, "reliable-settle-acks")
            self._settling.put((message, settle))

    def drain(self, timeout: float = DRAIN_TIMEOUT, worker: Any = None) -> bool:
        """Hold no more, and wait (up to `timeout` seconds) until every held acknowledgement is
        done; False if some were still held. `worker`'s threads are told to stop first (as
        Dramatiq's `Worker.stop` does next), so that none takes a message meanwhile."""
        if self._held and worker is not None:
            for thread in getattr(worker, "workers", ()):
                thread.stop()
        with self._lock:
            self._stopping = True
            done = self._empty.wait_for(lambda: not self._held, timeout)
            if not done:
                logger.warning("shutdown: %d fast-path successes not acknowledged in %gs; their messages are requeued",
                               len(self._held), timeout)
            return done

    def _post_process(self, original: Callable[[Any], None], message: Any) -> None:
        """The consumer thread's `post_process_message`, as the worker thread calls it."""
        with self._lock:
            held = self._held.get(id(message))
            if held is not None and held.message is message:
                held.due = original
                return
        original(message)

    @staticmethod
    def _start(loop: Callable[[queue.SimpleQueue[Any]], None], name: str) -> queue.SimpleQueue[Any]:
        work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=loop, args=(work,), name=name, daemon=True).start()
        return work

    def _ack_loop(self, acking: queue.SimpleQueue[_Held]) -> None:
        while True:
            due = [acking.get()]
            with contextlib.suppress(queue.Empty):
                while True:  # every acknowledgement come due meanwhile: a batch's go together
                    due.append(acking.get_nowait())
            self._ack_due(due)

    def _ack_due(self, due: list[_Held]) -> None:
        """Acknowledge the `due` deliveries, those of one consumer together, then forget them."""
        try:
            for group in self._by_consumer(due):
                self._ack(group)
        finally:
            with self._lock:
                for held in due:
                    if self._held.get(id(held.message)) is held:
                        del self._held[id(held.message)]
                self._empty.notify_all()

    @staticmethod
    def _by_consumer(due: list[_Held]) -> list[list[_Held]]:
        """`due` by the consumer thread each came from."""
        by_consumer: dict[int, list[_Held]] = {}
        for held in due:
            by_consumer.setdefault(id(held.consumer), []).append(held)
        return list(by_consumer.values())

    def _ack(self, group: list[_Held]) -> None:
        """Acknowledge a consumer's due deliveries in one hand-off (`_send_together`), the others one
        by one with Dramatiq's own or the app's `post_process_message` (Dramatiq's logs its errors,
        retries while the broker is cut)."""
        try:
            left = self._send_together(group)
        except Exception:  # not expected: ack_together logs each delivery's own errors
            logger.exception("acknowledging %d deliveries together failed; one by one instead", len(group))
            left = set(map(id, group))
        for held in group:
            if held.due is not None and id(held) in left:
                try:
                    held.due(held.message)
                except Exception:
                    logger.exception("acknowledgement of %s failed", held.message.message_id)

    def _send_together(self, group: list[_Held]) -> set[int]:
        """Hand a consumer's due deliveries whose `post_process_message` is Dramatiq's own to its
        connection together (`ack_together`: never waits for the broker); the ids of the `_Held`
        left for their own `post_process_message`."""
        together = [held for held in group if self._together is not None and _dramatiqs_own(held.due)]
        left = {id(held) for held in group} - set(map(id, together))
        if together and self._together is not None:
            acked = self._together(group[0].consumer, [held.message for held in together])
            self.handoffs += acked.sent > 0
            by_message = {id(held.message): held for held in together}
            left |= {id(by_message[id(message)]) for message in acked.left}
        return left

    def _settle_loop(self, settling: queue.SimpleQueue[tuple[Any, Callable[[], None]]]) -> None:
        while True:
            message, settle = settling.get()
            try:
                settle()
            except Exception:  # as a waited success that failed: Dramatiq acknowledges it all the same
                logger.exception("fast-path success of %s not settled", message.message_id)
            finally:
                self.settled += 1
                self.release(message)
