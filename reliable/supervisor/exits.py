"""Exit codes of `reliable worker` and of its child processes, what a child's exit means, and the
variable naming a child's supervisor. Pure: what a child and its supervisor agree on, so the worker
reads it without importing the supervisor.

A child's exit code says why it stopped; the supervisor reads nothing else from it (no log text).
The codes a child shares with Dramatiq's CLI keep Dramatiq's meaning (dramatiq/cli.py: 1 killed,
2 import failed, 3 broker connection failed at boot).
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

__all__ = [
    "CHILD_CONFIG",
    "CHILD_CONNECT",
    "CHILD_IMPORT",
    "CHILD_KILLED",
    "CHILD_OK",
    "CHILD_RECYCLE_JOBS",
    "CHILD_RECYCLE_MEMORY",
    "CHILD_STOPPED",
    "EXIT_APP",
    "EXIT_CRASH_LOOP",
    "EXIT_KILLED",
    "EXIT_OK",
    "OPERATOR_STOP_SIGNAL",
    "RESTARTS_ENV",
    "SLOT_ENV",
    "SUPERVISOR_PID_ENV",
    "ChildExit",
    "ExitKind",
    "classify",
    "describe_code",
    "finished_its_jobs",
]

#: The supervisor's pid, in each child's environment: its worker process record names it
#: (reliable.worker.processes).
SUPERVISOR_PID_ENV = "RELIABLE_SUPERVISOR_PID"
#: A child's slot, and how many children its slot had before it (the restarts shown on its record).
SLOT_ENV = "RELIABLE_SUPERVISOR_SLOT"
RESTARTS_ENV = "RELIABLE_SUPERVISOR_RESTARTS"
#: What a child's worker sends itself when an operator stops it (reliable.worker.commands): a graceful
#: stop, as TERM, that leaves with CHILD_STOPPED so that the supervisor does not count a crash.
OPERATOR_STOP_SIGNAL = signal.SIGUSR2
#: A child stopped because it was asked to (TERM from the supervisor).
CHILD_OK = 0
#: A child stopped without its running jobs: the hard stop (a second TERM/INT to the supervisor, or a
#: stop that outlived --shutdown-timeout), or jobs still running when --shutdown-timeout passed.
CHILD_KILLED = 1
#: The app (the broker module or an extra module) failed to import: restarting cannot help.
CHILD_IMPORT = 2
#: The broker could not be reached while the child booted.
CHILD_CONNECT = 3
#: A configuration error stopped the child's boot (a ConfigError: the store's URL, credentials or
#: schema, the broker's queues, an actor's declaration): restarting cannot help (sysexits' EX_CONFIG).
CHILD_CONFIG = 78
#: An operator stopped the child (`reliable.process_commands`): it finished its running jobs and left;
#: the supervisor starts a fresh child in its slot, counting no crash.
CHILD_STOPPED = 74
#: The child processed --max-jobs jobs, finished its running ones and left to be replaced.
CHILD_RECYCLE_JOBS = 75
#: The child's resident memory passed --max-memory; it finished its running jobs and left.
CHILD_RECYCLE_MEMORY = 76

#: Stopped by TERM/INT: every child finished its running jobs.
EXIT_OK = 0
#: Stopped, but not every child finished its running jobs (they are recovered by lease): a second TERM/INT,
#: a child killed or failing during the stop, or one that outlived --shutdown-timeout.
EXIT_KILLED = 1
#: Bad usage, the app does not import, or a configuration error (a child exited with CHILD_IMPORT or
#: CHILD_CONFIG while booting).
EXIT_APP = 2
#: Crash loop: K crashes within the window; every child was stopped.
EXIT_CRASH_LOOP = 3

_MEANING = {
    CHILD_OK: "stopped on request",
    CHILD_KILLED: "stopped without its running jobs",
    CHILD_IMPORT: "the app failed to import",
    CHILD_CONNECT: "the broker connection failed at boot",
    CHILD_CONFIG: "a configuration error at boot",
    CHILD_RECYCLE_JOBS: "recycled after --max-jobs",
    CHILD_RECYCLE_MEMORY: "recycled over --max-memory",
    CHILD_STOPPED: "stopped by an operator",
}


class ExitKind(enum.Enum):
    """What a child's exit means to the supervisor (the value is the `reason` label of restarts)."""

    STOPPED = "stopped"  # the supervisor asked (shutdown or reload): no restart counted here
    RECYCLE_JOBS = "recycle_jobs"
    RECYCLE_MEMORY = "recycle_memory"
    OPERATOR_STOP = "operator_stop"  # an operator's stop (reliable.process_commands): replaced at once
    APP_BROKEN = "app_broken"  # import failed or a configuration error at boot: fatal for the supervisor
    CRASH = "crash"


@dataclass(frozen=True)
class ChildExit:
    """One child's exit: its kind and a sentence for logs and the crash-loop message."""

    kind: ExitKind
    returncode: int
    cause: str


def describe_code(returncode: int) -> str:
    """`returncode` as a person reads it: "killed by SIGKILL", "exit code 2 (the app failed to import)"."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    meaning = _MEANING.get(returncode)
    return f"exit code {returncode}" + (f" ({meaning})" if meaning else "")


def finished_its_jobs(returncode: int) -> bool:
    """Whether a child that exits with `returncode` while stopping had finished its running jobs.

    Only a graceful stop (0, or 74 an operator's) or a recycle (75, 76) waits for them; a signal, a hard stop (1), the
    --shutdown-timeout passing (1) or any other code may have left some running (their lease recovers them).
    """
    return returncode in (CHILD_OK, CHILD_STOPPED, CHILD_RECYCLE_JOBS, CHILD_RECYCLE_MEMORY)


def classify(returncode: int, *, requested: bool, booted: bool) -> ChildExit:
    """What the exit of a child means.

    `requested`: the supervisor had told it to stop (shutdown, reload); `booted`: it had reported
    ready. A recycle code wins over everything (the child chose to leave), an operator's stop over all
    but the supervisor's own stop; an asked-for stop is
    never a crash, whatever the code; the app failing to import or a configuration error at boot is
    fatal; anything else
    (a signal, another code, a death before ready) is a crash.
    """
    cause = describe_code(returncode)
    if returncode == CHILD_RECYCLE_JOBS:
        return ChildExit(ExitKind.RECYCLE_JOBS, returncode, cause)
    if returncode == CHILD_RECYCLE_MEMORY:
        return ChildExit(ExitKind.RECYCLE_MEMORY, returncode, cause)
    if returncode == CHILD_STOPPED and not requested:
        return ChildExit(ExitKind.OPERATOR_STOP, returncode, cause)
    if requested:
        return ChildExit(ExitKind.STOPPED, returncode, cause)
    if returncode in (CHILD_IMPORT, CHILD_CONFIG) and not booted:
        return ChildExit(ExitKind.APP_BROKEN, returncode, cause)
    if not booted:
        cause = f"died while booting, {cause}"
    return ChildExit(ExitKind.CRASH, returncode, cause)
