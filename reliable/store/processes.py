"""The worker-process records (reliable_worker_processes, migration 0014): one row per process.

A row is written when a worker process boots, stamped by every heartbeat (`StateStore.renew`, in
the renewal's own statement, or `StateStore.process_beat` when it holds no lease), and marked
exited at a clean stop or when the process's death is certain. Marking is a compare-and-set on
`exited_at IS NULL`: of several processes that see the same death, one releases its leases.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from ..states import ACTIVE_STATES
from .core import StoreCore
from .records import Job
from .schema import jobs, worker_processes

__all__ = ["LIVE_WITHIN", "WorkerProcess", "get_process", "leases_held_by", "list_processes", "live_by_host_and_queue",
           "mark_exited", "process_from_row", "prune_exited", "register_process"]

#: A process not marked exited counts as live while its last heartbeat is this recent (seconds):
#: a heartbeat interval is shorter than the lease TTL (30 s by default).
LIVE_WITHIN = 120.0


@dataclass(frozen=True)
class WorkerProcess:
    """One worker process as recorded (times are the store's epoch seconds)."""

    worker_id: str
    host: str
    pid: int
    start_ticks: int | None
    boot_id: str | None
    queues: tuple[str, ...] | None  # None: every queue
    threads: int | None
    supervisor_pid: int | None
    started_at: float = 0.0
    last_beat_at: float = 0.0
    exited_at: float | None = None
    exit_reason: str | None = None
    exit_observed_by: str | None = None
    host_instance: str | None = None  # the host's random id of this boot (reliable.worker.host_instance)
    slot: int | None = None  # a `reliable worker` child's slot
    restarts: int | None = None  # children its slot had before it (the supervisor's count)
    busy: tuple[tuple[str, str], ...] = ()  # (job id, thread name) of the jobs its threads run now
    command: str | None = None  # the last operator command: quiet | stop (reliable.process_commands)
    command_at: float | None = None
    command_operator: str | None = None
    command_reason: str | None = None
    command_seen_at: float | None = None  # when its heartbeat picked the command up

    @property
    def live(self) -> bool:
        """Not marked exited (it may still be dead: only a certain death is marked)."""
        return self.exited_at is None


def register_process(store: StoreCore, process: WorkerProcess) -> None:
    """Write `process`'s row, stamped with the store's clock (a re-registration replaces it)."""
    values = {
        "host": process.host, "pid": process.pid, "start_ticks": process.start_ticks, "boot_id": process.boot_id,
        "host_instance": process.host_instance,
        "queues": None if process.queues is None else json.dumps(sorted(process.queues)),
        "threads": process.threads, "supervisor_pid": process.supervisor_pid,
        "slot": process.slot, "restarts": process.restarts, "busy": None,
        "command": None, "command_at": None, "command_operator": None, "command_reason": None,
        "command_seen_at": None, "started_at": store.now_sql, "last_beat_at": store.now_sql,
        "exited_at": None, "exit_reason": None, "exit_observed_by": None,
    }
    with store.write() as conn:
        if conn.execute(update(worker_processes).where(worker_processes.c.worker_id == process.worker_id)
                        .values(**values)).rowcount == 0:
            conn.execute(worker_processes.insert().values(worker_id=process.worker_id, **values))


def prune_exited(store: StoreCore, *, older_than: float) -> int:
    """Delete the records of processes that exited more than `older_than` seconds ago; how many."""
    stmt = worker_processes.delete().where(worker_processes.c.exited_at < store.now_sql - older_than)
    with store.write() as conn:
        return int(conn.execute(stmt).rowcount or 0)


def mark_exited(store: StoreCore, worker_id: str, *, reason: str, observed_by: str) -> bool:
    """Mark the process exited (`reason`: stopped, pid_gone, pid_reused); False if it already was."""
    stmt = (update(worker_processes)
            .where(worker_processes.c.worker_id == worker_id, worker_processes.c.exited_at.is_(None))
            .values(exited_at=store.now_sql, exit_reason=reason, exit_observed_by=observed_by))
    with store.write() as conn:
        return bool(conn.execute(stmt).rowcount)


def list_processes(store: StoreCore, *, host: str | None = None, boot_id: str | None = None,
                   host_instance: str | None = None, live_only: bool = False,
                   limit: int = 1000) -> list[WorkerProcess]:
    """The recorded processes, newest first; narrowed to a host (its boot, its instance), or to the
    live ones."""
    stmt = select(worker_processes)
    if host is not None:
        stmt = stmt.where(worker_processes.c.host == host)
    if boot_id is not None:
        stmt = stmt.where(worker_processes.c.boot_id == boot_id)
    if host_instance is not None:
        stmt = stmt.where(worker_processes.c.host_instance == host_instance)
    if live_only:
        stmt = stmt.where(worker_processes.c.exited_at.is_(None))
    stmt = stmt.order_by(worker_processes.c.started_at.desc()).limit(limit)
    with store.read() as conn:
        rows = conn.execute(stmt).mappings().all()
    return [process_from_row(dict(row)) for row in rows]


def get_process(store: StoreCore, worker_id: str) -> WorkerProcess | None:
    """The record of `worker_id`, or None."""
    with store.read() as conn:
        row = conn.execute(select(worker_processes).where(worker_processes.c.worker_id == worker_id)).mappings().first()
    return None if row is None else process_from_row(dict(row))


def leases_held_by(store: StoreCore, worker_ids: Sequence[str]) -> list[Job]:
    """The RUNNING/STOPPING jobs whose lease one of these processes holds."""
    if not worker_ids:
        return []
    stmt = select(jobs).where(jobs.c.worker_id.in_(list(worker_ids)),
                              jobs.c.status.in_([s.value for s in ACTIVE_STATES]))
    with store.read() as conn:
        return [Job.from_row(row) for row in conn.execute(stmt).mappings()]


def process_from_row(r: Mapping[str, Any]) -> WorkerProcess:
    """A row of reliable_worker_processes as a WorkerProcess."""
    def opt_int(key: str) -> int | None:
        return None if r[key] is None else int(r[key])

    def opt_str(key: str) -> str | None:
        return None if r[key] is None else str(r[key])

    def opt_float(key: str) -> float | None:
        return None if r[key] is None else float(r[key])

    return WorkerProcess(
        worker_id=str(r["worker_id"]), host=str(r["host"]), pid=int(r["pid"]), start_ticks=opt_int("start_ticks"),
        boot_id=opt_str("boot_id"), queues=None if r["queues"] is None else tuple(json.loads(r["queues"])),
        threads=opt_int("threads"), supervisor_pid=opt_int("supervisor_pid"),
        started_at=float(r["started_at"]), last_beat_at=float(r["last_beat_at"]),
        exited_at=None if r["exited_at"] is None else float(r["exited_at"]),
        exit_reason=opt_str("exit_reason"), exit_observed_by=opt_str("exit_observed_by"),
        host_instance=opt_str("host_instance"), slot=opt_int("slot"), restarts=opt_int("restarts"),
        busy=tuple((str(job), str(thread)) for job, thread in json.loads(r["busy"] or "[]")),
        command=opt_str("command"), command_at=opt_float("command_at"), command_operator=opt_str("command_operator"),
        command_reason=opt_str("command_reason"), command_seen_at=opt_float("command_seen_at"),
    )


def live_by_host_and_queue(store: StoreCore, *, within: float = LIVE_WITHIN) -> dict[tuple[str, str], int]:
    """Live processes (not exited, a heartbeat within `within` seconds) per (host, queue); a
    process consuming every queue counts under queue "*"."""
    stmt = select(worker_processes.c.host, worker_processes.c.queues).where(
        worker_processes.c.exited_at.is_(None), worker_processes.c.last_beat_at > store.now_sql - within)
    counts: dict[tuple[str, str], int] = {}
    with store.read() as conn:
        for host, queues in conn.execute(stmt):
            for queue in (json.loads(queues) if queues is not None else ["*"]):
                counts[(host, queue)] = counts.get((host, queue), 0) + 1
    return counts
