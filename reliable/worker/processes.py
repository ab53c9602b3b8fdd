"""This process on record, and its dead neighbours' leases released at once.

A worker process writes its record at boot (reliable.store.processes) and marks it exited at a
clean stop. At boot, and at every recovery pass, it looks at the records of the other processes of
its own host and pid space (the kernel's boot and the pid namespace: `pid_space`): one whose pid
is gone, or now belongs to another process (its start time differs), is certainly dead, and its
leases are released at once (`Recovery.release_holder`) instead of after their TTL. This is how a
`reliable worker` child killed by SIGKILL (the supervisor's replacement, or a sibling, sees it) or
a plain `dramatiq` restarted after a kill -9 gets its jobs back in seconds.

Nothing else is presumed dead: a process of another host, of another pid namespace on this host
(two containers share the kernel's boot id, and may share a host name, but a pid of one is not
visible, or is another process, in the other), or of this host that is alive but frozen (SIGSTOP)
or cut off from the store, keeps its leases until their TTL, as before.
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
from ..supervisor.exits import SUPERVISOR_PID_ENV

__all__ = ["KEEP_EXITED", "boot_id", "death_of", "exited", "pid_space", "register", "release_dead_neighbours",
           "start_ticks", "this_process"]

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
    such process, or one that is dead and not yet reaped (a zombie), or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last.
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return None if fields[0] in ("Z", "X") else int(fields[19])  # fields[0] is field 3, the state
    except (IndexError, ValueError):
        return None


def this_process(worker_id: str, *, queues: Iterable[str] | None, threads: int | None) -> WorkerProcess:
    """The record of the calling process."""
    pid = os.getpid()
    supervisor = os.environ.get(SUPERVISOR_PID_ENV, "")
    return WorkerProcess(worker_id=worker_id, host=socket.gethostname(), pid=pid, start_ticks=start_ticks(pid),
                         boot_id=pid_space(), queues=None if queues is None else tuple(sorted(queues)),
                         threads=threads, supervisor_pid=int(supervisor) if supervisor.isdigit() else None)


def death_of(record: WorkerProcess, *, host: str, boot: str | None,
             probe: Callable[[int], int | None]) -> str | None:
    """How `record`'s process is known dead from `host` in pid space `boot` (`pid_space`: "pid_gone",
    "pid_reused"), or None: alive, or not knowable from here (another host, boot or pid namespace,
    no start time)."""
    if record.exited_at is not None or record.host != host or boot is None or record.boot_id != boot \
            or record.start_ticks is None:
        return None
    ticks = probe(record.pid)
    if ticks is None:
        return "pid_gone"
    return "pid_reused" if ticks != record.start_ticks else None


def release_dead_neighbours(store: StoreCore, recovery: Recovery, me: WorkerProcess,
                            probe: Callable[[int], int | None] = start_ticks) -> dict[str, list[str]]:
    """Mark every certainly dead process of this host and pid space exited and release its leases
    (job ids by worker id). Store errors are logged: the leases then expire by their TTL."""
    released: dict[str, list[str]] = {}
    try:
        for record in list_processes(store, host=me.host, boot_id=me.boot_id, live_only=True):
            if record.worker_id == me.worker_id:
                continue
            how = death_of(record, host=me.host, boot=me.boot_id, probe=probe)
            if how is None or not mark_exited(store, record.worker_id, reason=how, observed_by=me.worker_id):
                continue  # alive, or another process saw the death first (and releases)
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
