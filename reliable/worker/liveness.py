"""Whether a recorded worker process is dead, from the kernel's evidence only.

`observe` gathers the evidence about a pid of this pid space; `verdict` is the pure decision:

| kill(pid, 0) | /proc/<pid>/stat | verdict |
|---|---|---|
| ESRCH (no such process) | anything | `pid_gone`: dead |
| succeeds, or EPERM (it exists: another user's) | readable, state Z or X (exited, not reaped) | `pid_gone`: dead |
| succeeds, or EPERM | readable, start time differs from the recorded one | `pid_reused`: dead |
| succeeds, or EPERM | readable, the recorded start time | `alive` |
| succeeds, or EPERM | unreadable (hidepid=1 or 2, no /proc, a parse failure) | `unknown` |
| any other error | anything | `unknown` |

`unknown` keeps the process's leases until their TTL, as `alive` does: a process the observer
cannot see (/proc mounted `hidepid=2`, systemd's `ProtectProc=invisible`) is never presumed dead.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

__all__ = ["PROC", "Evidence", "Liveness", "observe", "read_start", "verdict"]

#: Where the kernel's process table is mounted (tests point `observe` at another directory).
PROC = "/proc"


class Liveness(Enum):
    """What the evidence says of a recorded process."""

    PID_GONE = "pid_gone"  # no such process, or exited and not yet reaped
    PID_REUSED = "pid_reused"  # the pid is another process now (another start time)
    ALIVE = "alive"
    UNKNOWN = "unknown"  # cannot be seen or read from here: its lease runs its TTL

    @property
    def dead(self) -> bool:
        """Certainly dead: its leases may be released now."""
        return self in (Liveness.PID_GONE, Liveness.PID_REUSED)


@dataclass(frozen=True)
class Evidence:
    """What the observer could learn about a pid.

    exists: the kernel's answer to kill(pid, 0): True (it exists, ours or, by EPERM, another
      user's), False (ESRCH), None (another error).
    start_ticks: its start time in clock ticks since boot, None when /proc/<pid>/stat could not be
      read or parsed.
    exited: the stat was read and the process has exited (state Z or X: a zombie).
    """

    exists: bool | None
    start_ticks: int | None = None
    exited: bool = False


def verdict(recorded_ticks: int | None, evidence: Evidence) -> Liveness:
    """The decision of the module's table for a process recorded with start time `recorded_ticks`."""
    if evidence.exists is False:
        return Liveness.PID_GONE
    if evidence.exists is None or evidence.start_ticks is None:
        return Liveness.UNKNOWN
    if evidence.exited:
        return Liveness.PID_GONE
    if recorded_ticks is None:
        return Liveness.UNKNOWN
    return Liveness.ALIVE if evidence.start_ticks == recorded_ticks else Liveness.PID_REUSED


def read_start(pid: int, *, proc: str = PROC) -> tuple[int, bool] | None:
    """(start ticks, exited) of `pid` from `<proc>/<pid>/stat` (field 22 and field 3), None when it
    cannot be read or parsed: gone, hidden (hidepid), not permitted, or no /proc."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last.
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return int(fields[19]), fields[0] in ("Z", "X")  # fields[0] is field 3, the state
    except (IndexError, ValueError):
        return None


def _exists(pid: int, kill: Callable[[int, int], None]) -> bool | None:
    try:
        kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # EPERM: it exists, and belongs to another user
        return True
    except OSError as exc:
        return False if exc.errno == errno.ESRCH else None
    return True


def observe(pid: int, *, proc: str = PROC, kill: Callable[[int, int], None] = os.kill) -> Evidence:
    """The evidence about `pid` in this pid space: the kernel's kill(pid, 0), then its stat."""
    if pid <= 0:  # kill(0 or -n, 0) would probe a process group, not a process
        return Evidence(exists=None)
    exists = _exists(pid, kill)
    if exists is not True:
        return Evidence(exists=exists)
    start = read_start(pid, proc=proc)
    return Evidence(exists=True) if start is None else Evidence(exists=True, start_ticks=start[0], exited=start[1])
