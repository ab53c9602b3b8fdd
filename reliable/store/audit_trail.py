"""The audit trails of the operators' commands on things other than jobs, as rows of one shape: a
worker process's (reliable_process_events) and an actor's limit's (reliable_limit_events), each keyed
by its subject (the worker id, the actor). One writer and one reader for both. A queue's trail
(reliable_queue_events, read by its named query: reliable.queue_pauses.events) answers in the same
`AuditEntry`, its subject the queue."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Table, select

from .core import StoreCore

__all__ = ["AuditEntry", "entry", "latest"]


@dataclass(frozen=True)
class AuditEntry:
    """One entry of an audit trail: what happened to `subject`, when, by whom, from where, why."""

    id: int
    subject: str
    at: float
    event: str
    operator: str | None
    host: str | None
    source: str | None
    reason: str | None
    detail: dict[str, Any]


def entry(store: StoreCore, table: Table, key: Column[Any], subject: str, event: str, *, operator: str | None,
          host: str | None, source: str | None, reason: str | None, detail: dict[str, Any] | None) -> Any:
    """The INSERT of one entry of `table` for `subject` (`key`: its subject column), at the store's time."""
    return table.insert().values({key.name: subject, "at": store.now_sql, "event": event, "operator": operator,
                                  "host": host, "source": source, "reason": reason,
                                  "detail": json.dumps(detail) if detail else None})


def latest(store: StoreCore, table: Table, key: Column[Any], subject: str, *, limit: int = 20) -> list[AuditEntry]:
    """`subject`'s latest `limit` entries of `table`, oldest first."""
    stmt = select(table).where(key == subject).order_by(table.c.id.desc()).limit(limit)
    with store.read() as conn:
        rows = conn.execute(stmt).mappings().all()
    return [AuditEntry(int(r["id"]), str(r[key.name]), float(r["at"]), str(r["event"]), r["operator"], r["host"],
                       r["source"], r["reason"], json.loads(r["detail"]) if r["detail"] else {})
            for r in reversed(rows)]
