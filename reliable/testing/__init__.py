"""Test an application's actors with reliable installed: Dramatiq's StubBroker, a SQLite store, no services.

What an app's tests need (`reliable docs testing` has the walk-through; examples/test_reliable_app.py in the
repository runs it):

    from reliable.testing import Harness, sqlite_store_url

    url = sqlite_store_url(tmp_path)                 # a migrated SQLite store, in a test's own directory
    broker = StubBroker()                            # the app's broker, created as the app creates it
    reliable.install(broker, store=url, policies="policies/")
    app = Harness(broker)
    message = send_welcome_email.send(42)
    app.run_until_idle()                             # a real dramatiq.Worker until every queue is empty
    assert app.state(message.message_id) is JobStatus.SUCCEEDED
    assert app.history(message.message_id) == ["enqueued", "claim", "succeed"]

- `Harness.run_until_idle` runs the app's actors through a real `dramatiq.Worker` with reliable's
  middleware (the worker a `with app.worker():` block started, or one for the call), joining every
  declared queue (and its delay queue) until none has a message left, as Dramatiq's own tests do with
  ``broker.join`` and ``worker.join``. A job's state is settled when its message is acknowledged,
  so after it returns every job reads as it ended.
- `Harness.state`, `Harness.job`, `Harness.history`, `Harness.events` read the store.
- `Harness.crash` is a worker process that took a job and died: its lease expires and recovery runs,
  as in production (the event recovery wrote says what became of the job: re-queued, retried later,
  REVIEW for a job that is not idempotent, DEAD after too many crashes).
- `Harness.control` is the operator control plane over the app's store (`reliable.control.Control`,
  with the app's policy and broker): ``app.control.pause(job_id, reason="test")``, stop, cancel,
  resume, restart, requeue, reconcile, as the CLI and the console send them.
- `reliable.testing.pytest_plugin` has the fixtures (``pytest_plugins = ["reliable.testing.pytest_plugin"]``
  in the top conftest.py); pytest is imported there only, never by reliable at run time.

Waiting: the only wait is `wait_for`, on a condition with a deadline (the database clock passing a
lease expiry), never a fixed sleep. Retries wait their backoff: give the tests a policy with short
backoff (``backoff: {base: 0.01, cap: 0.05}``), or `run_until_idle` waits for them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import dq_name, q_name
from dramatiq.errors import QueueJoinTimeout

from ..control import Control
from ..errors import ConfigError
from ..middleware import ReliableMiddleware
from ..recovery import Recovery
from ..states import LEASE_EXPIRIES, JobStatus
from ..store import Job, JobEvent, StateStore

__all__ = ["Harness", "middleware_of", "sqlite_store_url", "wait_for"]

T = TypeVar("T")

#: The threads of the worker `Harness.worker` starts: enough for an actor that sends another.
DEFAULT_THREADS = 4


def sqlite_store_url(directory: str | os.PathLike[str]) -> str:
    """A migrated SQLite store in `directory` (the file ``reliable.db``, created); its URL.

    A file, not ``sqlite://`` in memory: the worker's threads and the test each open connections,
    and an in-memory database is one per connection.
    """
    url = f"sqlite:///{Path(directory) / 'reliable.db'}"
    store = StateStore(url)
    try:
        store.upgrade()
    finally:
        store.close()
    return url


def wait_for(condition: Callable[[], T], what: str = "the condition", *, timeout: float = 30.0,
             interval: float = 0.05, context: Callable[[], str] | None = None) -> T:
    """Poll `condition` until it returns something truthy and return that; AssertionError after `timeout` s.

    The one way a test waits: on a condition with a deadline, never a fixed sleep. The failure
    names `what` and adds the tail of `context()` (e.g. a worker's log) when given.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = f"\n{context()[-3000:]}" if context is not None else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{tail}")
        time.sleep(interval)


def middleware_of(broker: dramatiq.Broker) -> ReliableMiddleware:
    """The ReliableMiddleware `reliable.install` added to `broker`; ConfigError when there is none."""
    for middleware in broker.middleware:
        if isinstance(middleware, ReliableMiddleware):
            return middleware
    raise ConfigError("reliable is not installed on this broker: call reliable.install(broker, store=...) first")


class Harness:
    """An app's broker with reliable installed, driven by a test: run, read, crash, command.

    `broker` is the app's broker after `reliable.install`: a StubBroker for `run_until_idle` (any
    broker for the rest). The store, policy and control plane are the ones the app installed.
    """

    def __init__(self, broker: dramatiq.Broker) -> None:
        self.broker = broker
        self.middleware = middleware_of(broker)
        self._worker: dramatiq.Worker | None = None
        self._booted = False

    @property
    def store(self) -> StateStore:
        """The app's state store (the one `reliable.install` was given)."""
        return self.middleware.store

    @property
    def control(self) -> Control:
        """The operator control plane over the app's store, with its policy and broker (a resume,
        restart or requeue sends the job's message again)."""
        return Control(self.store, policy=self.middleware.policy, broker=self.broker)

    # -- running ---------------------------------------------------------------------------------

    @contextmanager
    def worker(self, *, threads: int = DEFAULT_THREADS) -> Iterator[dramatiq.Worker]:
        """A real dramatiq.Worker on the broker for the block (reliable's heartbeat and recovery with
        it), stopped at its end: for a test that acts while jobs run (a pause during a run)."""
        if self._worker is not None:
            raise RuntimeError("a worker is already running on this harness")
        if not self._booted:  # what `dramatiq` does once per worker process
            self.broker.emit_after("process_boot")
            self._booted = True
        worker = dramatiq.Worker(self.broker, worker_timeout=50, worker_threads=threads)
        worker.start()
        self._worker = worker
        try:
            yield worker
        finally:
            self._worker = None
            worker.stop()

    def run_until_idle(self, *, timeout: float = 30.0, fail_fast: bool = False) -> None:
        """Run the actors until no declared queue (nor its delay queue) has a message left.

        With the worker of a `worker()` block, or one started (and stopped) for the call. A message
        an actor sends to another queue is run too. `fail_fast`: raise the exception of a message
        Dramatiq dead-lettered (off by default: a job that failed for good is a state to assert on).
        TimeoutError after `timeout` seconds, naming the queues still busy.
        """
        if not isinstance(self.broker, StubBroker):
            raise ConfigError(f"run_until_idle needs Dramatiq's StubBroker, not {type(self.broker).__name__}: "
                              "create the app's broker as StubBroker() in tests")
        if self._worker is None:
            with self.worker():
                self.run_until_idle(timeout=timeout, fail_fast=fail_fast)
            return
        broker, deadline = self.broker, time.monotonic() + timeout
        while True:
            queues = self._queues()
            try:
                for queue in queues:
                    broker.join(queue, timeout=max(1, int((deadline - time.monotonic()) * 1000)),
                                fail_fast=fail_fast)
            except QueueJoinTimeout:
                busy = [q for q in queues if self._busy(q)]
                raise TimeoutError(f"the queues {busy} still had messages after {timeout:g}s (a retry waiting "
                                   "its backoff? give the tests a policy with a short one)") from None
            self._worker.join()
            if not any(self._busy(queue) for queue in self._queues()):
                return

    def _queues(self) -> list[str]:
        """The declared queues, each once (a delay queue is joined with its queue)."""
        return sorted({q_name(queue) for queue in self.broker.get_declared_queues()})

    def _busy(self, queue: str) -> bool:
        assert isinstance(self.broker, StubBroker)
        return any(self.broker.queues[name].unfinished_tasks for name in (queue, dq_name(queue))
                   if name in self.broker.queues)

    # -- reading ---------------------------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        """The job's current row (JobNotFound if there is none). Its id is its message's id."""
        return self.store.get(job_id)

    def state(self, job_id: str) -> JobStatus:
        """The job's current state."""
        return self.store.get(job_id).status

    def events(self, job_id: str) -> list[JobEvent]:
        """The job's event history, oldest first."""
        return self.store.events(job_id)

    def history(self, job_id: str, *, checkpoints: bool = False) -> list[str]:
        """The names of the job's events, oldest first (checkpoints left out unless asked for)."""
        return [e.event for e in self.store.events(job_id) if checkpoints or e.event != "checkpoint"]

    # -- simulating ------------------------------------------------------------------------------

    def crash(self, job_id: str, *, worker_id: str = "crashed-worker") -> str:
        """A worker process that claimed the job and died before finishing it: the job is claimed with
        a lease nobody renews, the lease expires (on the database's clock) and recovery runs once, as
        every live worker's recovery thread would. The job's message, if still queued, is then
        delivered as after a real crash (its claim is refused when recovery moved the job on).

        The job must be one a worker may claim (PENDING or RETRY_WAIT: ClaimRefused otherwise).
        Returns the event recovery wrote, by the job's contract: lease_expired (re-queued),
        lease_expired_backoff (retried later), lease_expired_review (not idempotent: REVIEW) or
        lease_expired_dead (crashed once too often).
        """
        store = self.store
        claim = store.claim(job_id, worker_id=worker_id, lease_ttl=0.001)
        expires = claim.job.lease_expires_at
        assert expires is not None
        wait_for(lambda: store.now() > expires, "the database's clock to pass the lease expiry")
        Recovery(store, self.broker, self.middleware.policy).run_once()
        expiries = {ev.value for ev in LEASE_EXPIRIES}
        found = [e.event for e in store.events(job_id) if e.event in expiries and e.lease_id == claim.lease_id]
        if not found:
            raise AssertionError(f"recovery did not expire the lease of job {job_id}: {self.history(job_id)}")
        return found[-1]

    def close(self) -> None:
        """Close the broker and the store (end of a test)."""
        self.broker.close()
        self.store.close()
