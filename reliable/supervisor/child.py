"""One child of `reliable worker`: Dramatiq's Worker for the app's broker, until told to stop or recycled.

Run by the supervisor as ``python -m reliable.supervisor CONFIG_JSON`` (`__main__.py`; a fresh interpreter, so
a reload imports the app's code anew and no lock held by a supervisor thread is inherited). It
reuses Dramatiq's own pieces: `dramatiq.cli.import_broker` to load the broker and `dramatiq.Worker`
to consume; stopping is `Worker.stop` (running jobs finish, prefetched messages are requeued).

Signals: TERM asks for a graceful stop (exit 0); more TERMs change nothing (systemd's default
KillMode=control-group TERMs every process of the unit, and the supervisor forwards its own: two TERMs
are one request). `HARD_STOP_SIGNAL` (SIGUSR1, sent only by the supervisor) stops at once (exit 1: the
jobs still running are recovered by their lease, their messages redelivered by RabbitMQ).
`exits.OPERATOR_STOP_SIGNAL` (SIGUSR2, sent by the child's own worker when an operator stops the process:
reliable.worker.commands) is a graceful stop that exits CHILD_STOPPED, so the supervisor starts a fresh
child in the slot without counting a crash. INT and HUP
are ignored: the supervisor decides and forwards. The exit code says why the child left (`exits`).

Signal handlers only set plain attributes (never a lock or an Event, which a handler running on the
main thread while it holds the same lock would deadlock on); the main thread polls them.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .exits import (
    CHILD_CONFIG,
    CHILD_CONNECT,
    CHILD_IMPORT,
    CHILD_KILLED,
    CHILD_OK,
    CHILD_RECYCLE_JOBS,
    CHILD_RECYCLE_MEMORY,
    CHILD_STOPPED,
    OPERATOR_STOP_SIGNAL,
    RESTARTS_ENV,
    SLOT_ENV,
    SUPERVISOR_PID_ENV,
)

__all__ = ["HARD_STOP_SIGNAL", "STOP_GRACE", "ChildConfig", "main", "resident_bytes"]

LOGFORMAT = "[%(asctime)s] [PID %(process)d] [%(threadName)s] [%(name)s] [%(levelname)s] %(message)s"
#: The supervisor's "stop at once" to a child; never sent by systemd, a terminal or Kubernetes.
HARD_STOP_SIGNAL = signal.SIGUSR1
#: Seconds a stopping child gets past --shutdown-timeout to stop its consumers and requeue prefetched messages.
STOP_GRACE = 5.0
_PR_SET_PDEATHSIG = 1
_POLL = 0.1


@dataclass(frozen=True)
class ChildConfig:
    """What a child needs, passed as JSON on its command line."""

    app: str
    slot: int
    supervisor_pid: int
    ready_fd: int
    modules: list[str] = field(default_factory=list)
    queues: list[str] | None = None
    threads: int = 8
    paths: list[str] = field(default_factory=list)
    max_jobs: int | None = None
    max_memory_mb: float | None = None
    memory_interval: float = 1.0
    shutdown_timeout: float = 600.0
    log_level: str = "INFO"
    restarts: int = 0  # children the slot had before this one (shown on its worker process record)

    def to_json(self) -> str:
        """The config as the child's command-line argument."""
        return json.dumps(asdict(self))


def resident_bytes(pid: int | str = "self") -> int:
    """Resident set size of process `pid` in bytes, from /proc (Linux)."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Exit:
    """Why the child is leaving: the first recycle reason set wins; `term` is set by the TERM handler.

    `request` (worker threads, the main thread: never a signal handler) wakes the main thread at
    once; the TERM handler only sets `term`, which the main thread sees within `_POLL` s.
    """

    def __init__(self) -> None:
        self.code: int | None = None
        self.term = False
        self.operator = False  # an operator's stop (OPERATOR_STOP_SIGNAL, sent by the child's own worker)
        self.wake = threading.Event()
        self._lock = threading.Lock()

    def request(self, code: int) -> None:
        with self._lock:
            if self.code is None:
                self.code = code
        self.wake.set()

    def reason(self) -> int | None:
        """The exit code to leave with, or None to go on serving."""
        if self.code is not None:
            return self.code
        return CHILD_OK if self.term else CHILD_STOPPED if self.operator else None


def _job_counter(limit: int, leave: _Exit) -> Any:
    """A Dramatiq middleware that asks the child to recycle once `limit` messages were processed or skipped."""
    from dramatiq.middleware import Middleware

    class JobCounter(Middleware):
        def __init__(self) -> None:
            self.count = 0
            self.lock = threading.Lock()
            #: The worker's threads (set once it exists): told to take no further message at the limit.
            self.worker_threads: list[Any] = []

        def _one(self) -> None:
            with self.lock:
                self.count += 1
                reached = self.count >= limit
            if reached:
                # Exact: no thread takes a prefetched message while the main thread starts the stop
                # (those go back to RabbitMQ unclaimed when the consumers close).
                for thread in self.worker_threads:
                    thread.stop()
                leave.request(CHILD_RECYCLE_JOBS)

        def after_process_message(self, broker: Any, message: Any, *, result: Any = None,
                                  exception: BaseException | None = None) -> None:
            self._one()

        def after_skip_message(self, broker: Any, message: Any) -> None:
            self._one()

    return JobCounter()


def _die_with_parent(supervisor_pid: int) -> None:
    """Ask Linux to TERM this child when the supervisor dies (a kill -9 of it must not leave orphans)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            return
    if os.getppid() != supervisor_pid:  # it died before the request took effect
        os._exit(CHILD_OK)


