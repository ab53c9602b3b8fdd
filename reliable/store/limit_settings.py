"""The concurrency limits as operators read and change them (migration 0023): a page of the actors'
limit rows, an operator's ceiling on one, its audit trail, and the queue an actor's jobs run on.

reliable.limits.operator checks the operator, the reason, the bounds and the policy; this module only
reads and writes the rows. Setting a ceiling also moves the effective concurrency to it at once (a
lower one takes effect at the next slot taken, a higher one up to the declared concurrency); the
adaptive restores stay at or below it (the limit queries read `declared` capped by it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import select, update

from .audit_trail import AuditEntry, entry, latest
from .core import StoreCore
from .records import home_queue_of
from .schema import jobs, limit_events, limits

__all__ = ["LimitView", "actor_queues", "add_event", "get_limit", "list_events", "list_limits",
           "set_ceiling"]


@dataclass(frozen=True)
class LimitView:
    """An actor's concurrency limit row: declared by its code, effective now, the operator's ceiling."""

    actor: str
    declared: int
    effective: int
    ceiling: int | None
    streak: int
    changed_at: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return asdict(self)


def _view(r: Any) -> LimitView:
    return LimitView(str(r.name), int(r.declared), int(r.effective), None if r.ceiling is None else int(r.ceiling),
                     int(r.streak or 0), None if r.changed_at is None else float(r.changed_at))


_COLUMNS = (limits.c.name, limits.c.declared, limits.c.effective, limits.c.ceiling, limits.c.streak,
            limits.c.changed_at)


def list_limits(store: StoreCore, *, limit: int = 100, cursor: str | None = None) -> tuple[list[LimitView], str | None]:
    """A page of the actors with a concurrency limit (declared > 0), by name after `cursor`; the next cursor."""
    stmt = select(*_COLUMNS).where(limits.c.declared > 0)
    if cursor is not None:
        stmt = stmt.where(limits.c.name > cursor)
    with store.read() as conn:
        rows = [_view(r) for r in conn.execute(stmt.order_by(limits.c.name).limit(limit + 1))]
    return rows[:limit], rows[limit - 1].actor if len(rows) > limit else None


def get_limit(store: StoreCore, actor: str) -> LimitView | None:
    """`actor`'s limit row, or None."""
    with store.read() as conn:
        row = conn.execute(select(*_COLUMNS).where(limits.c.name == actor)).first()
    return None if row is None else _view(row)


def actor_queues(store: StoreCore, actor: str) -> tuple[str, ...]:
    """The home queues of `actor`'s jobs (`Job.home_queue`: a job waiting on a retry lane or a delay
    queue is still its own queue's), sorted; empty without any job. One job per distinct queue row."""
    with store.read() as conn:
        found = conn.execute(select(jobs.c.queue).where(jobs.c.actor == actor).distinct()).scalars().all()
        homes = set()
        for queue in found:
            message = conn.execute(select(jobs.c.message).where(jobs.c.actor == actor, jobs.c.queue == queue)
                                   .limit(1)).scalar()
            homes.add(home_queue_of(str(queue), message))
    return tuple(sorted(homes))


def set_ceiling(store: StoreCore, actor: str, ceiling: int | None, *, operator: str, host: str | None,
                source: str | None, reason: str) -> tuple[LimitView, LimitView] | None:
    """Set (None: clear) `actor`'s ceiling and move its effective concurrency to it (to the declared one
    when cleared), audited, in one transaction; the rows before and after, None without a limit row."""
    with store.write() as conn:
        row = conn.execute(select(*_COLUMNS).where(limits.c.name == actor)).first()
        if row is None:
            return None
        before = _view(row)
        effective = min(before.declared, ceiling if ceiling is not None else before.declared)
        conn.execute(update(limits).where(limits.c.name == actor)
                     .values(ceiling=ceiling, effective=effective, streak=0, changed_at=store.now_sql,
                             updated_at=store.now_sql))
        after = LimitView(actor, before.declared, effective, ceiling, 0, before.changed_at)
        conn.execute(_event(store, actor, "concurrency_set" if ceiling is not None else "concurrency_cleared",
                            operator, host, source, reason,
                            {"before": before.effective, "after": effective, "ceiling": ceiling,
                             "declared": before.declared}))
    return before, after


def add_event(store: StoreCore, actor: str, event: str, *, operator: str | None, host: str | None,
              source: str | None, reason: str | None, detail: dict[str, Any] | None) -> None:
    """Append an entry to `actor`'s limit audit trail (a refused command, for one)."""
    with store.write() as conn:
        conn.execute(_event(store, actor, event, operator, host, source, reason, detail))


def _event(store: StoreCore, actor: str, event: str, operator: str | None, host: str | None, source: str | None,
           reason: str | None, detail: dict[str, Any] | None) -> Any:
    return entry(store, limit_events, limit_events.c.name, actor, event, operator=operator, host=host, source=source,
                 reason=reason, detail=detail)


def list_events(store: StoreCore, actor: str, *, limit: int = 20) -> list[AuditEntry]:
    """`actor`'s latest limit audit entries, oldest first."""
    return latest(store, limit_events, limit_events.c.name, actor, limit=limit)
