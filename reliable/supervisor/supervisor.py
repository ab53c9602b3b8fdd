"""The supervisor: N child worker processes kept running; a crashed one is replaced, the others untouched.

Dramatiq's CLI stops every worker when one child dies (Dramatiq issue #882). Here each child is a
slot: when its process exits, the exit code says why (`exits.classify`) and only that slot acts:
a crash restarts it after a backoff, a recycle (--max-jobs, --max-memory) or a reload restarts it at
once, the app failing to import or K crashes within the window (`restarts.CrashLoop`) stop every
child and end the supervisor with a non-zero code.

One thread does everything (the main one): it waits in `select` on the children's ready pipes and
a signal wakeup pipe (SIGCHLD wakes it the moment a child dies), then looks at every slot. Signal
handlers only record the signal. Children are fresh interpreters (`python -m reliable.supervisor`, running `child.py`).

Nothing but the loop's own bug ends it early: a failing `on_change` (the metrics textfile) is logged,
a child that cannot be spawned (EMFILE, ENOMEM, a missing interpreter) is a crash of its slot.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..isotime import format_time
from .child import HARD_STOP_SIGNAL, ChildConfig
from .exits import CHILD_CONFIG, EXIT_APP, EXIT_CRASH_LOOP, EXIT_KILLED, EXIT_OK, ExitKind, classify, finished_its_jobs
from .metrics import SupervisorMetrics, forget_process
from .restarts import Backoff, CrashLoop, CrashWindow

__all__ = ["CHILD_MODULE", "LOGGER_NAME", "Supervisor", "SupervisorConfig"]

#: The logger of the supervisor's events (one record per start, ready, exit, restart, signal).
LOGGER_NAME = "reliable.worker"
#: What a child runs: ``python -m CHILD_MODULE CONFIG_JSON`` (its __main__.py calls child.main; running
#: reliable.supervisor.child itself would execute a module the package already imported).
CHILD_MODULE = "reliable.supervisor"
_TICK = 0.5


@dataclass(frozen=True)
class SupervisorConfig:
    """What `reliable worker` was asked to run.

    `stop_margin`: a child still alive `shutdown_timeout + stop_margin` seconds after it was told to
    stop gets the hard stop (`child.HARD_STOP_SIGNAL`); `kill_after`: one still alive that long after a
    hard stop is SIGKILLed.
    """

    app: str
    modules: tuple[str, ...] = ()
    queues: tuple[str, ...] | None = None
    processes: int = 1
    threads: int = 8
    paths: tuple[str, ...] = (".",)
    max_jobs: int | None = None
    max_memory_mb: float | None = None
    crash_loop: CrashWindow = field(default_factory=CrashWindow)
    backoff: Backoff = field(default_factory=Backoff)
    boot_timeout: float = 120.0
    shutdown_timeout: float = 600.0
    log_level: str = "INFO"
    python: str = sys.executable
    stop_margin: float = 15.0
    kill_after: float = 10.0


@dataclass
class _Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    ready_fd: int | None = None
    started_at: float = 0.0
    ready_at: float | None = None
    stop_requested: str | None = None  # "shutdown" or "reload": this exit is not a crash
    stop_requested_at: float | None = None
    generation: int = 0  # children started in this slot so far
    streak: int = 0  # crashes in a row
    start_at: float | None = 0.0  # when to start the next child (None: not scheduled)
    pending_reason: str | None = None  # the restart reason the next start counts
    exited_at: float | None = None
    hard_stop_at: float | None = None
    killed: bool = False  # SIGKILL sent (boot timeout, or a hard stop not obeyed): wait for the exit


class Supervisor:
    """Runs the children of `config` until TERM/INT, a crash loop, or the app failing to import.

    `run()` returns the exit code (`exits.EXIT_*`); `failure` then holds the sentence explaining a
    non-zero one. `clock` is monotonic seconds (injectable); `on_change` is called after any
    change of the metrics (to rewrite a textfile).
    """

    def __init__(self, config: SupervisorConfig, metrics: SupervisorMetrics, *,
                 clock: Callable[[], float] = time.monotonic, on_change: Callable[[], None] | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.on_change = on_change
        self.logger = logger if logger is not None else logging.getLogger(LOGGER_NAME)
        self.slots = [_Slot(i) for i in range(config.processes)]
        self.crashes = CrashLoop(config.crash_loop)
        self.failure: str | None = None
        self._code = EXIT_OK
        self._stopping = False
        self._hard = False
        self._signals: list[int] = []
        self._reload_queue: list[int] = []
        self._reloading: tuple[int, int] | None = None  # (slot, generation of the child told to stop)
        self._wake_r = self._wake_w = -1

    # -- events -----------------------------------------------------------------------------------

    def _event(self, event: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
        record = {"ts": format_time(time.time(), ms=True), "event": event, "supervisor_pid": os.getpid(), **fields}
        self.logger.log(level, message, extra={"reliable_event": record})

    def _changed(self) -> None:
        self.metrics.up(sum(1 for s in self.slots
                            if s.proc is not None and s.ready_at is not None and s.stop_requested is None))
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception as exc:  # a full disk must not stop the supervision of healthy children
                self._event("metrics_write_failed", f"updating the metrics failed ({exc!r}); supervising goes on",
                            logging.WARNING, error=repr(exc))

    # -- children ---------------------------------------------------------------------------------

    def _start(self, slot: _Slot) -> None:
        slot.start_at = None
        try:
            ready_r, ready_w = os.pipe()
        except OSError as exc:
            self._start_failed(slot, exc)
            return
        child = ChildConfig(
            app=self.config.app, slot=slot.index, supervisor_pid=os.getpid(), ready_fd=ready_w,
            modules=list(self.config.modules), queues=list(self.config.queues) if self.config.queues else None,
            threads=self.config.threads, paths=[os.path.abspath(p) for p in self.config.paths],
            max_jobs=self.config.max_jobs, max_memory_mb=self.config.max_memory_mb,
            shutdown_timeout=self.config.shutdown_timeout, log_level=self.config.log_level,
            restarts=slot.generation,
        )
        try:
            slot.proc = subprocess.Popen([self.config.python, "-m", CHILD_MODULE, child.to_json()],
                                         pass_fds=(ready_w,))
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(ready_r)
            self._start_failed(slot, exc)
            return
        finally:
            os.close(ready_w)
        slot.ready_fd = ready_r
        slot.generation += 1
        slot.started_at = self.clock()
        slot.ready_at = slot.exited_at = slot.hard_stop_at = slot.stop_requested_at = None
        slot.stop_requested, slot.killed = None, False
        reason, slot.pending_reason = slot.pending_reason, None
        if reason is not None:
            self.metrics.restarted(reason)
        self._event("child_started", f"child {slot.index} started (PID {slot.proc.pid})", child=slot.index,
                    pid=slot.proc.pid, reason=reason or "boot")
        self._changed()

    def _start_failed(self, slot: _Slot, exc: BaseException) -> None:
        """The child of `slot` could not even be spawned: a crash of that slot (backoff, crash-loop window)."""
        cause = f"could not be started: {exc}"
        slot.ready_at = None
        self._event("child_start_failed", f"child {slot.index} {cause}", logging.WARNING, child=slot.index,
                    error=str(exc))
        self._crashed(slot, self.clock(), stable=False, who=f"child {slot.index}", cause=cause)
        self._changed()

    def _crashed(self, slot: _Slot, now: float, *, stable: bool, who: str, cause: str) -> None:
        """Count a crash of `slot` (`stable`: its child had run long enough to end the streak); restart or fail."""
        if stable:
            slot.streak = 0
        slot.streak += 1
        if self.crashes.record(now):
            self._fail(EXIT_CRASH_LOOP, f"crash loop: {self.config.crash_loop.describe()}; stopping every "
                                        f"child. The last: {who} {cause}")
        else:
            delay = self.config.backoff.delay(slot.streak)
            slot.start_at, slot.pending_reason = now + delay, "crash"
            self._event("child_restart_scheduled", f"child {slot.index} restarts in {delay:g}s",
                        child=slot.index, reason="crash", delay_seconds=delay, streak=slot.streak)

    def _read_ready(self, slot: _Slot) -> None:
        assert slot.ready_fd is not None
        data = os.read(slot.ready_fd, 64)
        if data.startswith(b"ready") and slot.proc is not None and slot.ready_at is None:
            slot.ready_at = self.clock()
            self._event("child_ready", f"child {slot.index} (PID {slot.proc.pid}) is consuming", child=slot.index,
                        pid=slot.proc.pid, boot_seconds=round(slot.ready_at - slot.started_at, 3))
            # Only a child started after the reload's TERM ends it (not the old one finishing its boot).
            if self._reloading is not None and self._reloading[0] == slot.index and \
                    slot.generation > self._reloading[1]:
                self._reloading = None
            self._changed()
        if not data:
            os.close(slot.ready_fd)
            slot.ready_fd = None

    def _signal_child(self, slot: _Slot, sig: signal.Signals) -> None:
        if slot.proc is not None and slot.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                slot.proc.send_signal(sig)

    def _request_stop(self, slot: _Slot, why: str) -> None:
        """Tell the child of `slot` to stop after its running jobs (`why`: "shutdown" or "reload")."""
        slot.stop_requested, slot.stop_requested_at = why, self.clock()
        self._signal_child(slot, signal.SIGTERM)

    def _exited(self, slot: _Slot, returncode: int) -> None:
        assert slot.proc is not None
        now = self.clock()
        pid = slot.proc.pid
        requested = slot.stop_requested is not None or self._stopping
        result = classify(returncode, requested=requested, booted=slot.ready_at is not None)
        # A child that had started consuming and leaves a stop any other way may have left jobs unfinished.
        unfinished = self._stopping and slot.ready_at is not None and not finished_its_jobs(returncode)
        uptime = now - slot.started_at
        if slot.ready_fd is not None:
            os.close(slot.ready_fd)
            slot.ready_fd = None
        slot.proc, slot.exited_at = None, now
        self.metrics.child_exited(slot.index, returncode)
        try:
            forget_process(pid)
        except OSError as exc:
            self._event("metrics_write_failed", f"marking child {slot.index}'s metrics dead failed ({exc!r})",
                        logging.WARNING, error=repr(exc))
        level = logging.WARNING if unfinished or result.kind in (ExitKind.CRASH, ExitKind.APP_BROKEN) \
            else logging.INFO
        self._event("child_exited", f"child {slot.index} (PID {pid}) exited: {result.cause}", level,
                    child=slot.index, pid=pid, returncode=returncode, kind=result.kind.value, cause=result.cause,
                    uptime_seconds=round(uptime, 3))
        if self._stopping:
            if unfinished:
                self._code = self._code or EXIT_KILLED
                if self.failure is None and not self._hard:
                    self.failure = (f"child {slot.index} (PID {pid}) {result.cause} while stopping: the jobs it was "
                                    "running were not finished (their lease recovers them)")
            self._changed()
            return
        if result.kind is ExitKind.APP_BROKEN and returncode == CHILD_CONFIG:
            self._fail(EXIT_APP, f"child {slot.index} (PID {pid}) stopped at boot, {result.cause}: its error line "
                                 "above says what to fix or run; not restarting")
        elif result.kind is ExitKind.APP_BROKEN:
            self._fail(EXIT_APP, f"child {slot.index} (PID {pid}) could not import the app {self.config.app!r} "
                                 f"({result.cause}): see its traceback above; not restarting")
        elif result.kind is ExitKind.CRASH:
            self._crashed(slot, now, stable=slot.ready_at is not None and uptime >= self.config.backoff.stable_after,
                          who=f"child {slot.index} (PID {pid})", cause=result.cause)
        else:
            slot.streak = 0
            reason = "reload" if result.kind is ExitKind.STOPPED else result.kind.value  # or operator_stop
            slot.start_at, slot.pending_reason = now, reason
        self._changed()

    def _fail(self, code: int, message: str) -> None:
        self._code, self.failure = code, message
        self._event("supervisor_failed", message, logging.CRITICAL, exit_code=code)
        self._stop_all()

    def _stop_all(self) -> None:
        self._stopping = True
        self._reload_queue.clear()
        for slot in self.slots:
            slot.start_at = None
            if slot.proc is not None and slot.stop_requested is None:
                self._request_stop(slot, "shutdown")
        self._changed()

    # -- signals ----------------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum != signal.SIGCHLD:
            self._signals.append(signum)

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                if self._stopping:
                    continue
                self._reload_queue = list(range(len(self.slots)))
                self._event("reload_requested", "SIGHUP: restarting the children one at a time", signal=name)
            elif not self._stopping:
                self._event("stop_requested", f"{name}: stopping every child after its running jobs", signal=name)
                self._stop_all()
            elif not self._hard:
                self._hard = True
                self._code = self._code or EXIT_KILLED
                self._event("hard_stop_requested", f"second {name}: stopping every child at once",
                            logging.WARNING, signal=name)
                for slot in self.slots:
                    self._hard_stop(slot)

    def _hard_stop(self, slot: _Slot) -> None:
        """Tell the child of `slot` to exit without its running jobs; SIGKILL it `kill_after` s later."""
        if slot.proc is not None and slot.hard_stop_at is None:
            self._signal_child(slot, HARD_STOP_SIGNAL)
            slot.hard_stop_at = self.clock()

    def _advance_reload(self) -> None:
        if self._reloading is not None or not self._reload_queue:
            return
        index = self._reload_queue.pop(0)
        slot = self.slots[index]
        if slot.proc is None:  # waiting for a restart anyway: it will run the new code
            return
        self._reloading = (index, slot.generation)
        self._request_stop(slot, "reload")
        self._changed()

    # -- the loop ---------------------------------------------------------------------------------

    def _wait(self, timeout: float) -> None:
        fds = [s.ready_fd for s in self.slots if s.ready_fd is not None]
        try:
            readable, _, _ = select.select([self._wake_r, *fds], [], [], timeout)
        except InterruptedError:  # pragma: no cover  (PEP 475 retries; kept for odd platforms)
            return
        for fd in readable:
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 512)
                continue
            for slot in self.slots:
                if slot.ready_fd == fd:
                    self._read_ready(slot)

    def _step(self) -> None:
        self._handle_signals()
        now = self.clock()
        for slot in self.slots:
            if slot.proc is not None:
                returncode = slot.proc.poll()
                if returncode is not None:
                    self._exited(slot, returncode)
                elif slot.killed:
                    continue
                elif slot.ready_at is None and now - slot.started_at > self.config.boot_timeout:
                    self._event("child_boot_timeout", f"child {slot.index} not ready after "
                                f"{self.config.boot_timeout:g}s: killing it", logging.WARNING, child=slot.index)
                    slot.proc.kill()
                    slot.killed = True
                elif slot.hard_stop_at is not None:
                    if now - slot.hard_stop_at > self.config.kill_after:
                        slot.proc.kill()
                        slot.killed = True
                elif slot.stop_requested_at is not None and \
                        now - slot.stop_requested_at > self.config.shutdown_timeout + self.config.stop_margin:
                    self._event("child_stop_timeout", f"child {slot.index} (PID {slot.proc.pid}) still stopping "
                                f"{self.config.shutdown_timeout + self.config.stop_margin:g}s after it was asked: "
                                "stopping it at once", logging.WARNING, child=slot.index, pid=slot.proc.pid)
                    self._hard_stop(slot)
        if not self._stopping:
            self._advance_reload()
            for slot in self.slots:
                if slot.proc is None and slot.start_at is not None and slot.start_at <= now:
                    self._start(slot)

    def _next_timeout(self) -> float:
        now = self.clock()
        due = [s.start_at - now for s in self.slots if s.proc is None and s.start_at is not None]
        return max(0.0, min([_TICK, *due]))

    def run(self) -> int:
        """Start the children, supervise them until the end; the exit code."""
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        old_wakeup = signal.set_wakeup_fd(self._wake_w)
        self._event("supervisor_started", f"reliable worker: {self.config.processes} children of "
                    f"{self.config.app!r}, {self.config.threads} threads each", processes=self.config.processes,
                    threads=self.config.threads, app=self.config.app)
        try:
            while True:
                self._step()
                if self._stopping and all(s.proc is None for s in self.slots):
                    break
                self._wait(self._next_timeout())
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for slot in self.slots:  # only on an error in the loop itself: never leave children behind
                if slot.proc is not None and slot.proc.poll() is None:
                    slot.proc.kill()
                    slot.proc.wait(10)
                if slot.ready_fd is not None:
                    os.close(slot.ready_fd)
            os.close(self._wake_r)
            os.close(self._wake_w)
        self._event("supervisor_stopped", f"reliable worker stopped (exit code {self._code})", exit_code=self._code)
        return self._code

