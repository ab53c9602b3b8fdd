"""The fleet as an on-call engineer reads it: every worker process on record, with what it runs now.

One read for the console's workers page, `GET /api/v1/workers` and `reliable workers list`, so the
three show the same figures: the processes not marked exited (live, or silent: a heartbeat older
than `processes.LIVE_WITHIN`), a page at a time in worker-id order (host, then pid: a cursor is the
last worker id shown), the most recent exits, and per process
- the jobs whose lease it holds now (RUNNING/STOPPING jobs whose `worker_id` is the process's: the
  claim writes the process's worker id), each with the thread running it when the process's
  heartbeat has reported it (`busy`, migration 0023; a job claimed since its last beat shows no
  thread yet): Sidekiq's Busy page;
- how often its supervisor restarted its slot before it (`restarts`: the supervisor's own count,
  passed to the child; 0 for a first child, None without a supervisor);
- the last operator command (quiet, stop: reliable.process_commands) and whether it was picked up.
Times are the store's epoch seconds. No job value is read out: ids, queues, actors and states only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import ColumnElement, func, select

from .core import StoreCore
from .processes import LIVE_WITHIN, WorkerProcess, leases_held_by, process_from_row
from .schema import worker_processes

__all__ = ["EXITED_SHOWN", "MAX_PAGE", "PAGE", "Fleet", "HeldJob", "ProcessView", "fleet"]

#: How many of the most recent exits the fleet shows.
EXITED_SHOWN = 50
#: Live processes per page by default, and at most.
PAGE = 100
MAX_PAGE = 1000


@dataclass(frozen=True)
class HeldJob:
    """A job whose lease a process holds now, and the thread running it (None: not reported yet)."""

    job_id: str
    queue: str
    actor: str
    status: str
    started_at: float | None = None
    thread: str | None = None


@dataclass(frozen=True)
class ProcessView:
    """One process on record with what it holds now."""

    process: WorkerProcess
    held: tuple[HeldJob, ...]
    silent_seconds: float

    @property
    def silent(self) -> bool:
        """Not marked exited but no heartbeat for `LIVE_WITHIN` seconds: frozen, cut off, or dead elsewhere."""
        return self.process.exited_at is None and self.silent_seconds > LIVE_WITHIN

    @property
    def restarts(self) -> int | None:
        """How many children its supervisor's slot had before it (None: not a supervised child)."""
        p = self.process
        return p.restarts if p.restarts is not None else (None if p.supervisor_pid is None else 0)

    def as_dict(self, *, held_jobs: bool = False) -> dict[str, Any]:
        """The JSON of the API and of `reliable workers list --json`: the record's fields and the figures.
        What it holds is listed once, as `busy_threads` (each job with its thread and status);
        `held_jobs`, the same jobs again, only when asked (deprecated: issue 42, half of the answer)."""
        data = asdict(self.process)
        data.pop("busy")
        data["queues"] = None if self.process.queues is None else list(self.process.queues)
        threads = [{"thread": job.thread, "job_id": job.job_id, "actor": job.actor, "queue": job.queue,
                    "status": job.status, "started_at": job.started_at} for job in self.held]
        return {**data, "jobs_held": len(self.held),
                **({"held_jobs": [asdict(job) for job in self.held]} if held_jobs else {}),
                "busy_threads": threads, "restarts": self.restarts, "quiet": self.process.command in ("quiet", "stop"),
                "silent_seconds": round(self.silent_seconds, 3), "silent": self.silent}


@dataclass(frozen=True)
class Fleet:
    """A page of the processes not marked exited (worker-id order), how many there are, the cursor of
    the next page (None: the last), and the most recent exits."""

    now: float
    live: tuple[ProcessView, ...]
    exited: tuple[ProcessView, ...]
    live_total: int = 0
    next_cursor: str | None = None

    def as_dict(self, *, held_jobs: bool = False) -> dict[str, Any]:
        """The JSON of `GET /api/v1/workers` (`held_jobs`: ProcessView.as_dict)."""
        return {"now": self.now, "live_within_seconds": LIVE_WITHIN, "live_total": self.live_total,
                "next_cursor": self.next_cursor,
                "workers": [view.as_dict(held_jobs=held_jobs) for view in self.live],
                "exited": [view.as_dict(held_jobs=held_jobs) for view in self.exited]}


def fleet(store: StoreCore, *, host: str | None = None, exited: int = EXITED_SHOWN, limit: int = PAGE,
          cursor: str | None = None) -> Fleet:
    """A page of `limit` worker processes not marked exited after `cursor` (of `host` only, when given),
    with the jobs each holds now and their threads, and the `exited` most recent exits. Three
    statements on the table (page, count, exits: each served by an index) and one on the jobs."""
    now = store.now()
    where: list[ColumnElement[bool]] = [worker_processes.c.exited_at.is_(None)]
    if host is not None:
        where.append(worker_processes.c.host == host)
    page = select(worker_processes).where(*where)
    if cursor is not None:
        page = page.where(worker_processes.c.worker_id > cursor)
    page = page.order_by(worker_processes.c.worker_id).limit(limit + 1)
    gone = select(worker_processes).where(worker_processes.c.exited_at.is_not(None))
    if host is not None:
        gone = gone.where(worker_processes.c.host == host)
    gone = gone.order_by(worker_processes.c.exited_at.desc()).limit(exited)
    with store.read() as conn:
        rows = [process_from_row(dict(r)) for r in conn.execute(page).mappings()]
        total = int(conn.execute(select(func.count()).select_from(worker_processes).where(*where)).scalar() or 0)
        gone_rows = [process_from_row(dict(r)) for r in conn.execute(gone).mappings()] if exited else []
    live, more = rows[:limit], len(rows) > limit
    threads = {p.worker_id: dict(p.busy) for p in live}
    held: dict[str, list[HeldJob]] = {}
    for job in leases_held_by(store, [p.worker_id for p in live]):
        if job.worker_id is not None:
            held.setdefault(job.worker_id, []).append(HeldJob(
                job.job_id, job.queue, job.actor, job.status.value, job.started_at,
                threads.get(job.worker_id, {}).get(job.job_id)))

    def view(p: WorkerProcess) -> ProcessView:
        jobs = tuple(sorted(held.get(p.worker_id, ()), key=lambda j: (j.thread is None, j.thread or "", j.job_id)))
        return ProcessView(p, jobs if p.exited_at is None else (), max(0.0, (p.exited_at or now) - p.last_beat_at))

    return Fleet(now, tuple(view(p) for p in live), tuple(view(p) for p in gone_rows), total,
                 live[-1].worker_id if more and live else None)
