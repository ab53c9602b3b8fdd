"""The operator commands on worker processes in the store (migration 0023): the command on the
process's row, the heartbeat's report (its busy threads) that picks the command up, the audit trail.

reliable.process_commands checks the operator, the reason and the policy; this module only writes
and reads the rows. Setting a command is a compare-and-set on the row (`exited_at IS NULL`, and a
command may only go from none to quiet or stop, or from quiet to stop): a process that exited
cannot be commanded, and a stop is never taken back by a later quiet. `clear_quiet` (resume) is the
one way back: a compare-and-set from quiet to none on a live process, so a stop is never taken back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import or_, select, update

from .audit_trail import AuditEntry, entry, latest
from .core import StoreCore
from .schema import process_events, worker_processes

__all__ = ["COMMANDS", "ResumeOutcome", "SetOutcome", "add_event", "clear_quiet", "list_events", "report",
           "set_command"]

#: The commands a worker process acts on: quiet (take no new message, finish the running ones) and
#: stop (a graceful shutdown), in the order they may follow each other.
COMMANDS: tuple[str, ...] = ("quiet", "stop")

#: What `set_command` did: set; unchanged (that command, or a stop, is already there); exited (the
#: process is marked exited); missing (no such process on record).
SetOutcome = Literal["set", "unchanged", "exited", "missing"]

#: What `clear_quiet` did: resumed (quiet taken off); not_quiet (no command on the process); stopping
#: (it was told to stop: a stop is never taken back); exited; missing (no such process on record).
ResumeOutcome = Literal["resumed", "not_quiet", "stopping", "exited", "missing"]


def set_command(store: StoreCore, worker_id: str, command: str, *, operator: str, host: str | None,
                source: str | None, reason: str) -> SetOutcome:
    """Put `command` on the live process `worker_id` and audit it, in one transaction."""
    assert command in COMMANDS
    p = worker_processes.c
    allowed = p.command.is_(None) if command == "quiet" else or_(p.command.is_(None), p.command == "quiet")
    stmt = (update(worker_processes).where(p.worker_id == worker_id, p.exited_at.is_(None), allowed)
            .values(command=command, command_at=store.now_sql, command_operator=operator, command_reason=reason,
                    command_seen_at=None))
    with store.write() as conn:
        if conn.execute(stmt).rowcount:
            conn.execute(_event(store, worker_id, command, operator, host, source, reason, None))
            return "set"
        row = conn.execute(select(p.exited_at).where(p.worker_id == worker_id)).first()
    if row is None:
        return "missing"
    return "exited" if row.exited_at is not None else "unchanged"


def clear_quiet(store: StoreCore, worker_id: str, *, operator: str, host: str | None, source: str | None,
                reason: str) -> ResumeOutcome:
    """Take the quiet off the live process `worker_id` (its heartbeat sees no command, and it takes
    messages again) and audit it as `resume`, in one transaction."""
    p = worker_processes.c
    stmt = (update(worker_processes).where(p.worker_id == worker_id, p.exited_at.is_(None), p.command == "quiet")
            .values(command=None, command_at=None, command_operator=None, command_reason=None,
                    command_seen_at=None))
    with store.write() as conn:
        if conn.execute(stmt).rowcount:
            conn.execute(_event(store, worker_id, "resume", operator, host, source, reason, None))
            return "resumed"
        row = conn.execute(select(p.exited_at, p.command).where(p.worker_id == worker_id)).first()
    if row is None:
        return "missing"
    if row.exited_at is not None:
        return "exited"
    return "stopping" if row.command == "stop" else "not_quiet"


def add_event(store: StoreCore, worker_id: str, event: str, *, operator: str | None, host: str | None,
              source: str | None, reason: str | None, detail: dict[str, Any] | None) -> None:
    """Append an entry to `worker_id`'s audit trail (a refused command, for one)."""
    with store.write() as conn:
        conn.execute(_event(store, worker_id, event, operator, host, source, reason, detail))


def _event(store: StoreCore, worker_id: str, event: str, operator: str | None, host: str | None,
           source: str | None, reason: str | None, detail: dict[str, Any] | None) -> Any:
    return entry(store, process_events, process_events.c.worker_id, worker_id, event, operator=operator, host=host,
                 source=source, reason=reason, detail=detail)


def list_events(store: StoreCore, worker_id: str, *, limit: int = 20) -> list[AuditEntry]:
    """`worker_id`'s latest audit entries, oldest first."""
    return latest(store, process_events, process_events.c.worker_id, worker_id, limit=limit)


def report(store: StoreCore, worker_id: str, busy: Sequence[tuple[str, str]] | None) -> str | None:
    """The heartbeat's report: write the process's busy threads ((job id, thread) pairs; None: unchanged
    since the last report) and pick up its command (stamping when it was first seen); the command."""
    p = worker_processes.c
    with store.write() as conn:
        if busy is not None:
            conn.execute(update(worker_processes).where(p.worker_id == worker_id)
                         .values(busy=json.dumps([list(pair) for pair in busy])))
        row = conn.execute(select(p.command, p.command_seen_at).where(p.worker_id == worker_id)).first()
        if row is None or row.command is None:
            return None
        if row.command_seen_at is None:
            conn.execute(update(worker_processes).where(p.worker_id == worker_id, p.command == row.command)
                         .values(command_seen_at=store.now_sql))
        return str(row.command)
