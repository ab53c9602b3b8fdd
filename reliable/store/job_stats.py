"""Latency and outcome history: aggregates the store keeps, so that p50/p95 and the 1 h / 24 h / 7 d
charts never scan jobs or events.

What is kept (`reliable_job_stats`, migration 0024), per bucket of each resolution, queue and actor:
the attempts that ended, by outcome (`OUTCOMES`: succeeded; failed = FAILED, DEAD or REVIEW;
retried = RETRY_WAIT; other = paused, stopped, cancelled, a lease expired back to PENDING), and two
histograms over the fixed log-scale buckets `EDGES` (1 ms doubling up to 18.6 h, and one above):
  - wait: on a claim, its time minus the job's due time (`scheduled_at`: enqueue, eta, retry_at, or
    the resume/restart/recovery that re-queued it), the metrics' dispatch latency;
  - run: on an attempt's end, its time minus the attempt's `started_at` (a fast-path success has
    no claim before its run: its run and wait are not known and are not counted).
Times are the database clock's (the events' `at`). A percentile is read from the buckets by linear
interpolation inside the bucket it falls in (as PromQL's histogram_quantile): within a factor of two
of the true value, exact at the bucket edges.

Rows are kept per (queue, actor), per queue (actor ALL) and for all queues (queue and actor ALL), so
that a chart reads the all-queues rows only and p50/p95 per queue its queue's rows.

Bounded size: each resolution is kept for its horizon (`RESOLUTIONS`), so the table holds at most
(2 h / 1 min + 25 h / 15 min + 8 d / 1 h + 8 d / 1 day) = 420 rows per (queue, actor), per queue and
for all queues that ran jobs in that time.
`prune_stats` deletes what is older, and what lies before a history prune's cut (`retention.prune`).

Written by `StatsBuffer`, a store listener (in memory, a few microseconds per event, no I/O), and
`write_stats` (one INSERT .. ON CONFLICT DO UPDATE adding the counts, rows in key order so that two
processes never wait on each other in a cycle), which each worker process calls once per flush
(reliable.worker.stats): no statement per job. Counts of the last flush interval are lost with a
process killed by SIGKILL; the jobs and events themselves are not.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ..states import ACTIVE_STATES, ATTEMPT_ENDS, ATTEMPT_ENDS_IF_ACTIVE, ONE_WRITE_RUNS, Event, JobStatus
from .core import StoreCore
from .feature_tables import STAT_BUCKETS, job_stats

__all__ = [
    "ALL",
    "COLUMNS",
    "EDGES",
    "LATENCY_RESOLUTION",
    "OUTCOMES",
    "RESOLUTIONS",
    "WINDOWS",
    "History",
    "Latency",
    "LatencyFigures",
    "StatsBuffer",
    "history",
    "latency",
    "prune_stats",
    "quantile",
    "window_seconds",
    "write_stats",
]

#: The histograms' upper bucket edges in seconds (a value v counts in the first bucket whose edge is
#: >= v; above the last edge, in one more bucket): 1 ms, 2 ms, 4 ms, ... 67,108.864 s (18.6 h).
EDGES: tuple[float, ...] = tuple(0.001 * 2 ** k for k in range(STAT_BUCKETS - 1))
#: The outcome columns, in order.
OUTCOMES: tuple[str, ...] = ("succeeded", "failed", "retried", "other")
_WAIT = tuple(f"w{i:02d}" for i in range(STAT_BUCKETS))
_RUN = tuple(f"r{i:02d}" for i in range(STAT_BUCKETS))
#: Every counted column, in the order of a StatsBuffer row.
COLUMNS: tuple[str, ...] = (*OUTCOMES, "wait_sum", "run_sum", *_WAIT, *_RUN)
_W0, _R0 = COLUMNS.index("w00"), COLUMNS.index("r00")
#: Resolution (seconds) -> how long its rows are kept (seconds).
RESOLUTIONS: Mapping[int, float] = {60: 2 * 3600.0, 900: 25 * 3600.0, 3600: 8 * 86400.0, 86400: 8 * 86400.0}
#: The windows the console and the API offer -> (seconds, the charts' resolution).
WINDOWS: Mapping[str, tuple[float, int]] = {"1h": (3600.0, 60), "24h": (86400.0, 900), "7d": (7 * 86400.0, 3600)}
#: The resolution p50/p95 over a window are read at: its buckets (the current one and those that
#: fit in the window) cover the window and at most one bucket more (1 h: 60 to 75 minutes; 24 h: 24
#: to 25 hours; 7 d: 7 to 8 days), so that thousands of queues read a few rows each.
LATENCY_RESOLUTION: Mapping[str, int] = {"1h": 900, "24h": 3600, "7d": 86400}
#: The `queue` and `actor` of the rows that add up every queue (`ALL`, ALL) or every actor of a
#: queue (queue, ALL): no queue or actor is named the empty string (reliable.queue_pauses.check_queue_name).
ALL = ""

_CLAIM = Event.CLAIM.value
_ENDS = frozenset(ev.value for ev in ATTEMPT_ENDS)
_ENDS_IF_ACTIVE = frozenset(ev.value for ev in ATTEMPT_ENDS_IF_ACTIVE)
_ACTIVE = frozenset(s.value for s in ACTIVE_STATES)
_ONE_WRITE = frozenset(ev.value for ev in ONE_WRITE_RUNS)
_OUTCOME_OF: Mapping[str, int] = {JobStatus.SUCCEEDED.value: 0, JobStatus.FAILED.value: 1, JobStatus.DEAD.value: 1,
                                  JobStatus.REVIEW.value: 1, JobStatus.RETRY_WAIT.value: 2}

Key = tuple[int, str, str]  # (minute, queue, actor)
Row = list[float]


def window_seconds(name: str) -> tuple[float, int]:
    """(seconds, resolution) of a window name of WINDOWS; ValueError naming the known ones."""
    try:
        return WINDOWS[name]
    except KeyError:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, not {name!r}") from None


def _seconds(end: Any, start: Any) -> float | None:
    if end is None or start is None:
        return None
    return max(0.0, float(end) - float(start))


class StatsBuffer:
    """A store listener adding each committed claim and attempt end to this process's counts, by
    minute, queue and actor (see the module doc); `take` hands them over for `write_stats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[Key, Row] = {}

    def _row(self, event: Mapping[str, Any]) -> Row:
        key = (int(float(event["at"]) // 60) * 60, str(event.get("queue") or "unknown"),
               str(event.get("actor") or "unknown"))
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = [0.0] * len(COLUMNS)
        return row

    def __call__(self, event: Mapping[str, Any]) -> None:
        """Count `event` if it is a claim (its wait) or ends an attempt (its outcome and run)."""
        name = event.get("event")
        if event.get("at") is None:
            return
        if name == _CLAIM:
            due = event.get("scheduled_at")
            wait = _seconds(event["at"], due if due is not None else event.get("dispatched_at"))
            if wait is not None:
                with self._lock:
                    row = self._row(event)
                    row[4] += wait
                    row[_W0 + bisect.bisect_left(EDGES, wait)] += 1
        elif name in _ENDS or (name in _ENDS_IF_ACTIVE and event.get("from_status") in _ACTIVE):
            run = None if name in _ONE_WRITE else _seconds(event["at"], event.get("started_at"))
            with self._lock:
                row = self._row(event)
                row[_OUTCOME_OF.get(str(event.get("to_status")), 3)] += 1
                if run is not None:
                    row[5] += run
                    row[_R0 + bisect.bisect_left(EDGES, run)] += 1

    def take(self) -> dict[Key, Row]:
        """The counts so far (emptied)."""
        with self._lock:
            rows, self._rows = self._rows, {}
        return rows

    def put_back(self, rows: Mapping[Key, Row]) -> None:
        """Add counts `take` returned and `write_stats` could not write (kept for the next flush)."""
        with self._lock:
            for key, values in rows.items():
                row = self._rows.setdefault(key, [0.0] * len(COLUMNS))
                for i, value in enumerate(values):
                    row[i] += value


def _by_resolution(rows: Mapping[Key, Row]) -> list[dict[str, Any]]:
    """The table's rows for minute counts `rows`: each added into its bucket of every resolution, for
    its (queue, actor), its queue's total (queue, ALL) and the total of all queues (ALL, ALL)."""
    merged: dict[tuple[int, int, str, str], Row] = {}
    for (minute, queue, actor), values in rows.items():
        for resolution in RESOLUTIONS:
            for level in ((queue, actor), (queue, ALL), (ALL, ALL)):
                key = (resolution, minute // resolution * resolution, *level)
                row = merged.setdefault(key, [0.0] * len(COLUMNS))
                for i, value in enumerate(values):
                    row[i] += value
    return [{"resolution": r, "bucket": b, "queue": q, "actor": a,
             **{name: (value if name.endswith("_sum") else int(value)) for name, value in zip(COLUMNS, row,
                                                                                            strict=True)}}
            for (r, b, q, a), row in sorted(merged.items())]


def _upsert(dialect: str) -> Any:
    """The statement adding one row of counts into the table (built once per dialect: `write_stats`
    executes it for every row at once, so SQLAlchemy compiles it once per process, not one
    statement of a different shape per flush)."""
    statement = _UPSERTS.get(dialect)
    if statement is None:
        insert = pg_insert if dialect == "postgresql" else sqlite_insert
        base = insert(job_stats)
        statement = _UPSERTS[dialect] = base.on_conflict_do_update(
            index_elements=["resolution", "bucket", "queue", "actor"],
            set_={name: job_stats.c[name] + base.excluded[name] for name in COLUMNS})
    return statement


_UPSERTS: dict[str, Any] = {}


def write_stats(store: StoreCore, rows: Mapping[Key, Row]) -> int:
    """Add `rows` (StatsBuffer.take) to the table in one transaction; the table rows written.

    One statement executed for every row (executemany): its form never changes, so it is compiled
    once per process. A multi-row VALUES statement of as many rows as the flush had was compiled
    anew at every flush: about 26 ms of a worker's CPU each time (every heartbeat interval)."""
    values = _by_resolution(rows)
    if not values:
        return 0
    with store.write() as conn:
        conn.execute(_upsert(store.dialect), values)
    return len(values)


def prune_stats(store: StoreCore, *, cut: float | None = None) -> int:
    """Delete the rows past their resolution's horizon, and (`cut`: a history prune's) the buckets
    that ended before `cut`; the rows deleted. Served by the primary key (resolution, bucket, ...)."""
    now = store.now()
    deleted = 0
    with store.write() as conn:
        for resolution, kept in RESOLUTIONS.items():
            old = job_stats.c.bucket < now - kept
            if cut is not None:
                old = or_(old, job_stats.c.bucket + resolution <= cut)
            deleted += conn.execute(delete(job_stats).where(job_stats.c.resolution == resolution, old)).rowcount or 0
    return deleted


def quantile(histogram: Iterable[float], q: float) -> float | None:
    """The `q` quantile (0..1) of a histogram over EDGES, interpolated linearly inside its bucket;
    None when it counts nothing. Above the last edge the answer is the last edge (a lower bound)."""
    counts = list(histogram)
    total = sum(counts)
    if total <= 0:
        return None
    rank, seen = q * total, 0.0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(EDGES):
                return EDGES[-1]
            low = EDGES[i - 1] if i else 0.0
            return low + (EDGES[i] - low) * max(0.0, rank - seen) / n
        seen += n
    return EDGES[-1]


@dataclass(frozen=True)
class Latency:
    """One histogram's summary: how many were counted, p50, p95 and the mean (seconds; None if none)."""

    count: int
    p50: float | None
    p95: float | None
    mean: float | None

    @classmethod
    def of(cls, histogram: list[float], total: float) -> Latency:
        """The summary of `histogram` whose values add up to `total` seconds."""
        count = int(sum(histogram))
        return cls(count, quantile(histogram, 0.5), quantile(histogram, 0.95), total / count if count else None)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (seconds rounded to the microsecond)."""
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 6)
        return {"count": self.count, "p50_seconds": r(self.p50), "p95_seconds": r(self.p95),
                "mean_seconds": r(self.mean)}


@dataclass
class _Sums:
    row: Row = field(default_factory=lambda: [0.0] * len(COLUMNS))

    def add(self, values: Iterable[float]) -> None:
        for i, value in enumerate(values):
            self.row[i] += float(value or 0)

    def figures(self) -> dict[str, Any]:
        row = self.row
        return {"outcomes": {name: int(row[i]) for i, name in enumerate(OUTCOMES)},
                "wait": Latency.of(row[_W0:_W0 + STAT_BUCKETS], row[4]).as_dict(),
                "run": Latency.of(row[_R0:_R0 + STAT_BUCKETS], row[5]).as_dict()}


@dataclass(frozen=True)
class LatencyFigures:
    """Wait and run p50/p95 and outcomes over `window` seconds: all queues, per queue, per (queue, actor)
    (every pair, or the busiest: `actors_total` counts them all)."""

    window: float
    resolution: int
    overall: dict[str, Any]
    queues: dict[str, dict[str, Any]]
    actors: dict[tuple[str, str], dict[str, Any]]
    #: How many (queue, actor) pairs counted attempts in the window (`actors` may hold the busiest only).
    actors_total: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the window, all queues, and a list per queue and per actor (sorted)."""
        return {"window_seconds": self.window, "resolution_seconds": self.resolution, "all": self.overall,
                "queues": [{"queue": q, **f} for q, f in sorted(self.queues.items())],
                "actors": [{"queue": q, "actor": a, **f} for (q, a), f in sorted(self.actors.items())],
                "actors_total": max(self.actors_total, len(self.actors))}


def _start(now: float, window: float, resolution: int) -> int:
    """The first bucket of the `window` ending now: window / resolution buckets, the current one last."""
    return (math.floor(now / resolution) + 1) * resolution - int(window)


def latency(store: StoreCore, *, window: str = "1h", queues: Collection[str] | None = None,
            actors: int | None = None) -> LatencyFigures:
    """Wait and run p50/p95 and the outcomes over `window` (a WINDOWS name, read at its
    LATENCY_RESOLUTION), all queues, by queue and by (queue, actor): the window's buckets (a primary
    key range: a few rows per queue and actor) summed by the database, the percentiles here.

    With thousands of queues and actors the rows cost seconds to read and sum (issue 42), so a page
    asks for what it shows: `queues` given, those queues' rows only; `actors` given, the `actors`
    busiest (queue, actor) pairs only (most attempts ended; 0: none), and `actors_total` says how
    many there are."""
    seconds, _ = window_seconds(window)
    resolution = LATENCY_RESOLUTION[window]
    now = store.now()
    columns = [func.sum(job_stats.c[name]) for name in COLUMNS]
    first = math.floor(now / resolution) * resolution - int(seconds)  # the current bucket and seconds before
    where = [job_stats.c.resolution == resolution, job_stats.c.bucket >= first]
    if queues is not None:
        where.append(job_stats.c.queue.in_(sorted({ALL, *queues})))
    levels = select(job_stats.c.queue, *columns).where(*where, job_stats.c.actor == ALL).group_by(job_stats.c.queue)
    pairs = select(job_stats.c.queue, job_stats.c.actor, *columns).where(
        *where, job_stats.c.queue != ALL, job_stats.c.actor != ALL).group_by(job_stats.c.queue, job_stats.c.actor)
    if actors is not None:  # ranked on the outcome columns alone; the histograms summed for the top pairs only
        attempts = sum((func.sum(job_stats.c[name]) for name in OUTCOMES[1:]), func.sum(job_stats.c[OUTCOMES[0]]))
        top = select(job_stats.c.queue, job_stats.c.actor).where(
            *where, job_stats.c.queue != ALL, job_stats.c.actor != ALL).group_by(job_stats.c.queue, job_stats.c.actor) \
            .order_by(attempts.desc(), job_stats.c.queue, job_stats.c.actor).limit(actors).subquery()
        pairs = pairs.join_from(job_stats, top,
                                and_(job_stats.c.queue == top.c.queue, job_stats.c.actor == top.c.actor))
        counted = select(func.count()).select_from(
            select(job_stats.c.queue, job_stats.c.actor).where(*where, job_stats.c.queue != ALL,
                                                              job_stats.c.actor != ALL).distinct().subquery())
    overall, by_queue, by_actor = _Sums(), dict[str, _Sums](), dict[tuple[str, str], _Sums]()
    with store.read() as conn:
        for row in conn.execute(levels):
            (overall if row[0] == ALL else by_queue.setdefault(row[0], _Sums())).add(row[1:])
        if actors != 0:
            for row in conn.execute(pairs):
                by_actor.setdefault((row[0], row[1]), _Sums()).add(row[2:])
        total = len(by_actor) if actors is None else int(conn.execute(counted).scalar_one())
    return LatencyFigures(seconds, resolution, overall.figures(), {q: s.figures() for q, s in by_queue.items()},
                          {k: s.figures() for k, s in by_actor.items()}, total)


@dataclass(frozen=True)
class History:
    """Per bucket over a window, all queues: the attempts' outcomes and the p95 wait and run."""

    window: str
    resolution: int
    buckets: list[float]
    outcomes: dict[str, list[int]]
    wait_p95: list[float | None]
    run_p95: list[float | None]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"window": self.window, "resolution_seconds": self.resolution, "buckets": self.buckets,
                **self.outcomes, "wait_p95_seconds": self.wait_p95, "run_p95_seconds": self.run_p95}


def history(store: StoreCore, *, window: str = "1h") -> History:
    """The chart series of `window` (a WINDOWS name): one query of the window / resolution rows (60,
    96 or 168) of the all-queues total, whatever the number of queues and jobs."""
    seconds, resolution = window_seconds(window)
    now = store.now()
    start = _start(now, seconds, resolution)
    stmt = select(job_stats.c.bucket, *(func.sum(job_stats.c[name]) for name in COLUMNS)).where(
        job_stats.c.resolution == resolution, job_stats.c.bucket >= start, job_stats.c.queue == ALL,
        job_stats.c.actor == ALL).group_by(job_stats.c.bucket)
    by_bucket: dict[int, Row] = {}
    with store.read() as conn:
        for row in conn.execute(stmt):
            by_bucket[int(row[0])] = [float(v or 0) for v in row[1:]]
    buckets = list(range(start, start + int(seconds), resolution))
    rows = [by_bucket.get(b, [0.0] * len(COLUMNS)) for b in buckets]
    return History(window, resolution, [float(b) for b in buckets],
                   {name: [int(r[i]) for r in rows] for i, name in enumerate(OUTCOMES)},
                   [quantile(r[_W0:_W0 + STAT_BUCKETS], 0.95) for r in rows],
                   [quantile(r[_R0:_R0 + STAT_BUCKETS], 0.95) for r in rows])