def _hard_stop(signum: int, frame: Any) -> None:
    """HARD_STOP_SIGNAL: leave now, without the running jobs (no logging: its locks may be held here)."""
    os.write(2, b"reliable worker child: hard stop: exiting without waiting for running jobs\n")
    os._exit(CHILD_KILLED)


def _exit_after(seconds: float) -> None:
    """Leave with CHILD_KILLED if the stop still runs `seconds` from now (a hung job, a hung consumer)."""

    def expire() -> None:
        # os.write, not logging: the thread that hangs may hold a logging lock.
        os.write(2, b"reliable worker child: the stop took more than --shutdown-timeout + %g s: exiting without "
                    b"the running jobs\n" % STOP_GRACE)
        os._exit(CHILD_KILLED)

    watchdog = threading.Timer(seconds, expire)
    watchdog.daemon = True
    watchdog.start()


def run(config: ChildConfig) -> int:
    """Boot the worker, serve until a stop or recycle reason, stop gracefully; the exit code."""
    leave = _Exit()
    logger = logging.getLogger(f"reliable.worker.child({config.slot})")

    def on_term(signum: int, frame: Any) -> None:
        leave.term = True

    def on_operator_stop(signum: int, frame: Any) -> None:
        leave.operator = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(OPERATOR_STOP_SIGNAL, on_operator_stop)
    signal.signal(HARD_STOP_SIGNAL, _hard_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _die_with_parent(config.supervisor_pid)
    os.environ[SUPERVISOR_PID_ENV] = str(config.supervisor_pid)
    os.environ[SLOT_ENV], os.environ[RESTARTS_ENV] = str(config.slot), str(config.restarts)
    random.seed()
    logging.basicConfig(level=config.log_level, format=LOGFORMAT, stream=sys.stderr)
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    for path in reversed(config.paths):
        sys.path.insert(0, path)

    from dramatiq import BrokerConnectionError, Worker
    from dramatiq.cli import import_broker

    from ..compat.dramatiq_internals import worker_threads
    from ..errors import ConfigError

    try:
        _, broker = import_broker(config.app)  # type: ignore[no-untyped-call]
        broker.emit_after("process_boot")
        for module in config.modules:
            importlib.import_module(module)
        counter = _job_counter(config.max_jobs, leave) if config.max_jobs is not None else None
        if counter is not None:
            broker.add_middleware(counter)
        worker = Worker(broker, queues=set(config.queues) if config.queues else None, worker_threads=config.threads)
        if counter is not None:
            counter.worker_threads = worker_threads(worker)  # the list `start` fills
        worker.start()
    except ImportError:
        logger.exception("Failed to import the app.")
        return CHILD_IMPORT
    except ValueError as exc:  # a broker URL pika cannot parse, met while importing the app: one line
        from ..rabbitmq.reach import url_mistake

        if (mistake := url_mistake(exc)) is None:
            raise
        logger.critical("Configuration error, not starting: %s", mistake)
        return CHILD_CONFIG
    except BrokerConnectionError:
        logger.exception("Broker connection failed.")
        return CHILD_CONNECT
    except ConfigError as exc:  # the store's URL, credentials or schema, the broker's queues...: one line
        logger.critical("Configuration error, not starting: %s", exc)
        return CHILD_CONFIG
    os.write(config.ready_fd, b"ready\n")
    os.close(config.ready_fd)
    logger.info("Worker process is ready for action.")

    next_memory_check = time.monotonic()
    while (code := leave.reason()) is None:
        leave.wake.wait(_POLL)
        if config.max_memory_mb is not None and time.monotonic() >= next_memory_check:
            next_memory_check = time.monotonic() + config.memory_interval
            rss = resident_bytes()
            if rss > config.max_memory_mb * 1024 * 1024:
                logger.warning("Resident memory %.1f MB is over --max-memory %g MB: recycling.",
                               rss / 1048576, config.max_memory_mb)
                leave.request(CHILD_RECYCLE_MEMORY)
    if code == CHILD_RECYCLE_JOBS:
        logger.info("Processed --max-jobs %d jobs: recycling.", config.max_jobs)
    elif code == CHILD_STOPPED:
        logger.info("Stopped by an operator: finishing the running jobs (at most %gs).", config.shutdown_timeout)
    elif code == CHILD_OK:
        logger.info("Stop requested: finishing the running jobs (at most %gs).", config.shutdown_timeout)
    _exit_after(config.shutdown_timeout + STOP_GRACE)
    # Worker.stop joins the worker threads, then the consumers, each with the full timeout: the watchdog
    # above bounds the whole stop instead.
    worker.stop(timeout=int(config.shutdown_timeout * 1000))
    abandoned = sum(1 for thread in worker_threads(worker) if thread.is_alive())
    if abandoned:
        logger.warning("%d job(s) still running after --shutdown-timeout %gs: abandoned (their lease recovers "
                       "them).", abandoned, config.shutdown_timeout)
        if code in (CHILD_OK, CHILD_STOPPED):
            code = CHILD_KILLED
    broker.close()
    return code


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m reliable.supervisor CONFIG_JSON``."""
    args = sys.argv[1:] if argv is None else argv
    config = ChildConfig(**json.loads(args[0]))
    code = run(config)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Non-daemon threads of the app or a library must not keep a recycled child alive.
    os._exit(code)


if __name__ == "__main__":
    main()
