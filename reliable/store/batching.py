"""Group commit on PostgreSQL: the single writes of all a process's threads, as one statement.

One mechanism, two users: the worker's writes (claims and finishes, `JobWrite`s executed by
`write_jobs`, below) and the producer's sends (`SqlRunner.registrations`: each send's job row,
registered with its `enqueued` event by `register_jobs`, reliable/store/registration.py).
`GroupCommit` is generic over what it batches (anything naming its job: a batch holds a job once)
and the two callables that execute a batch and a single one; everything below holds for both. A
waiting write may bound its wait (`write(..., timeout)`, a send's send_timeout): past it the write
leaves the queue with StoreUnavailable, or, if it is in the batch under way, is answered to nobody
(it may commit: as a lost reply, the sweeper publishes such a job, docs/performance.md "Producer").

A worker thread that claims or finishes a job waits for a round trip and a commit (an fsync). With
`group_commit`, the writes pending in the process at that moment go as ONE statement (`write_jobs`,
derived from `write_job`): one round trip and one commit for the batch. Each write keeps its own
guard, so a refused row (a stale lease, say) returns nothing for that write and never fails the
others, and each thread gets its own row's outcome, exactly as from a single write: durability and
fencing are unchanged.

Leader and followers: a thread whose write finds no batch under way runs the batch itself (it
leads: takes the pending writes, its own first, executes them, answers the others); a write
arriving meanwhile waits in the queue, so batches grow with the load. When its own write is
answered the leader hands the lead to the oldest waiting write's thread (waking that one thread,
whose write heads the next batch) or, with nothing waiting, leaves it free. A lone thread thus
writes without any thread hand-off, and a follower is woken once (by its answer or by the lead).
Only writes nobody waits on (`submit`, below) bring in a thread that exists to run batches.

The batch takes no lock before its UPDATE (a FOR UPDATE of its rows first wrote a lock record per
row, one WAL record in ten, and cost about 6% of the server's CPU per write): the UPDATE locks
each row as it writes it, in the order of `p`, the batch's rows sorted by job_id, which drives
the join. Two processes' batches over the same jobs (a duplicate delivery claimed twice at once)
so lock them in the same order and wait for each other without a cycle.

A job appears once per statement (a second write of it waits for the next batch); `max_batch`
bounds a statement. A batch that fails for anything but a lost connection is retried row by row,
so one bad write fails alone. That includes a deadlock with another writer (the heartbeat's `renew`
locks its rows in no set order; a plan that drove the UPDATE from the table would lock them in
their physical order), which faults.RULES names an outage for a single write's retry loop:
PostgreSQL fails one statement of the cycle, and its batch is written row by row, each write with
the result it would have had alone. A lost connection fails every write of the batch with
StoreUnavailable: each caller's own retry loop handles it as it would a single write (a lost reply
is recognised by its attempt id). A leader interrupted mid-batch (an asynchronous exception in its
thread: a time limit, a lost lease, KeyboardInterrupt) raises it in its own thread only: the
writes of its batch not yet answered go back to the head of the queue for the next leader, which
runs them again; one that had committed finds its guard refused, as a retry after a lost reply
does. A thread that stops waiting on an exception leaves the queue and, if it was handed the lead,
passes it on: no write is left waiting for an answer nobody will give.

A write may also be submitted without a waiting thread (`submit`: a success whose delivery is
acknowledged only once it has committed, reliable.worker.acks): its answer goes to a callback.
Such a write keeps its thread from one wake-up (about 14 us of CPU here per wake-up, more when the
woken threads then contend for the GIL). It is never left without a leader: a leader that steps
down with only such writes left hands the lead to the process's flusher thread (started on first
need), which runs batches until the queue is empty, answering any waiting write that joined
meanwhile; the next write after that leads again itself. A callback runs exactly once, and never
in a thread an asynchronous exception may reach (a worker thread leading a batch: a time limit, a
shutdown): the flusher runs those of its own batches, a callbacks thread the others'. One that
an interrupted leader answered but had not yet handed over is handed over by `_step_down`.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import fields
from typing import Any, Generic, Protocol, TypeVar

from ..errors import StoreUnavailable
from .faults import rolled_back
from .writes import RULE_FIELDS, JobWrite

__all__ = ["Answered", "GroupCommit", "Keyed", "WriteResult", "batch_rows", "batch_write_sql"]

logger = logging.getLogger("reliable.store")

WriteResult = tuple[dict[str, Any], dict[str, Any]] | None


class Keyed(Protocol):
    """What a group commit batches: anything naming its job (a batch holds a job once)."""

    @property
    def job_id(self) -> str:
        """The job the write is about."""


W = TypeVar("W", bound=Keyed)
R = TypeVar("R")
#: What a submitted write's callback is given: its result, or the error that failed it.
Answered = Callable[[R | None, "BaseException | None"], None]
_CAST_PARAM = re.compile(r"%\((\w+)\)s::([a-z0-9]+(?:\[\])?)")


def _once(sql: str, old: str, new: str) -> str:
    if sql.count(old) != 1:
        raise ValueError(f"write_job no longer has exactly one {old!r}: update batch_write_sql")
    return sql.replace(old, new)


def batch_write_sql(single: str) -> str:
    """`write_jobs` from `write_job` (PostgreSQL, normalised to one line): the same statement over
    the rows of a JSON array (`%(rows)s`), one per write, so the transition is written once.

    Every `%(name)s::type` parameter becomes the column `p.name`: a rule's (writes.RULE_FIELDS) from
    the batch's distinct rules (`%(rules)s`, each once, numbered `rule_no`), any other from the
    write's own row, which names its rule (`rule`) and leaves out what is NULL or false (a missing
    boolean reads false; see `batch_rows`). The job rows are found by primary key from `%(ids)s` (an
    array: the planner knows how many, so it never trades the index for a scan of the table, as it
    did when joining the function's rows), locked by the UPDATE itself in `p`'s job_id order (see the
    module doc) and matched to `p` by job_id; the event rows join `p` on job_id (a batch holds a job
    once).
    """
    own: dict[str, str] = {"job_id": "text"}
    ruled: dict[str, str] = {}
    for name, cast in _CAST_PARAM.findall(single):
        if name != "now":
            (ruled if name in RULE_FIELDS else own).setdefault(name, cast)

    def column(match: re.Match[str]) -> str:
        name, cast = match.group(1), match.group(2)
        if name == "now":
            return match.group(0)
        return f"coalesce(p.{name}, false)" if cast == "bool" and name in own else f"p.{name}"

    sql = _CAST_PARAM.sub(column, single)
    write_record = ", ".join([*(f"{name} {cast}" for name, cast in own.items()), "rule int4"])
    rule_record = ", ".join(["rule_no int4", *(f"{name} {cast}" for name, cast in ruled.items())])
    sql = _once(sql, "), j AS (", "), p AS (SELECT x.*, r.* "
                f"FROM jsonb_to_recordset(%(rows)s::jsonb) AS x({write_record}) "
                f"JOIN jsonb_to_recordset(%(rules)s::jsonb) AS r({rule_record}) ON r.rule_no = x.rule "
                "ORDER BY x.job_id), j AS (")
    sql = _once(sql, "FROM t WHERE r.job_id = %(job_id)s",
                "FROM t, p WHERE r.job_id = ANY(%(ids)s::text[]) AND r.job_id = p.job_id")
    sql = _once(sql, "FROM j RETURNING ", "FROM j JOIN p ON p.job_id = j.job_id RETURNING ")
    sql = _once(sql, "FROM j, e", "FROM j JOIN e ON e.job_id = j.job_id")
    if "%(" in re.sub(r"%\((now|rows|rules|ids)\)s", "", sql):
        raise ValueError("write_jobs kept a parameter of write_job: update batch_write_sql")
    return sql


_WRITE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobWrite) if f.name not in RULE_FIELDS)
#: The rule's fields but `sources` (its one list, made a tuple in a rule's key).
_SCALAR_RULE_FIELDS: tuple[str, ...] = tuple(name for name in RULE_FIELDS if name != "sources")


def batch_rows(writes: Sequence[JobWrite]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The JSON rows of `write_jobs`: one per write (its own fields that are neither None nor
    false, and the number of its rule), and the batch's distinct rules, each once."""
    numbers: dict[tuple[Any, ...], int] = {}
    rules: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for write in writes:
        values = write.__dict__  # every field (a frozen dataclass keeps them there): no getattr per field
        sources = values["sources"]
        key = (None if sources is None else tuple(sources), *[values[name] for name in _SCALAR_RULE_FIELDS])
        number = numbers.get(key)
        if number is None:
            number = numbers[key] = len(rules)
            rules.append({"rule_no": number, **{name: values[name] for name in RULE_FIELDS}})
        row: dict[str, Any] = {name: value for name in _WRITE_FIELDS
                               if (value := values[name]) is not None and value is not False}
        row["rule"] = number
        rows.append(row)
    return rows, rules


class _Pending(Generic[W, R]):
    """One write waiting for its batch's answer, or for the lead (see the module doc).

    The wake-up is a bare lock held from the start and released once: by `answer` (the write is
    done) or by `GroupCommit._step_down` (its thread is to lead the next batch). A threading.Event
    per write (its Condition, its waiter lock, notify_all under a lock the caller contends for)
    cost about 7 us.
    """

    __slots__ = ("answered", "boarded", "called", "dispatched", "done", "error", "result", "rider", "riders",
                 "wake", "write")

    def __init__(self, write: W, *, rider: bool = False, done: Answered[R] | None = None) -> None:
        self.write = write
        self.result: R | None = None
        self.error: BaseException | None = None
        self.answered = False
        #: A write no thread waits on (it rides in its owner's batch, `riders`): never handed the lead.
        self.rider = rider
        #: The writes that go in the same batch as this one (`GroupCommit.write_all`), taken with it.
        self.riders: list[_Pending[W, R]] = []
        #: Whether `riders` went into a batch (or were left out of it): once only.
        self.boarded = False
        #: A submitted write's callback (`GroupCommit.submit`): no thread waits on it, and it is never handed the lead.
        self.done = done
        #: Its callback handed over to run (`GroupCommit._dispatch`), and run: each once.
        self.dispatched = self.called = False
        self.wake = threading.Lock()
        self.wake.acquire()

    def answer(self, result: R | None = None, error: BaseException | None = None) -> None:
        """Hand the write's result (or error) to its caller and wake it (a submitted write's
        callback is run by `GroupCommit._dispatch`)."""
        self.result, self.error, self.answered = result, error, True
        self.wake.release()

    def call(self) -> None:
        """Run a submitted write's callback with its answer, once (never raises)."""
        if self.called or self.done is None:
            return
        self.called = True
        try:
            self.done(self.result, self.error)
        except Exception:
            logger.exception("group commit: the callback of job %s's write failed", self.write.job_id)

    def woken(self) -> None:
        """Make sure an answered write's thread is woken: `answer` may have been interrupted
        between recording the answer and the wake-up (a second release is harmless: the thread
        that acquired the lock never waits on it again)."""
        if self.answered and self.wake.locked():
            self.wake.release()

    def wait(self, timeout: float | None = None) -> bool | None:
        """Block until answered (True) or handed the lead (False); None when `timeout` seconds passed
        first (see `GroupCommit._give_up`)."""
        if not self.wake.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return None
        return self.answered

    def outcome(self) -> R | None:
        """The answered result, or the error raised."""
        if self.error is not None:
            raise self.error
        return self.result


#: `GroupCommit._leader` while the flusher thread leads.
_FLUSHER = object()


class GroupCommit(Generic[W, R]):
    """The process's group commit: `write()` blocks until the batch holding the write has committed;
    `submit()` queues a write whose answer goes to a callback.

    `write_many` executes a batch (one statement, one commit); `write_one` a single write (a batch
    of one, and the row-by-row fallback). `max_batch` bounds a statement's size. The batches run in
    the writing threads themselves (leader and followers, see the module doc). Fork-safe: a child
    process starts with an empty queue and no leader.
    """

    def __init__(self, write_many: Callable[[Sequence[W]], list[R]], write_one: Callable[[W], R], *,
                 max_batch: int = 64) -> None:
        self._write_many = write_many
        self._write_one = write_one
        self.max_batch = max_batch
        self._pid = -1
        self.batches = 0
        self.writes = 0
        #: Opened around each batch's callbacks by the thread that runs them (the flusher, the
        #: callbacks thread), once for all of them: what they hand on goes on together when they
        #: have run (reliable.worker.acks acknowledges a batch's deliveries there). None: nothing.
        #: It must not raise.
        self.callbacks_scope: Callable[[], AbstractContextManager[object]] | None = None
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._queue: list[_Pending[W, R]] = []
        # The write whose thread leads, or _FLUSHER (the flusher thread leads); None: no batch under way.
        self._leader: object | None = None
        self._batch: list[_Pending[W, R]] = []  # the leader's batch in flight
        self._flusher: threading.Thread | None = None
        self._flusher_wake = threading.Lock()  # released to hand the flusher the lead
        self._flusher_wake.acquire()
        self._callbacks: queue.SimpleQueue[list[_Pending[W, R]]] | None = None  # run by the callbacks thread

    def write(self, write: W, timeout: float | None = None) -> R | None:
        """Execute `write` in the next batch; its result (None: the guard did not match).

        `timeout` (seconds; None: no bound) bounds the wait behind other threads' batches (a send's
        send_timeout): past it StoreUnavailable, and the write leaves the queue; a write already in
        the batch under way may still commit (the caller cannot know: as a lost reply)."""
        pending: _Pending[W, R] = _Pending(write)
        self._wait_for(pending, timeout)
        return pending.outcome()

    def submit(self, write: W, done: Answered[R]) -> None:
        """Queue `write` for the next batch without waiting for it: `done(result, error)` is called
        once it is answered, in the flusher thread or the callbacks thread, never in this one (which
        leads the batch itself when none is under way, as a lone write does). See the module doc."""
        pending: _Pending[W, R] = _Pending(write, rider=True, done=done)
        if self._pid != os.getpid():
            self._reset()
        try:
            with self._lock:
                self._queue.append(pending)
                if self._leader is not None:
                    return
                self._leader = pending
            self._lead(pending)
        except BaseException:
            self._step_down(pending)
            raise

    def write_all(self, writes: Sequence[W]) -> list[R | BaseException | None]:
        """Execute `writes` in one batch: each one's result, or the error that failed it (or left it
        out: a job already in the batch, a full batch), in order. One waiting thread for several
        writes: a worker's claim with the claims it takes ahead (reliable.worker.ahead)."""
        own: _Pending[W, R] = _Pending(writes[0])
        riders = own.riders = [_Pending(write, rider=True) for write in writes[1:]]
        self._wait_for(own)
        in_flight: list[_Pending[W, R]] = []
        with self._lock:
            for rider in riders:
                if rider.answered:
                    continue
                if rider in self._batch:  # in the batch under way: its answer comes with the batch's
                    in_flight.append(rider)
                    continue
                # Put back by an interrupted leader, or never boarded: not written later, with nobody to hold it.
                if rider in self._queue:
                    self._queue.remove(rider)
                rider.answer(error=StoreUnavailable("not written: its batch was interrupted"))
        for rider in in_flight:
            rider.wake.acquire()
        return [pending.error if pending.error is not None else pending.result for pending in [own, *riders]]

    def _wait_for(self, pending: _Pending[W, R], timeout: float | None = None) -> None:
        """Queue `pending` and lead, or wait for its answer or for the lead, until it is answered
        (StoreUnavailable when `timeout` passes first, see `write`)."""
        if self._pid != os.getpid():
            self._reset()
        try:
            with self._lock:
                self._queue.append(pending)
                lead = self._leader is None
                if lead:
                    self._leader = pending
            if not lead:
                woken = pending.wait(timeout)
                if woken is None:
                    woken = self._give_up(pending, timeout)
                lead = not woken
            if lead:
                self._lead(pending)
        except BaseException:
            self._step_down(pending)
            raise

    def _give_up(self, pending: _Pending[W, R], timeout: float | None) -> bool:
        """A follower's wait timed out: True if it was answered meanwhile, False if it was handed
        the lead (it leads: its own write goes first), else out of the queue and StoreUnavailable."""
        with self._lock:
            if pending.answered or self._leader is pending:
                pending.wake.acquire()  # released by the answer or the hand-over: taken, as a wait would
                return pending.answered
            if pending in self._queue:
                self._queue.remove(pending)
                fate = "nothing was written"
            else:
                # Its thread leaves: should the leader be interrupted and put the write back, it must
                # never be handed the lead (nobody would take it: every later write would wait for ever).
                pending.rider = True
                fate = "it is in the batch under way and may still commit"
        raise StoreUnavailable(f"job {pending.write.job_id}: no answer from the group commit within {timeout:g}s "
                               f"({fate})")

    def _lead(self, own: _Pending[W, R]) -> None:
        """Run batches until `own` is answered, then hand the lead over."""
        while not own.answered:
            batch = self._take()
            if not batch:
                raise RuntimeError("group commit: the leading write is not queued")
            self._flush(batch)
            self._batch = []  # every write of it answered
        self._step_down(own)

    def _step_down(self, pending: _Pending[W, R]) -> None:
        """`pending`'s thread waits no more (answered, or an exception): out of the queue; if it
        leads, the unanswered writes of its batch (an interrupted leader) go back to the head of the
        queue and the lead to the oldest waiting write's thread (or to nobody: the next write)."""
        with self._lock:
            if self._leader is None and pending.done is not None and pending in self._queue:
                self._leader = pending  # queued, then interrupted before it could lead: the lead goes on below
            if self._leader is pending:
                for taken in self._batch:
                    taken.woken()
                    if taken.answered and taken.done is not None and not taken.dispatched:
                        self._dispatch(taken)  # answered, its callback not yet handed over
                self._queue[:0] = [taken for taken in self._batch if not taken.answered]
                self._batch = []
            if pending in self._queue and pending.done is None:  # a submitted write stays: it is still to be written
                self._queue.remove(pending)
            pending.boarded = True  # riders not taken yet never will be
            for rider in pending.riders:
                # One an interrupted leader put back is not written later, with nobody to hold it.
                if rider in self._queue and not rider.answered:
                    self._queue.remove(rider)
                    rider.answer(error=StoreUnavailable("not written: its batch was interrupted"))
            if self._leader is not pending:
                return
            successor = self._leader = next((waiting for waiting in self._queue if not waiting.rider), None)
            if successor is None:
                # Riders alone (an interrupted batch's): nobody will lead for them. Submitted writes
                # are led by the flusher thread.
                submitted = [waiting for waiting in self._queue if waiting.done is not None]
                for rider in self._queue:
                    if rider.done is None:
                        rider.answer(error=StoreUnavailable("not written: its batch was interrupted"))
                self._queue = submitted
                if submitted and self._start_flusher():
                    self._leader = _FLUSHER
                    self._flusher_wake.release()
                elif submitted:  # no thread to lead them: answered as a lost connection would be
                    self._queue = []
                    for waiting in submitted:
                        waiting.answer(error=StoreUnavailable("not written: no thread could lead its batch"))
                        self._dispatch(waiting)
            else:
                # Released here, not through a Python call: no interrupt can land between the
                # lead being given and its thread being woken.
                successor.wake.release()

    def _start_flusher(self) -> bool:
        """Start this process's flusher thread, once (called with the lock held); False if it
        cannot be started."""
        if self._flusher is None:
            flusher = threading.Thread(target=self._flush_submitted, name="reliable-group-commit", daemon=True)
            try:
                flusher.start()
            except RuntimeError:  # can't start new thread
                logger.exception("group commit: the flusher thread could not start")
                return False
            self._flusher = flusher
        return True

    def _flush_submitted(self) -> None:
        """The flusher thread: handed the lead, run batches until the queue is empty, then leave it free."""
        while True:
            self._flusher_wake.acquire()
            while True:
                with self._lock:
                    if not self._queue:
                        self._leader = None
                        break
                batch = self._take()
                try:
                    if batch:  # empty when its one write left the queue meanwhile (an interrupted follower)
                        self._flush(batch)
                except Exception:  # not expected (`_flush` answers every write): the flusher leads on
                    logger.exception("group commit: the flusher's batch of %d writes failed", len(batch))
                finally:
                    self._batch = []

    def _dispatch(self, pending: _Pending[W, R]) -> None:
        """Run an answered submitted write's callback (`_dispatch_all`)."""
        self._dispatch_all([pending])

    def _dispatch_all(self, answered: list[_Pending[W, R]]) -> None:
        """Run answered submitted writes' callbacks: here in the flusher thread, else in the
        callbacks thread (see the module doc), handed over together: one wake-up of that thread
        per batch, not one per write."""
        if threading.current_thread() is self._flusher:
            for pending in answered:
                pending.dispatched = True
            self._call_all(answered)
            return
        if self._callbacks is None:
            self._callbacks = queue.SimpleQueue()
            threading.Thread(target=self._run_callbacks, args=(self._callbacks,),
                             name="reliable-group-commit-callbacks", daemon=True).start()
        self._callbacks.put(answered)
        for pending in answered:
            pending.dispatched = True

    def _run_callbacks(self, callbacks: queue.SimpleQueue[list[_Pending[W, R]]]) -> None:
        while True:
            self._call_all(callbacks.get())

    def _call_all(self, answered: list[_Pending[W, R]]) -> None:
        """Run the callbacks of `answered` in `callbacks_scope`. Never raises (the flusher, or the
        callbacks thread, would die with it: the lead or every later callback lost): a scope that
        raises anyway is logged, and the callbacks it kept from running run without it."""
        try:
            with self._scope():
                for pending in answered:
                    pending.call()
        except Exception:
            logger.exception("group commit: the scope of %d callbacks failed", len(answered))
            for pending in answered:
                pending.call()  # once each: those already run are not run again

    def _scope(self) -> AbstractContextManager[object]:
        """`callbacks_scope`'s, or one that does nothing."""
        scope = self.callbacks_scope
        return nullcontext() if scope is None else scope()

    def _take(self) -> list[_Pending[W, R]]:
        with self._lock:
            batch: list[_Pending[W, R]] = []
            seen: set[str] = set()
            rest: list[_Pending[W, R]] = []
            for pending in self._queue:
                # A job appears once per statement; a second write of it waits for the next batch.
                if len(batch) < self.max_batch and pending.write.job_id not in seen:
                    seen.add(pending.write.job_id)
                    batch.append(pending)
                    if not pending.boarded:  # riders in this batch or in none: nobody waits for a later one
                        pending.boarded = True
                        for rider in pending.riders:
                            if len(batch) < self.max_batch and rider.write.job_id not in seen:
                                seen.add(rider.write.job_id)
                                batch.append(rider)
                            else:
                                rider.answer(error=StoreUnavailable("left out of its batch (full, or its job in it)"))
                else:
                    rest.append(pending)
            self._queue = rest
            self._batch = batch  # kept where an interrupted leader's `_step_down` finds it
            return batch

    def _flush(self, batch: list[_Pending[W, R]]) -> None:
        """Execute `batch` and answer every write of it (an interrupt propagates, see `_step_down`)."""
        self.batches += 1
        self.writes += len(batch)
        try:
            if len(batch) == 1:
                self._one_by_one(batch)
                return
            try:
                results = self._write_many([p.write for p in batch])
            except StoreUnavailable as exc:
                if rolled_back(exc):  # a deadlock with another writer (see the module doc)
                    self._one_by_one(batch)
                    return
                for pending in batch:
                    pending.answer(error=exc)
                return
            except Exception:
                self._one_by_one(batch)
                return
            for pending, result in zip(batch, results, strict=True):
                pending.answer(result)
        except Exception as exc:  # e.g. results that do not match the batch: never leave a caller waiting
            for pending in batch:
                pending.woken()
                if not pending.answered:
                    pending.answer(error=exc)
        finally:
            answered = [pending for pending in batch
                        if pending.done is not None and pending.answered and not pending.dispatched]
            if answered:
                self._dispatch_all(answered)

    def _one_by_one(self, batch: list[_Pending[W, R]]) -> None:
        for pending in batch:
            try:
                result = self._write_one(pending.write)
            except Exception as exc:
                pending.answer(error=exc)
            else:
                pending.answer(result)
