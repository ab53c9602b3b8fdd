"""What the exporter's gauges read from the store (`reliable.collector.StoreCollector`), in one
read-only connection: jobs per state and queue, stuck jobs, the oldest due PENDING job per queue,
open workflows, schedules' slots and actors' concurrency limits. Every query is index-backed.

The database's clock is read once and bound as a constant: a volatile clock_timestamp() inside a
WHERE clause cannot bound an index range scan.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, literal, select, union_all
from sqlalchemy.engine import Connection

from ..states import JobStatus
from .core import StoreCore
from .schema import jobs, limits, schedules, workflows
from .workflow_views import WorkflowStatus

__all__ = ["STUCK_STATES", "GaugeReadings", "ScheduleGauge", "read_gauges"]

_S = JobStatus
#: When a job entered each state a stuck threshold applies to: RUNNING from the attempt's claim
#: (started_at), STOPPING from the stop request, PAUSED from the pause (updated_at).
_SINCE = {
    _S.RUNNING: jobs.c.started_at,
    _S.STOPPING: func.coalesce(jobs.c.stop_requested_at, jobs.c.updated_at),
    _S.PAUSED: jobs.c.updated_at,
}

#: The states a job can be stuck in (those with a stuck threshold).
STUCK_STATES: frozenset[JobStatus] = frozenset(_SINCE)


@dataclass(frozen=True)
class ScheduleGauge:
    """One schedule's slots, as timestamps (None: none yet)."""

    name: str
    paused: bool
    next_slot: float | None
    last_slot: float | None
    slot_conflicts: int = 0  # slots whose job id another job held (not fired)


@dataclass(frozen=True)
class GaugeReadings:
    """One scrape's reads.

    counts: (state, queue) -> jobs, for the counted states; stuck: (state, queue) -> jobs past their
    threshold; oldest_pending: queue -> scheduled_at of its oldest due PENDING job (queues with
    PENDING jobs only); workflows: open status -> workflows (every open status); schedules by name;
    limits: (actor, effective, declared) for each actor declaring a concurrency limit, by name.
    """

    counts: dict[tuple[str, str], int]
    stuck: dict[tuple[str, str], int]
    oldest_pending: dict[str, float | None]
    workflows: dict[str, int]
    schedules: list[ScheduleGauge]
    limits: list[tuple[str, int, int]]


def read_gauges(store: StoreCore, *, states: Set[JobStatus], sla: Mapping[JobStatus, float]) -> GaugeReadings:
    """Read every gauge in one connection: `states` are counted, `sla` gives each stuck threshold
    (seconds; its keys are among STUCK_STATES)."""
    with store.read() as conn:
        now = float(conn.execute(select(store.now_sql)).scalar_one())
        counts = {(status, queue): int(n) for status, queue, n in conn.execute(_count_stmt(states))}
        present = {(s, q) for (s, q), n in counts.items() if n and _S(s) in sla}
        # A counted state with no rows has nothing stuck: skip its query.
        to_check = sorted((st for st in sla if st not in states or any(s == st.value for s, _ in present)),
                          key=lambda st: st.value)
        stuck: dict[tuple[str, str], int] = {}
        if to_check:
            stuck = {(st, queue): int(n) for st, queue, n in conn.execute(_stuck_stmt(to_check, sla, now))}
        pending = sorted(q for (s, q), n in counts.items() if s == _S.PENDING.value and n)
        oldest: dict[str, float | None] = {}
        if pending:
            oldest = {queue: at for queue, at in conn.execute(_oldest_stmt(pending, now))}
        return GaugeReadings(counts, stuck, oldest, _open_workflows(conn), _schedule_slots(conn), _limits(conn))


def _count_stmt(states: Set[JobStatus]) -> Select[Any]:
    return (select(jobs.c.status, jobs.c.queue, func.count())
            .where(jobs.c.status.in_(sorted(s.value for s in states)))
            .group_by(jobs.c.status, jobs.c.queue))


def _oldest_stmt(queues: list[str], now: float) -> Any:
    def oldest(queue: str) -> Select[Any]:
        first = (select(func.min(jobs.c.scheduled_at))
                 .where(jobs.c.status == _S.PENDING.value, jobs.c.queue == queue, jobs.c.scheduled_at <= now)
                 .scalar_subquery())
        return select(literal(queue).label("queue"), first.label("oldest"))

    # One index probe per queue (status, queue[, scheduled_at]) rather than one GROUP BY over
    # every PENDING row.
    parts = [oldest(q) for q in queues]
    return parts[0] if len(parts) == 1 else union_all(*parts)


def _stuck_stmt(states: list[JobStatus], sla: Mapping[JobStatus, float], now: float) -> Any:
    parts = [select(literal(state.value).label("state"), jobs.c.queue, func.count())
             .where(jobs.c.status == state.value, _SINCE[state] < now - sla[state])
             .group_by(jobs.c.queue) for state in states]
    return parts[0] if len(parts) == 1 else union_all(*parts)


def _open_workflows(conn: Connection) -> dict[str, int]:
    """Workflows in each status someone may act on (final ones grow without bound: not counted)."""
    open_statuses = [s for s in WorkflowStatus.ALL if s not in WorkflowStatus.FINAL]
    counts: dict[str, int] = {status: int(n) for status, n in conn.execute(
        select(workflows.c.status, func.count()).where(workflows.c.status.in_(open_statuses))
        .group_by(workflows.c.status))}
    return {status: counts.get(status, 0) for status in open_statuses}


def _schedule_slots(conn: Connection) -> list[ScheduleGauge]:
    stmt = select(schedules.c.name, schedules.c.paused, schedules.c.next_slot, schedules.c.last_slot,
                  schedules.c.slot_conflicts)
    return [ScheduleGauge(name, bool(paused), None if upcoming is None else float(upcoming),
                          None if last is None else float(last), int(conflicts or 0))
            for name, paused, upcoming, last, conflicts in conn.execute(stmt.order_by(schedules.c.name))]


def _limits(conn: Connection) -> list[tuple[str, int, int]]:
    stmt = select(limits.c.name, limits.c.effective, limits.c.declared).where(limits.c.declared > 0)
    return [(actor, int(effective), int(declared))
            for actor, effective, declared in conn.execute(stmt.order_by(limits.c.name))]
