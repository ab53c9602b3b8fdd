"""An operator's command to this process (reliable.process_commands), picked up by its heartbeat.

After each beat the heartbeat thread reports which thread runs which of the jobs it holds (written
only when that changed) and reads the process's command in the same transaction
(`reliable.store.process_commands.report`):
- quiet: this process takes no new message and finishes its running ones. `quiet` turns true and the
  paused-queue step (`reliable.worker.paused`) puts off every delivery as it would a paused queue's:
  published again later for another process, skipped before its claim, no attempt spent;
- stop: quiet, then a graceful shutdown of this process, as a SIGTERM asks for one (`stop_process`):
  a `reliable worker` child is sent `child.OPERATOR_STOP_SIGNAL` and leaves with
  `exits.CHILD_STOPPED`, so its supervisor replaces it without counting a crash; a process of the
  `dramatiq` CLI is sent SIGTERM (Dramatiq's CLI then stops its sibling processes too: it restarts
  none, see docs/console.md);
- no command after a quiet (an operator's resume): `quiet` turns false and the process takes messages
  again. A stop once read is kept whatever the store says later.
A store error is logged and the report tried again at the next beat.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence

from ..errors import StoreError
from ..store import StoreCore
from ..store.process_commands import report
from ..supervisor.exits import OPERATOR_STOP_SIGNAL, SUPERVISOR_PID_ENV
from .context import JobContext

__all__ = ["ProcessCommands", "busy_threads", "stop_process"]

logger = logging.getLogger("reliable.worker")


def busy_threads(jobs: Sequence[JobContext]) -> tuple[tuple[str, str], ...]:
    """(job id, thread name) of the running `jobs`, by job id (a thread gone already shows its ident)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return tuple(sorted((job.job_id, names.get(job.thread_id, f"thread {job.thread_id}")) for job in jobs))


def stop_process() -> None:
    """Ask this process for a graceful stop, as its process manager would."""
    supervised = bool(os.environ.get(SUPERVISOR_PID_ENV))
    os.kill(os.getpid(), OPERATOR_STOP_SIGNAL if supervised else signal.SIGTERM)


class ProcessCommands:
    """This process's operator command, as its heartbeat last read it."""

    def __init__(self, store: Callable[[], StoreCore], worker_id: Callable[[], str], *,
                 stop: Callable[[], None] = stop_process) -> None:
        self._store, self._worker_id, self._stop = store, worker_id, stop
        self._reported: tuple[tuple[str, str], ...] | None = None
        self.command: str | None = None
        self._stopping = False

    @property
    def quiet(self) -> bool:
        """Whether this process was told to take no new message (quiet, or stop)."""
        return self.command is not None

    def after_beat(self, jobs: Sequence[JobContext]) -> None:
        """Report the busy threads (when changed) and act on the command read back."""
        busy = busy_threads(jobs)
        try:
            found = report(self._store(), self._worker_id(), None if busy == self._reported else busy)
        except StoreError as exc:
            logger.warning("could not report this process's threads or read its command (next beat retries): %s",
                           exc)
            return
        self._reported = busy
        if self.command == "stop":
            found = "stop"  # a stop is never taken back (a process stopping stays quiet)
        if found is not None and found != self.command:
            logger.warning("operator command %r for this worker process: %s", found,
                           "taking no new message" if found == "quiet" else "stopping after the running jobs")
        elif found is None and self.command is not None:
            logger.warning("operator resumed this worker process: taking messages again")
        self.command = found
        if self.command == "stop" and not self._stopping:
            self._stopping = True
            self._stop()
