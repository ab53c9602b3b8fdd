"""The console's and API's overview: jobs per state and queue, the oldest due PENDING job per queue,
dead letters, the jobs waiting for a retry or a later time, per-minute successes and failures, and
wait and run p50/p95 over the last hour (reliable.store.job_stats). A few index-backed reads, no
scan of the final states' rows beyond the window."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Select, func, literal, select, union, union_all

from ..states import FAILURE_OUTCOMES, TERMINAL_STATES, UNFINISHED_STATES, JobStatus
from .core import StoreCore
from .job_stats import LatencyFigures, latency
from .schema import job_events, jobs, queue_pauses
from .selection import not_discarded

__all__ = ["ACTORS_SHOWN", "FAILURE_EVENTS", "KNOWN_NAMES_MAX", "OVERVIEW_QUEUES", "SUCCESS_EVENTS", "KnownNames",
           "Overview", "known_names", "oldest_pending_of", "oldest_pending_query", "overview"]

#: The most queue names and actor names `known_names` returns of each.
KNOWN_NAMES_MAX = 500
#: The (queue, actor) pairs whose latency the overview carries: the busiest (job_stats.latency).
ACTORS_SHOWN = 100
#: The queues the console's overview shows (and the web app's overview reads the latency of): those
#: with the most unfinished jobs (`Overview.busiest`); the Queues page pages through them all.
OVERVIEW_QUEUES = 50

#: The events a throughput chart counts, and those a failure-rate chart counts.
SUCCESS_EVENTS: tuple[str, ...] = ("succeed", "fast_succeed")
FAILURE_EVENTS: tuple[str, ...] = tuple(sorted(FAILURE_OUTCOMES))


@dataclass
class Overview:
    """The overview page's figures.

    counts: (state, queue) -> jobs, for every unfinished state, and for final states (SUCCEEDED,
    FAILED, CANCELLED) the jobs that reached them within `window` seconds, counted from the jobs
    through their indexes; oldest_pending: queue -> the oldest due PENDING job's scheduled_at (None:
    nothing due), of the queues read (`read_for`: the busiest, or those of a page: `with_queues`;
    None: every queue); series: per-minute successes and failures over the last `series_minutes`
    (the job events); scheduled: PENDING jobs not due yet (an eta in the future); latency: wait and
    run p50/p95 and outcomes over the last hour, all queues, per queue, and for the ACTORS_SHOWN
    busiest (queue, actor) pairs (job_stats.latency; `actors_total` counts them all).
    """

    now: float
    window: float
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    oldest_pending: dict[str, float | None] = field(default_factory=dict)
    dead_letters: int = 0
    review: int = 0
    minutes: list[float] = field(default_factory=list)
    successes: list[int] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)
    scheduled: int = 0
    latency: LatencyFigures | None = None
    read_for: frozenset[str] | None = None

    @property
    def queues(self) -> list[str]:
        """Every queue with a count, sorted."""
        return sorted({q for _, q in self.counts})

    def busiest(self, n: int) -> list[str]:
        """The `n` queues with the most unfinished jobs (then by name), sorted by name."""
        unfinished = {s.value for s in UNFINISHED_STATES}
        backlog: dict[str, int] = {}
        for (state, queue), jobs_now in self.counts.items():
            backlog[queue] = backlog.get(queue, 0) + (jobs_now if state in unfinished else 0)
        return sorted(sorted(backlog, key=lambda q: (-backlog[q], q))[:n])

    def by_state(self) -> dict[str, int]:
        """Jobs per state, all queues."""
        out: dict[str, int] = {}
        for (state, _), n in self.counts.items():
            out[state] = out.get(state, 0) + n
        return out

    def with_queues(self, store: StoreCore, queues: Collection[str]) -> Overview:
        """These figures with the oldest due PENDING job of `queues` too (a page of queues: one index
        seek each)."""
        if self.read_for is None or not set(queues) - self.read_for:
            return self
        missing = set(queues) - self.read_for
        oldest = {**self.oldest_pending, **oldest_pending_of(store, missing, self.now)}
        return replace(self, oldest_pending=oldest, read_for=self.read_for | missing)

    def as_dict(self, queues: int | None = None, queues_total: int | None = None) -> dict[str, Any]:
        """JSON-ready: every queue's counts and oldest due PENDING job, or (`queues`) those of that many
        busiest ones (`busiest`, the overview page's rows; GET /api/v1/queues pages through them all),
        with `queues` (those listed), `queues_total` (every queue with a count, or the caller's
        `queues_total`: the paused ones too, queue_pauses.queue_names) and `queues_url`."""
        shown = self.queues if queues is None else self.busiest(queues)
        listed = frozenset(shown)
        return {"now": self.now, "window_seconds": self.window,
                "counts": [{"state": s, "queue": q, "jobs": n} for (s, q), n in sorted(self.counts.items())
                           if q in listed],
                "queues": shown, "queues_url": "/api/v1/queues",
                "queues_total": len(self.queues) if queues_total is None else queues_total,
                "by_state": self.by_state(),
                "oldest_pending": {q: t for q, t in self.oldest_pending.items() if q in listed},
                "dead_letters": self.dead_letters, "review": self.review,
                "retry_wait": self.by_state().get(JobStatus.RETRY_WAIT.value, 0), "scheduled": self.scheduled,
                "latency": None if self.latency is None else self.latency.as_dict(),
                "series": {"minutes": self.minutes, "successes": self.successes, "failures": self.failures}}


def oldest_pending_query(now: float) -> Select[Any]:
    """(queue, the oldest due PENDING job's scheduled_at or NULL) for every queue with a PENDING job:
    a loose scan of the partial (status, queue, scheduled_at) index (one seek per queue, a recursive
    CTE, whatever the jobs per queue) and one seek per queue for its oldest due job. One statement on
    PostgreSQL and SQLite whose size does not grow with the queues (issue 42: a UNION branch per
    queue ran past the read's time bound at 2,000 queues)."""
    pending = jobs.c.status == JobStatus.PENDING.value
    first = select(func.min(jobs.c.queue).label("queue")).where(pending).cte("pending_queues", recursive=True)
    step = select(select(func.min(jobs.c.queue)).where(pending, jobs.c.queue > first.c.queue)
                  .scalar_subquery()).where(first.c.queue.is_not(None))
    queues = first.union_all(step)
    oldest = select(func.min(jobs.c.scheduled_at)).where(pending, jobs.c.queue == queues.c.queue,
                                                         jobs.c.scheduled_at <= now).scalar_subquery()
    return select(queues.c.queue, oldest.label("oldest")).where(queues.c.queue.is_not(None))


#: Queues per statement of `oldest_pending_of` (SQLite allows 500 terms of a compound SELECT).
_OLDEST_CHUNK = 200


def oldest_pending_of(store: StoreCore, queues: Collection[str], now: float) -> dict[str, float | None]:
    """Queue -> the oldest due PENDING job's scheduled_at (None: nothing due) of each of `queues`: one
    seek of the partial (status, queue, scheduled_at) index per queue, whatever the jobs per queue."""
    pending = jobs.c.status == JobStatus.PENDING.value
    names = sorted(queues)
    found: dict[str, float | None] = {}
    with store.read() as conn:
        for start in range(0, len(names), _OLDEST_CHUNK):
            # the names as a derived table and one correlated subquery (a subquery per name cost
            # PostgreSQL 12 ms of planning for 50 queues)
            shown = union_all(*(select(literal(q).label("queue")) for q in names[start:start + _OLDEST_CHUNK])) \
                .subquery("shown")
            oldest_of = select(func.min(jobs.c.scheduled_at)).where(
                pending, jobs.c.queue == shown.c.queue, jobs.c.scheduled_at <= now).scalar_subquery()
            for queue, oldest in conn.execute(select(shown.c.queue, oldest_of.label("oldest"))):
                found[str(queue)] = None if oldest is None else float(oldest)
    return found


def overview(store: StoreCore, *, window: float = 86_400.0, series_minutes: int = 60,
             latency_queues: int | None = None) -> Overview:
    """The overview: a few index-backed queries (no scan of the final states' rows beyond `window`).
    The latency and oldest due PENDING job of every queue, or (`latency_queues`) of that many
    busiest ones (`busiest`)."""
    now = store.now()
    result = Overview(now=now, window=window)
    unfinished = sorted(s.value for s in UNFINISHED_STATES)
    final = sorted(s.value for s in TERMINAL_STATES - UNFINISHED_STATES)
    counts = [select(jobs.c.status, jobs.c.queue, func.count().label("n"))
              .where(jobs.c.status.in_(unfinished)).group_by(jobs.c.status, jobs.c.queue)]
    counts += [select(jobs.c.status, jobs.c.queue, func.count().label("n"))
               .where(jobs.c.status == state, jobs.c.updated_at >= now - window).group_by(jobs.c.status, jobs.c.queue)
               for state in final]
    start = (int(now // 60) - series_minutes + 1) * 60
    bucket = (func.floor(job_events.c.at / 60) * 60).label("minute")
    series = [select(literal(kind).label("kind"), bucket, func.count().label("n"))
              .where(job_events.c.event == name, job_events.c.at >= start).group_by(bucket)
              for kind, names in (("ok", SUCCESS_EVENTS), ("failed", FAILURE_EVENTS)) for name in names]
    with store.read() as conn:
        # fetched at once and unpacked (thousands of rows: row by row and by attribute cost 40 ms)
        result.counts.update(((status, queue), int(n)) for status, queue, n in conn.execute(union_all(*counts)).all())
        if latency_queues is None:  # every queue's (the CLI's); a page reads its own (`with_queues`)
            for queue, oldest in conn.execute(oldest_pending_query(now)):
                result.oldest_pending[str(queue)] = None if oldest is None else float(oldest)
            for queue in sorted({q for _, q in result.counts} - set(result.oldest_pending)):
                result.oldest_pending[queue] = None  # counted, but nothing PENDING now
        result.dead_letters = int(conn.execute(select(func.count()).select_from(jobs).where(
            jobs.c.status == JobStatus.DEAD.value, not_discarded())).scalar_one())
        review = JobStatus.REVIEW.value
        result.review = sum(n for (s, _), n in result.counts.items() if s == review)
        # PENDING and not due: one range of the partial (status, queue, scheduled_at) index per queue.
        result.scheduled = int(conn.execute(select(func.count()).select_from(jobs).where(
            jobs.c.status == JobStatus.PENDING.value, jobs.c.scheduled_at > now)).scalar_one())
        per_minute: dict[tuple[str, float], int] = {}
        for row in conn.execute(union_all(*series)):
            key = (row.kind, float(row.minute))
            per_minute[key] = per_minute.get(key, 0) + int(row.n)
    result.minutes = [float(start + 60 * i) for i in range(series_minutes)]
    result.successes = [per_minute.get(("ok", m), 0) for m in result.minutes]
    result.failures = [per_minute.get(("failed", m), 0) for m in result.minutes]
    shown = None if latency_queues is None else result.busiest(latency_queues)
    if shown is not None:
        result.oldest_pending = oldest_pending_of(store, shown, now)
        result.read_for = frozenset(shown)
    result.latency = latency(store, window="1h", actors=ACTORS_SHOWN, queues=shown)
    return result




@dataclass(frozen=True)
class KnownNames:
    """The queues and actors a filter form offers (sorted; at most KNOWN_NAMES_MAX of each)."""

    queues: tuple[str, ...]
    actors: tuple[str, ...]


def known_names(store: StoreCore) -> KnownNames:
    """The queues with unfinished jobs or a pause, and every actor, by index reads only: the queues
    from the partial (status, queue, scheduled_at) index, the actors by a loose scan of the
    (actor, status) index (one seek per actor, however many jobs each has)."""
    unfinished = sorted(s.value for s in UNFINISHED_STATES)
    queues = union(select(jobs.c.queue).where(jobs.c.status.in_(unfinished)).distinct(),
                   select(queue_pauses.c.queue)).subquery()
    first = select(func.min(jobs.c.actor).label("actor")).cte("actors", recursive=True)
    step = select(select(func.min(jobs.c.actor)).where(jobs.c.actor > first.c.actor).scalar_subquery()) \
        .where(first.c.actor.is_not(None))
    actors = first.union_all(step)
    with store.read() as conn:
        found_queues = conn.execute(select(queues.c.queue).order_by(queues.c.queue).limit(KNOWN_NAMES_MAX)).scalars()
        found_actors = conn.execute(select(actors.c.actor).where(actors.c.actor.is_not(None))
                                    .limit(KNOWN_NAMES_MAX)).scalars()
        return KnownNames(tuple(found_queues), tuple(sorted(found_actors)))
