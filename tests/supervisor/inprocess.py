"""The supervisor's loop in the test process, with `fake_child.py` children (no Dramatiq, no service).

`FakeChildren` is the interpreter the supervisor is given (`SupervisorConfig.python`): a wrapper
script running fake_child.py with the test's settings; its log says what each child did and when.
`drive` runs `Supervisor.run` on the main thread (it needs the signals) while a script drives it from
another thread, by signals sent to this process once a condition holds.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from reliable.supervisor import Supervisor, SupervisorConfig, SupervisorMetrics

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


def signal_self(sig: signal.Signals) -> None:
    """Send `sig` to this process (the supervisor running in it)."""
    os.kill(os.getpid(), sig)


def drive(sup: Supervisor, script: Callable[[], None], *, stop_within: float = 30.0) -> int:
    """Run `sup` until it stops while `script` runs on a thread; the exit code.

    When the script fails, or the supervisor is still running `stop_within` s after the script
    returned, the supervisor gets two TERMs (its hard stop) and the failure is raised. TERM and HUP
    are ignored by this process around the run, so a signal sent late cannot kill the test runner.
    """
    failures: list[BaseException] = []
    stopped = threading.Event()

    def run_script() -> None:
        try:
            script()
            if not stopped.wait(stop_within):
                raise AssertionError(f"the supervisor still runs {stop_within:g}s after the script ended")
        except BaseException as exc:
            failures.append(exc)
            signal_self(signal.SIGTERM)
            signal_self(signal.SIGTERM)

    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGHUP)}
    thread = threading.Thread(target=run_script, daemon=True)
    thread.start()
    try:
        code = sup.run()
    finally:
        stopped.set()
        thread.join(stop_within)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failures:
        raise failures[0]
    return code
