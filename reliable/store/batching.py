"""Group commit on PostgreSQL: the single writes of all a process's threads, as one statement.

A worker thread that claims or finishes a job waits for a round trip and a commit (an fsync). With
`group_commit`, its `JobWrite` goes to one flusher thread per process instead, which sends every
write pending at that moment as ONE statement (`write_jobs`, derived from `write_job`): one round
trip and one commit for the batch. Each write keeps its own guard, so a refused row (a stale
lease, say) returns nothing for that write and never fails the others, and each thread gets its
own row's outcome, exactly as from a single write: durability and fencing are unchanged. While
one batch is in flight the next one gathers, so batches grow with the load and a lone thread pays
only a thread hand-off.

The batch takes no lock before its UPDATE (a FOR UPDATE of its rows first wrote a lock record per
row, one WAL record in ten, and cost about 6% of the server's CPU per write): the UPDATE locks
each row as it writes it, in the order of `p`, the batch's rows sorted by job_id, which drives
the join. Two processes' batches over the same jobs (a duplicate delivery claimed twice at once)
so lock them in the same order and wait for each other without a cycle.

A batch that fails for anything but a lost connection is retried row by row, so one bad write
fails alone. That includes a deadlock with another writer (the heartbeat's `renew` locks its rows
in no set order; a plan that drove the UPDATE from the table would lock them in their physical
order), which faults.RULES names an outage for a single write's retry loop: PostgreSQL fails one
statement of the cycle, and its batch is written row by row, each write with the result it would
have had alone. A lost connection fails every write of the batch with StoreUnavailable: each
caller's own retry loop handles it as it would a single write (a lost reply is recognised by its
attempt id).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from ..errors import StoreUnavailable
from .faults import rolled_back
from .writes import RULE_FIELDS, JobWrite

__all__ = ["GroupCommit", "WriteResult", "batch_rows", "batch_write_sql"]

WriteResult = tuple[dict[str, Any], dict[str, Any]] | None
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
    sql = _once(sql, "FROM j RETURNING *", "FROM j JOIN p ON p.job_id = j.job_id RETURNING *")
    sql = _once(sql, "FROM j, e", "FROM j JOIN e ON e.job_id = j.job_id")
    if "%(" in re.sub(r"%\((now|rows|rules|ids)\)s", "", sql):
        raise ValueError("write_jobs kept a parameter of write_job: update batch_write_sql")
    return sql


_WRITE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobWrite) if f.name not in RULE_FIELDS)


def batch_rows(writes: Sequence[JobWrite]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The JSON rows of `write_jobs`: one per write (its own fields that are neither None nor
    false, and the number of its rule), and the batch's distinct rules, each once."""
    numbers: dict[tuple[Any, ...], int] = {}
    rules: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for write in writes:
        rule = tuple(getattr(write, name) for name in RULE_FIELDS)
        key = tuple(tuple(v) if isinstance(v, list) else v for v in rule)
        number = numbers.get(key)
        if number is None:
            number = numbers[key] = len(rules)
            rules.append({"rule_no": number, **dict(zip(RULE_FIELDS, rule, strict=True))})
        row: dict[str, Any] = {name: value for name in _WRITE_FIELDS
                               if (value := getattr(write, name)) is not None and value is not False}
        row["rule"] = number
        rows.append(row)
    return rows, rules


class _Pending:
    """One write waiting for its batch's answer (`answer` once, `wait` by its caller).

    The wake-up is a bare lock held until the answer: a threading.Event per write (its Condition,
    its waiter lock, notify_all under a lock the caller contends for) cost about 7 us per write.
    """

    __slots__ = ("_done", "answered", "error", "result", "write")

    def __init__(self, write: JobWrite) -> None:
        self.write = write
        self.result: WriteResult = None
        self.error: BaseException | None = None
        self.answered = False
        self._done = threading.Lock()
        self._done.acquire()

    def answer(self, result: WriteResult = None, error: BaseException | None = None) -> None:
        """Hand the write's result (or error) to its caller and wake it."""
        self.result, self.error, self.answered = result, error, True
        self._done.release()

    def wait(self) -> WriteResult:
        """Block until answered; the result, or the error raised."""
        self._done.acquire()
        if self.error is not None:
            raise self.error
        return self.result


class GroupCommit:
    """The process's flusher: `write()` blocks until the batch holding the write has committed.

    `write_many` executes a batch (one statement, one commit); `write_one` a single write (the
    row-by-row fallback). `max_batch` bounds a statement's size. Fork-safe: a child process starts
    its own flusher on first use.
    """

    def __init__(self, write_many: Callable[[Sequence[JobWrite]], list[WriteResult]],
                 write_one: Callable[[JobWrite], WriteResult], *, max_batch: int = 64) -> None:
        self._write_many = write_many
        self._write_one = write_one
        self.max_batch = max_batch
        self._pid = -1
        self.batches = 0
        self.writes = 0
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._thread: threading.Thread | None = None

    def write(self, write: JobWrite) -> WriteResult:
        """Execute `write` in the next batch; its result (None: the guard did not match)."""
        if self._pid != os.getpid():
            self._reset()
        pending = _Pending(write)
        with self._cond:
            self._queue.append(pending)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._flush_forever, name="reliable-group-commit",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return pending.wait()

    def write_all(self, writes: Sequence[JobWrite]) -> list[WriteResult | BaseException]:
        """Execute `writes` together (the same batch while it has room): each one's result, or the
        error that failed it, in order. One waiting thread for several writes: a worker's claim
        with the claims it takes ahead (reliable.worker.ahead)."""
        if self._pid != os.getpid():
            self._reset()
        pendings = [_Pending(write) for write in writes]
        with self._cond:
            self._queue.extend(pendings)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._flush_forever, name="reliable-group-commit",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        results: list[WriteResult | BaseException] = []
        for pending in pendings:
            try:
                results.append(pending.wait())
            except BaseException as exc:
                results.append(exc)
        return results

    def _take(self) -> list[_Pending]:
        with self._cond:
            while not self._queue:
                self._cond.wait()
            batch: list[_Pending] = []
            seen: set[str] = set()
            rest: list[_Pending] = []
            for pending in self._queue:
                # A job appears once per statement; a second write of it waits for the next batch.
                if len(batch) < self.max_batch and pending.write.job_id not in seen:
                    seen.add(pending.write.job_id)
                    batch.append(pending)
                else:
                    rest.append(pending)
            self._queue = rest
            return batch

    def _flush_forever(self) -> None:
        while True:
            batch = self._take()
            try:
                self._flush(batch)
            except BaseException as exc:  # never leave a caller waiting on a write nobody will answer
                for pending in batch:
                    if not pending.answered:
                        pending.answer(error=exc)
                if not isinstance(exc, Exception):
                    raise

    def _flush(self, batch: list[_Pending]) -> None:
        self.batches += 1
        self.writes += len(batch)
        try:
            results = self._write_many([p.write for p in batch]) if len(batch) > 1 \
                else [self._write_one(batch[0].write)]
        except StoreUnavailable as exc:
            if rolled_back(exc):  # a deadlock with another writer (see the module doc)
                self._one_by_one(batch)
                return
            for pending in batch:
                pending.answer(error=exc)
            return
        except BaseException:
            self._one_by_one(batch)
            return
        for pending, result in zip(batch, results, strict=True):
            pending.answer(result)

    def _one_by_one(self, batch: list[_Pending]) -> None:
        for pending in batch:
            try:
                result = self._write_one(pending.write)
            except BaseException as exc:
                pending.answer(error=exc)
            else:
                pending.answer(result)
