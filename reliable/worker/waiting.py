"""The messages waiting in this process, and the fast path's batched look at their jobs.

Dramatiq's worker prefetches messages into its `work_queue` (a PriorityQueue of `_WorkQueueItem`)
before a worker thread takes them. When a fast-path delivery needs its look (the job must be
PENDING), `Looks.look` reads in ONE query the state and delivery digest of that job and of the
fast-path messages already waiting (at most `BATCH`), and keeps the answers for the waiting ones:
their own looks are then a dictionary lookup instead of a pool checkout and a round trip.

The rules:
- An answer is used at most once and only while younger than `STALE_AFTER` seconds, counted from
  when its query started; an older one is read again. So a pause or cancel requested at least
  that long before a run is honoured (the later ones lose at the fast path's compare-and-set
  after the run, as before: its outcome is discarded and recorded).
- Each delivery judges the answer with its own digest (`StateStore.looked_status`): a delivery
  that is not its job's message is refused as with the unbatched look.
- Threads due a look of a job whose query is in flight wait for that one query; a failed query
  caches nothing (each thread then reads for itself, through the store retry of the caller).
- Reading `work_queue` is Dramatiq's private API: only on the releases its version gate verified
  (reliable.compat.dramatiq_internals.waiting_messages); on any other (or before the worker
  booted) nothing is waiting and each look reads its job alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..compat.dramatiq_internals import waiting_messages
from .delivery import fields
from .gates import Gate

__all__ = ["BATCH", "STALE_AFTER", "Looks", "Row", "waiting_ids"]

#: The most jobs one look reads (the delivered one and the waiting ones).
BATCH = 64
#: How old, in seconds, a look's answer may be when the delivery it was read for runs.
STALE_AFTER = 1.0

#: A look's answer: (state, registered delivery digest), or None when there is no such job.
Row = tuple[str, str | None] | None

def waiting_ids(worker: Any, wanted: Callable[[Any], bool], *, version: str | None = None) -> list[str]:
    """The job ids of the messages waiting in `worker`'s work queue that `wanted` keeps (given each
    one's decoded message, `delivery.fields`), next first."""
    decoded = map(fields, waiting_messages(worker, version=version))
    return [message.message_id for message in decoded if wanted(message)]


class _Answer:
    __slots__ = ("read_at", "row")

    def __init__(self, row: Row, read_at: float) -> None:
        self.row, self.read_at = row, read_at


class Looks:
    """This process's batched looks (see the module doc).

    `read(job_ids)` reads the rows of those jobs in one query (`StateStore.job_statuses`);
    `waiting()` lists the ids of the fast-path jobs whose messages wait in the process (none
    until `watch` names it: each look then reads its job alone).
    """

    def __init__(self, read: Callable[[Sequence[str]], dict[str, tuple[str, str | None]]],
                 waiting: Callable[[], list[str]] = list, *, stale_after: float = STALE_AFTER,
                 batch: int = BATCH, clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self._waiting, self._clock = read, waiting, clock
        #: Whether `watch` named the waiting jobs (else the caller looks one job at a time, as before).
        self.batched = False
        #: How many looks were answered, by how many reads, and how many of them waited for another
        #: thread's read (logged at the worker's shutdown).
        self.looks = self.reads = self.waits = 0
        self._stale_after, self._batch = stale_after, batch
        self._answers: dict[str, _Answer] = {}
        # Each job in flight to its read's gate, opened when the read ends: it wakes only the
        # threads waiting for one of its jobs, one after the other (reliable.worker.gates).
        self._in_flight: dict[str, Gate] = {}
        self._lock = threading.Lock()

    def watch(self, waiting: Callable[[], list[str]]) -> None:
        """Batch the looks over `waiting()` from now on (at the worker's boot)."""
        self._waiting, self.batched = waiting, True

    def look(self, job_id: str) -> Row:
        """The row of `job_id` as read at most `stale_after` seconds ago (by this call or by the
        look of another delivery that saw it waiting); the answer is used up."""
        while True:
            with self._lock:
                if job_id in self._answers:
                    answer = self._answers.pop(job_id)
                    if self._clock() - answer.read_at <= self._stale_after:
                        self.looks += 1
                        return answer.row
                flight = self._in_flight.get(job_id)
                if flight is None:
                    self.looks += 1
                    ids = self._batch_of(job_id)
                    done = Gate()
                    for one in ids:
                        self._in_flight[one] = done
                    self.reads += 1
                    break
                self.waits += 1
            flight.wait()  # until the read ends
        started = self._clock()
        rows: dict[str, tuple[str, str | None]] | None = None
        try:
            rows = self._read(ids)
        finally:
            with self._lock:
                for one in ids:
                    del self._in_flight[one]
                if rows is not None:
                    self._forget_stale()
                    for other in ids[1:]:
                        self._answers[other] = _Answer(rows.get(other), started)
            done.open()
        return rows.get(job_id)

    def _batch_of(self, job_id: str) -> list[str]:
        """`job_id`, then the waiting jobs neither answered freshly nor in flight (under the lock)."""
        ids, now = [job_id], self._clock()
        for other in self._waiting():
            if len(ids) >= self._batch:
                break
            answer = self._answers.get(other)
            if other in self._in_flight or other in ids or (
                    answer is not None and now - answer.read_at <= self._stale_after):
                continue
            ids.append(other)
        return ids

    def _forget_stale(self) -> None:
        """Drop the answers too old to be used (their messages left without a look: skipped,
        deferred, requeued at shutdown), so the cache stays bounded."""
        now = self._clock()
        for job_id in [j for j, a in self._answers.items() if now - a.read_at > self._stale_after]:
            del self._answers[job_id]
