"""The fleet as an on-call engineer reads it: every worker process on record, with what it holds now.

One read for the console's workers page, `GET /api/v1/workers` and `reliable workers list`, so the
three show the same figures: the processes not marked exited (live, or silent: a heartbeat older
than `processes.LIVE_WITHIN`), the most recent exits, and per process the jobs whose lease it holds
now (RUNNING/STOPPING jobs whose `worker_id` is the process's: the claim writes the process's worker
id) and how often its supervisor has replaced a child (its exited siblings of the same supervisor pid
on the same host and boot). Times are the store's epoch seconds. No job value is read out: ids,
queues, actors and states only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .core import StoreCore
from .processes import LIVE_WITHIN, WorkerProcess, leases_held_by, list_processes

__all__ = ["EXITED_SHOWN", "Fleet", "HeldJob", "ProcessView", "fleet", "restarts_of"]

#: How many of the most recent exits the fleet shows.
EXITED_SHOWN = 50


@dataclass(frozen=True)
class HeldJob:
    """A job whose lease a process holds now."""

    job_id: str
    queue: str
    actor: str
    status: str


@dataclass(frozen=True)
class ProcessView:
    """One process on record with what it holds now."""

    process: WorkerProcess
    held: tuple[HeldJob, ...]
    restarts: int
    silent_seconds: float

    @property
    def silent(self) -> bool:
        """Not marked exited but no heartbeat for `LIVE_WITHIN` seconds: frozen, cut off, or dead elsewhere."""
        return self.process.exited_at is None and self.silent_seconds > LIVE_WITHIN

    def as_dict(self) -> dict[str, Any]:
        """The JSON of the API and of `reliable workers list --json`: the record's fields and the figures."""
        data = asdict(self.process)
        data["queues"] = None if self.process.queues is None else list(self.process.queues)
        return {**data, "jobs_held": len(self.held), "held_jobs": [asdict(job) for job in self.held],
                "restarts": self.restarts, "silent_seconds": round(self.silent_seconds, 3), "silent": self.silent}


@dataclass(frozen=True)
class Fleet:
    """The processes not marked exited (newest start first) and the most recent exits."""

    now: float
    live: tuple[ProcessView, ...]
    exited: tuple[ProcessView, ...]

    def as_dict(self) -> dict[str, Any]:
        """The JSON of `GET /api/v1/workers`."""
        return {"now": self.now, "live_within_seconds": LIVE_WITHIN,
                "workers": [view.as_dict() for view in self.live],
                "exited": [view.as_dict() for view in self.exited]}


def restarts_of(process: WorkerProcess, records: Sequence[WorkerProcess]) -> int:
    """How many children `process`'s supervisor has seen exit before it (0 without a supervisor): the
    exited records of the same supervisor pid, host and kernel boot that started no later."""
    if process.supervisor_pid is None:
        return 0
    return sum(1 for other in records
               if other.worker_id != process.worker_id and other.exited_at is not None
               and other.supervisor_pid == process.supervisor_pid and other.host == process.host
               and other.boot_id == process.boot_id and other.started_at <= process.started_at)


def fleet(store: StoreCore, *, host: str | None = None, exited: int = EXITED_SHOWN) -> Fleet:
    """The worker processes on record (of `host` only, when given), with the jobs each holds now."""
    now = store.now()
    records = list_processes(store, host=host)
    live = [p for p in records if p.exited_at is None]
    gone = sorted((p for p in records if p.exited_at is not None), key=lambda p: p.exited_at or 0.0,
                  reverse=True)[:exited]
    held: dict[str, list[HeldJob]] = {}
    for job in leases_held_by(store, [p.worker_id for p in live]):
        if job.worker_id is not None:
            held.setdefault(job.worker_id, []).append(HeldJob(job.job_id, job.queue, job.actor, job.status.value))

    def view(p: WorkerProcess) -> ProcessView:
        jobs = tuple(sorted(held.get(p.worker_id, ()), key=lambda j: j.job_id)) if p.exited_at is None else ()
        return ProcessView(p, jobs, restarts_of(p, records), max(0.0, (p.exited_at or now) - p.last_beat_at))

    return Fleet(now, tuple(view(p) for p in live), tuple(view(p) for p in gone))
