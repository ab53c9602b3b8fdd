"""The supervisor's loop in the test process, with `fake_child.py` children (no Dramatiq, no service).

`FakeChildren` is the interpreter the supervisor is given (`SupervisorConfig.python`): a wrapper
script running fake_child.py with the test's settings; its log says what each child did and when.
`drive` runs `Supervisor.run` on the main thread (it needs the signals) while a script drives it from
another thread, by signals sent to this process once a condition holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from reliable.supervisor import Supervisor, SupervisorConfig, SupervisorMetrics

from support import wait_for

T = TypeVar("T")
FAKE_CHILD = Path(__file__).parent / "fake_child.py"


@dataclass(frozen=True)
class Step:
    """One line of the fake children's log."""

    pid: int
    slot: int
    what: str
    at: float


class FakeChildren:
    """An executable wrapper around fake_child.py with `env` (FAKE_*), in `directory`; the children's log."""

    def __init__(self, directory: Path, **env: str) -> None:
        self.log = directory / "fake.log"
        self.python = directory / "python"
        self._env = {"FAKE_LOG": str(self.log), **env}
        self.install()

    def install(self) -> None:
        """(Re)create the wrapper: the supervisor can spawn children."""
        exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in self._env.items())
        self.python.write_text(f'#!/bin/sh\nexec env {exports} {shlex.quote(sys.executable)} '
                               f'{shlex.quote(str(FAKE_CHILD))} "$@"\n')
        self.python.chmod(0o755)

    def remove(self) -> None:
        """Delete the wrapper: spawning a child now fails (FileNotFoundError, as a vanished venv would)."""
        self.python.unlink()

    def output(self) -> str:
        """The log as text."""
        return self.log.read_text() if self.log.exists() else ""

    def steps(self, what: str | None = None, slot: int | None = None) -> list[Step]:
        """The log's steps, optionally only `what` ("start", "ready", "term1", "hard", "exit") of `slot`."""
        found = []
        for line in self.output().splitlines():
            pid, index, step, at = line.split()
            if (what is None or step == what) and (slot is None or int(index) == slot):
                found.append(Step(int(pid), int(index), step, float(at)))
        return found


class Events(logging.Handler):
    """The supervisor's events (the `reliable_event` dict of each record), as a list."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.__dict__["reliable_event"])

    def named(self, name: str) -> list[dict[str, Any]]:
        """The events called `name`, in order."""
        return [e for e in list(self.records) if e["event"] == name]


def supervisor(config: SupervisorConfig, *, on_change: Callable[[], None] | None = None,
               ) -> tuple[Supervisor, Events, CollectorRegistry]:
    """A Supervisor for `config` with its own registry and an event log of its own."""
    events = Events()
    logger = logging.getLogger(f"reliable.worker.test.{id(events)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(events)
    registry = CollectorRegistry()
    return Supervisor(config, SupervisorMetrics(registry, config.processes), on_change=on_change,
                      logger=logger), events, registry


#: The events the supervisor logs for a signal it acted on.
SIGNAL_EVENTS = ("stop_requested", "hard_stop_requested", "reload_requested")


class Driver:
    """What a script uses to drive a running supervisor: signals to this process, waits on conditions.

    A signal is sent only while the supervisor's handlers are in place (one sent later could kill the
    test runner), and `signal` returns once the supervisor acted on it: Python runs a handler once for
    signals of one kind that arrive before it runs, so two TERMs sent together may count as one.
    """

    def __init__(self, events: Events, context: Callable[[], str]) -> None:
        self.events = events
        self.context = context
        self.stopped = threading.Event()
        self._lock = threading.Lock()

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to this process (the supervisor in it) and wait until it acted on it (an event)."""
        wait_for(lambda: self.stopped.is_set() or signal.getsignal(sig) is not signal.SIG_IGN,
                 "the supervisor's signal handlers", timeout=10)
        acted = len(self._acted())
        with self._lock:
            if self.stopped.is_set():
                raise AssertionError(f"the supervisor stopped before {sig.name} could be sent")
            os.kill(os.getpid(), sig)
        self.until(lambda: len(self._acted()) > acted, f"the supervisor acting on {sig.name}", timeout=10)

    def _acted(self) -> list[dict[str, Any]]:
        return [e for e in list(self.events.records) if e["event"] in SIGNAL_EVENTS]

    def until(self, condition: Callable[[], T], what: str, timeout: float = 30.0) -> T:
        """`support.wait_for(condition)`, failing at once when the supervisor stops first."""

        def check() -> T:
            value = condition()
            if not value and self.stopped.is_set():
                raise AssertionError(f"the supervisor stopped while waiting for {what}\n{self.context()[-3000:]}")
            return value

        return wait_for(check, what, timeout=timeout, context=self.context)

    def finish(self) -> None:
        """The supervisor stopped: no signal is sent any more."""
        with self._lock:
            self.stopped.set()


def drive(sup: Supervisor, events: Events, script: Callable[[Driver], None], context: Callable[[], str] = str,
          *, stop_within: float = 30.0) -> int:
    """Run `sup` until it stops while `script` drives it from a thread; the exit code.

    When the script fails, or the supervisor is still running `stop_within` s after the script
    returned, the supervisor gets two TERMs (its hard stop) and the failure is raised. TERM and HUP
    are ignored by this process around the run, so a signal arriving late is harmless.
    """
    failures: list[BaseException] = []
    driver = Driver(events, context)

    def run_script() -> None:
        try:
            script(driver)
            if not driver.stopped.wait(stop_within):
                raise AssertionError(f"the supervisor still runs {stop_within:g}s after the script ended")
        except BaseException as exc:
            failures.append(exc)
            for _ in range(2):  # a stop, then the hard stop
                with contextlib.suppress(AssertionError):
                    driver.signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGHUP)}
    thread = threading.Thread(target=run_script, daemon=True)
    thread.start()
    try:
        code = sup.run()
    finally:
        driver.finish()
        thread.join(stop_within + 5)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failures:
        raise failures[0]
    return code
