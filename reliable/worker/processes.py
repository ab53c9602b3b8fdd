"""This process on record, and its dead neighbours' leases released at once.

A worker process writes its record at boot (reliable.store.processes) and marks it exited at a
clean stop. At boot, and at every recovery pass, it looks at the records of the other processes of
its own host: the same host name, kernel boot and pid namespace (`pid_space`) and host instance id
(`reliable.worker.host_instance`: clones of one memory snapshot share the rest). The kernel's
evidence decides (`reliable.worker.liveness`): a process whose pid is gone (kill(pid, 0) says no
such process), or has exited, or now belongs to another process (its start time, read, differs),
is certainly dead, and its leases are released at once (`Recovery.release_holder`) instead of
after their TTL. This is how a `reliable worker` child killed by SIGKILL (the supervisor's
replacement, or a sibling, sees it) or a plain `dramatiq` restarted after a kill -9 gets its jobs
back in seconds.

Nothing else is presumed dead: a process of another host, of another pid namespace on this host
(two containers share the kernel's boot id, and may share a host name, but a pid of one is not
visible, or is another process, in the other), one this observer cannot see or read (another
user's, with /proc mounted hidepid: its liveness is unknown), or one alive but frozen (SIGSTOP) or
cut off from the store, keeps its leases until their TTL, as before.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable

from ..errors import StoreError
from ..recovery import Recovery
from ..store import StoreCore
from ..store.processes import WorkerProcess, list_processes, mark_exited, prune_exited, register_process
from ..supervisor.exits import RESTARTS_ENV, SLOT_ENV, SUPERVISOR_PID_ENV
from .host_instance import host_instance
from .liveness import Evidence, observe, read_start, verdict

__all__ = ["KEEP_EXITED", "boot_id", "death_of", "exited", "pid_space", "register", "release_dead_neighbours",
           "same_host", "start_ticks", "this_process"]

logger = logging.getLogger("reliable.leases")

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """The kernel's boot id (Linux), None elsewhere: pids of another boot say nothing."""
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def pid_space() -> str | None:
    """Where this process's pids mean something: the kernel's boot id and the pid namespace
    (`<boot id>/<namespace inode>`), None when unknown or when /proc is not of this process's pid
    namespace (its pids could not be probed there). Stored as the record's `boot_id`: two
    containers on one host share the boot id, and may share a host name, but not their pids."""
    boot = boot_id()
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # e.g. "pid:[4026531836]"
        mounted_here = os.readlink("/proc/self") == str(os.getpid())  # /proc of another namespace: no
    except OSError:
        return None
    inode = namespace.removeprefix("pid:[").removesuffix("]")
    if boot is None or not mounted_here or not inode.isdigit():
        return None
    return f"{boot}/{inode}"


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/<pid>/stat field 22); None: no
    such process, or one that is dead and not yet reaped (a zombie), or a stat it cannot read."""
    start = read_start(pid)
    return None if start is None or start[1] else start[0]


def this_process(worker_id: str, *, queues: Iterable[str] | None, threads: int | None) -> WorkerProcess:
    """The record of the calling process."""
    pid = os.getpid()
    supervisor = os.environ.get(SUPERVISOR_PID_ENV, "")
    slot, restarts = os.environ.get(SLOT_ENV, ""), os.environ.get(RESTARTS_ENV, "")
    return WorkerProcess(worker_id=worker_id, host=socket.gethostname(), pid=pid, start_ticks=start_ticks(pid),
                         boot_id=pid_space(), queues=None if queues is None else tuple(sorted(queues)),
                         threads=threads, supervisor_pid=int(supervisor) if supervisor.isdigit() else None,
                         host_instance=host_instance(boot_id()), slot=int(slot) if slot.isdigit() else None,
                         restarts=int(restarts) if restarts.isdigit() and supervisor.isdigit() else None)


def same_host(record: WorkerProcess, observer: WorkerProcess) -> bool:
    """Whether `record`'s pid means the same process to `observer`: one host name, kernel boot, pid
    namespace and host instance id, each known."""
    return (record.host == observer.host and observer.boot_id is not None and record.boot_id == observer.boot_id
            and observer.host_instance is not None and record.host_instance == observer.host_instance)


def death_of(record: WorkerProcess, observer: WorkerProcess,
             probe: Callable[[int], Evidence] = observe) -> str | None:
    """How `record`'s process is known dead to `observer` ("pid_gone", "pid_reused"), or None:
    alive, unknown (unreadable from here), or not of the observer's host (`same_host`)."""
    if record.exited_at is not None or not same_host(record, observer):
        return None
    found = verdict(record.start_ticks, probe(record.pid))
    return found.value if found.dead else None


def release_dead_neighbours(store: StoreCore, recovery: Recovery, me: WorkerProcess,
                            probe: Callable[[int], Evidence] = observe) -> dict[str, list[str]]:
    """Mark every certainly dead process of this host (`same_host`) exited and release its leases
    (job ids by worker id). Store errors are logged: the leases then expire by their TTL."""
    released: dict[str, list[str]] = {}
    if me.boot_id is None or me.host_instance is None:
        return released  # nothing can be judged from here
    try:
        for record in list_processes(store, host=me.host, boot_id=me.boot_id, host_instance=me.host_instance,
                                     live_only=True):
            if record.worker_id == me.worker_id:
                continue
            how = death_of(record, me, probe)
            if how is None or not mark_exited(store, record.worker_id, reason=how, observed_by=me.worker_id):
                continue  # alive or unknown, or another process saw the death first (and releases)
            report = recovery.release_holder(record.worker_id, observed_by=me.worker_id, how=how)
            released[record.worker_id] = list(report.expired)
            logger.warning("worker %s (pid %d) is dead (%s): %d leases released", record.worker_id, record.pid,
                           how, len(report.expired))
    except StoreError as exc:
        logger.warning("could not look for dead worker processes on this host (their leases expire by TTL): %s", exc)
    return released


#: Records of processes that exited are kept this long (seconds) for `reliable workers list --all`.
KEEP_EXITED = 7 * 86400.0


def register(store: StoreCore, me: WorkerProcess) -> None:
    """Write this process's record, and delete those that exited over `KEEP_EXITED` ago (a failure
    is logged: the process runs without one)."""
    try:
        register_process(store, me)
        prune_exited(store, older_than=KEEP_EXITED)
    except StoreError as exc:
        logger.warning("could not record this worker process (%s): %s", me.worker_id, exc)


def exited(store: StoreCore, worker_id: str) -> None:
    """Mark this process's record exited at a clean stop."""
    try:
        mark_exited(store, worker_id, reason="stopped", observed_by=worker_id)
    except StoreError as exc:
        logger.warning("could not mark this worker process exited (%s): %s", worker_id, exc)
