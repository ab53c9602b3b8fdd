"""What a process running reliable has once: opened after a fork, stopped at worker shutdown.

Owns the fork check (a store, a worker id and a heartbeat per process id), the replication check
at boot, the recovery thread (the recovery loop, then the scheduler, every `recovery_interval`),
the shutdown order (recovery first, the heartbeat once every worker thread finished), the
store-retry loop every worker-side store call goes through, the bounded wait of a send
(send_timeout), and the store check of install and worker boot (a configuration error fails fast).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dramatiq

from .. import multiprocess
from ..deadlines import within
from ..errors import ActorContractError, ConfigError, StoreError, StoreNotMigrated, StoreUnavailable
from ..recovery import Recovery
from ..schedules import Scheduler
from ..store import StateStore
from ..store.db import POOL_TIMEOUT, database_location, missing_sqlite_file
from ..store.engine import connect_engine
from ..store.job_stats import StatsBuffer
from ..store.processes import WorkerProcess
from ..store.replication import check_replication
from ..store.retrying import retry_while_unavailable
from .commands import ProcessCommands
from .context import JobContext, in_job_run
from .heartbeat import Heartbeat
from .processes import exited, register, release_dead_neighbours, this_process
from .settings import Settings
from .stats import StatsFlusher

__all__ = ["MIN_WRITE_BOUND", "Runtime"]

logger = logging.getLogger("reliable.middleware")

# This process's id, kept current by a fork hook: `ensure_process` runs several times per job, and
# os.getpid() is a system call each time.
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


#: The least time one try of a worker's store write is given before its connection is cut (a
#: short lease must not turn a slow statement on a loaded machine into a cut connection).
MIN_WRITE_BOUND = 5.0


class Runtime:
    """One process's store, worker id, heartbeat and recovery thread (re-created after a fork)."""

    def __init__(self, settings: Settings, *, on_escalation: Callable[[JobContext, float], None]) -> None:
        self.settings = settings
        self._on_escalation = on_escalation
        self.pid = -1
        self.store_or_none: StateStore | None = None
        self._worker_id = ""
        self.heartbeat: Heartbeat | None = None
        self.recovery: Recovery | None = None
        self.recovery_thread: threading.Thread | None = None
        self.recovery_stop = threading.Event()
        self.scheduler: Scheduler | None = None
        #: Also run at every pass of the recovery loop (the claims ahead not taken in time, handed back).
        self.every_pass: list[Callable[[], None]] = []
        self.record: WorkerProcess | None = None
        #: An operator's quiet or stop for this process, picked up after each heartbeat.
        self.commands = self._commands()
        #: The latency and outcome history's writer (reliable.worker.stats), from the worker's boot.
        self.stats: StatsFlusher | None = None
        self._lock = threading.Lock()
        # `with_store_retry`'s bound of one try and cap of the wait between tries (settings are frozen).
        self._write_bound = max(settings.lease_ttl, MIN_WRITE_BOUND)
        self._retry_cap = settings.heartbeat_interval

    def _commands(self) -> ProcessCommands:
        return ProcessCommands(lambda: self.store, lambda: self.worker_id)

    @property
    def store(self) -> StateStore:
        """This process's StateStore (opened on first use after a fork)."""
        self.ensure_process()
        assert self.store_or_none is not None
        return self.store_or_none

    @property
    def worker_id(self) -> str:
        """host:pid:random — the identity written on claims and leases."""
        self.ensure_process()
        return self._worker_id

    def ensure_process(self) -> None:
        """Open this process's store and heartbeat, once per process id."""
        if self.pid == _pid:
            return
        with self._lock:
            pid = _pid
            if self.pid == pid:
                return
            settings = self.settings
            given = settings.store
            if isinstance(given, StateStore) and self.pid == -1:
                store = given
            else:  # the URL object, never a rendered string: the password stays out of any text
                url = given if isinstance(given, str) else given.engine.url
                timeout = POOL_TIMEOUT if isinstance(given, str) else given.pool_timeout
                engine = connect_engine(url, max_connections=settings.max_connections, pool_timeout=timeout,
                                        lease_ttl=settings.lease_ttl)
                store = StateStore(engine=engine, max_connections=settings.max_connections, pool_timeout=timeout,
                                   group_commit=settings.group_commit)
            for listener in settings.listeners:
                store.add_listener(listener)
            self.store_or_none = store
            self._worker_id = f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:6]}"
            metrics = settings.metrics
            self.commands = self._commands()  # a command for the parent is not the child's
            self.heartbeat = Heartbeat(
                store, worker_id=self._worker_id, interval=settings.heartbeat_interval, lease_ttl=settings.lease_ttl,
                on_escalation=self._on_escalation, on_beat=metrics.heartbeat if metrics else None,
                on_failure=metrics.heartbeat_failed if metrics else None, where=database_location(store.engine.url),
                after_beat=self.commands.after_beat, interrupt_unrenewed=settings.interrupt_unrenewed)
            self.pid = pid

    def check_replication(self) -> None:
        """Warn about (replication="require_sync": refuse to boot on) a store whose failover can lose
        commits. A store unreachable at boot is only logged: the worker's writes wait for it anyway."""
        replication = self.settings.replication
        try:
            check_replication(self.store.engine, replication)
        except ConfigError as exc:  # raised as a MiddlewareError, so that the worker does not boot
            raise ActorContractError(str(exc)) from None
        except StoreUnavailable as exc:
            logger.warning("could not check the store's replication at boot: %s", exc)
        except StoreError as exc:
            if replication == "require_sync":
                raise ActorContractError(f"could not check the store's replication (replication='require_sync'): "
                                         f"{exc}") from None
            logger.warning("could not check the store's replication at boot: %s", exc)

    def go_on_record(self, broker: dramatiq.Broker, actor_options: Callable[[str], Mapping[str, Any]], *,
                     queues: Iterable[str] | None, threads: int | None) -> None:
        """Write this process's record, then release at once the leases of this host's dead
        processes (reliable.worker.processes); the recovery loop looks again at every pass."""
        settings = self.settings
        self.recovery = Recovery(self.store, broker, settings.policy, actor_options=actor_options,
                                 sweep_after=settings.sweep_after, lease_ttl=settings.lease_ttl,
                                 worker_id=self.worker_id)
        self.record = this_process(self.worker_id, queues=queues, threads=threads)
        register(self.store, self.record)
        release_dead_neighbours(self.store, self.recovery, self.record)
        if os.environ.get(multiprocess.ENV):  # an exporter on its defaults finds the directory by its store
            multiprocess.mark_store(os.environ[multiprocess.ENV], database_location(self.store.engine.url))

    def start_stats(self) -> None:
        """Count this process's claims and attempt ends and write them once per heartbeat interval
        (reliable.worker.stats); once per process."""
        if self.stats is None:
            buffer = StatsBuffer()
            self.store.add_listener(buffer)
            self.stats = StatsFlusher(self.store, buffer, interval=self.settings.heartbeat_interval)
            self.stats.start()

    def start_recovery(self, broker: dramatiq.Broker) -> None:
        """Start this process's recovery thread (the recovery loop and the scheduler)."""
        assert self.recovery is not None, "go_on_record first"
        self.scheduler = Scheduler(self.store, broker)
        self.recovery_stop.clear()
        self.recovery_thread = threading.Thread(target=self._recover_forever, name="reliable-recovery", daemon=True)
        self.recovery_thread.start()

    def _recover_forever(self) -> None:
        assert self.recovery is not None
        while not self.recovery_stop.wait(self.settings.recovery_interval):
            try:
                if self.record is not None:
                    release_dead_neighbours(self.store, self.recovery, self.record)
                self.recovery.run_once()
                if self.scheduler is not None:
                    self.scheduler.tick()
                for task in self.every_pass:
                    task()
            except StoreError as exc:
                logger.warning("recovery pass failed (will retry): %s", exc)
            except Exception:
                logger.exception("recovery pass failed unexpectedly")

    def stop_recovery(self) -> None:
        """Stop the recovery loop and wait for its pass to end."""
        self.recovery_stop.set()
        # A pass still publishing while Dramatiq stops its consumers could declare a queue, and the
        # worker would add a consumer to the dict it is iterating (RuntimeError in Worker.stop).
        if self.recovery_thread is not None:
            self.recovery_thread.join(10)

    def shutdown(self) -> None:
        """Stop the heartbeat (every worker thread has finished its message), write the last job stats;
        log group commit's batching."""
        if self.stats is not None:
            self.stats.stop()
            self.stats = None
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.settings.metrics is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]  # drop live-sum gauges
        if self.recovery_thread is not None:
            self.recovery_thread.join(5)
            self.recovery_thread = None
        if self.record is not None and self.store_or_none is not None:
            exited(self.store_or_none, self.record.worker_id)
            self.record = None
        group = self.store_or_none.group_commit_stats() if self.store_or_none is not None else None
        if group is not None and group[0]:
            batches, writes = group
            logger.info("group commit: %d writes in %d batches (%.1f per batch)", writes, batches, writes / batches)

    def with_store_retry(self, what: str, call: Callable[[], Any]) -> Any:
        """Run a store call of a worker holding a message; while the database is unreachable (or
        misconfigured: logged as an error with its fix), wait and retry, the message kept unacked.

        The wait between tries is capped by the heartbeat interval, so a write lands within about
        one interval of the store's return: before recovery may expire any lease (a full TTL). Each
        try is bounded by the lease TTL, at least MIN_WRITE_BOUND (generous: statements take
        milliseconds, a lock wait may take seconds): on a silent network the connection is cut and
        the thread comes back to Python, where the heartbeat's interrupt of a job it could not renew
        can land.
        """
        bound = self._write_bound

        def bounded() -> Any:
            with within(bound):
                return call()

        return retry_while_unavailable(bounded, what=what, max_delay=self._retry_cap, note=" (message kept unacked)",
                                       hold=True)

    def send(self, what: str, call: Callable[[], Any], timeout: float | None = None) -> Any:
        """Run a send's store call (registering a job, a group's barrier).

        Outside a job's run no message is held: a configuration error raises at once, an outage is
        waited out for `timeout` seconds (default: the installed send_timeout), then SendTimedOut; a
        silent network too (`reliable.deadlines`: the connection is cut at the deadline). Inside a
        job's run (an actor sending a child) the job's message is held: it waits like the job's
        other writes (`with_store_retry`), bounded by the lease.
        """
        if in_job_run():
            return self.with_store_retry(what, call)
        timeout = self.settings.send_timeout if timeout is None else timeout
        with within(timeout):
            return retry_while_unavailable(call, what=what, max_delay=min(self.settings.heartbeat_interval, timeout),
                                           timeout=timeout, note=f" (the send waits up to {timeout:g}s)")

    def send_wait(self, timeout: float | None = None) -> float | None:
        """How long a send's store call may wait for other threads' (a group commit's batch): None
        inside a job's run (its writes wait, bounded by the lease, as `send` says), else `timeout`
        or install's send_timeout."""
        if in_job_run():
            return None
        return self.settings.send_timeout if timeout is None else timeout

    def check_store(self, *, at: str, worker: bool = False) -> None:
        """Check the store once (`at`: "worker boot", "install"): a configuration error raises
        (StoreMisconfigured, StoreNotMigrated: one line saying what to fix or run); a store that
        cannot be reached now is only logged (what uses it later waits for it). A SQLite file that
        does not exist is not created here: a producer goes on (the first send says to migrate it),
        a `worker` stops its boot with StoreNotMigrated (it could only hold its messages, waiting)."""
        if (missing := missing_sqlite_file(self.store.engine.url)) is not None:
            if worker:
                url = self.store.url
                raise StoreNotMigrated(f"{at}: the store at {url} has no reliable schema (its SQLite file {missing} "
                                       f"does not exist): run `reliable db upgrade --store {url}`")
            return
        try:
            self.store.check_schema()
        except StoreUnavailable as exc:
            logger.warning("%s: the store cannot be reached now, its schema is checked later: %s", at, exc)

