"""The demo's workers: Dramatiq Workers in this process (StubBroker), or real `dramatiq` processes.

Both pools run two workers: worker-1 takes every queue but `maintenance`; worker-2 takes only
`maintenance`, where the job that will crash runs, so the story knows which worker to crash.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import dramatiq
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

import reliable
from reliable.errors import ConfigError
from reliable.policy import Policy
from reliable.redact import redact_url

from .actors import ACTORS, World, declare, story_messages
from .config import DemoSettings, queue_name

__all__ = ["ProcessWorkers", "StubWorkers", "Workers"]

CRASHING = "rebuild_index"


class Workers(Protocol):
    """What the director needs from a worker pool."""

    @property
    def producer(self) -> dramatiq.Broker:
        """The broker the director publishes with (operator commands re-dispatch through it)."""

    @property
    def crash_note(self) -> str:
        """How the crash is done, said before it happens."""

    def start(self) -> None:
        """Start the workers."""

    def enqueue(self, names: Sequence[str]) -> dict[str, str]:
        """Enqueue the jobs of these actors; actor name -> job id."""

    def crash(self) -> str:
        """Crash the worker running the crashing job; a sentence saying what was done."""

    def after_story(self) -> str | None:
        """Anything left to do once every job has ended (a sentence), or None."""

    def failures(self) -> list[str]:
        """Workers that died without being told to (empty: all fine)."""

    def label(self, worker_id: str | None) -> str:
        """A short name (worker-1...) for a worker id written in the store."""

    def stop(self) -> None:
        """Stop every worker and close the brokers."""


class StubWorkers:
    """Two Dramatiq Workers (threads) on two StubBrokers, sharing the store: no services needed.

    A thread cannot be SIGKILLed, so worker-2's crash is simulated: its heartbeat is stopped (the
    middleware's worker-shutdown hook) and its thread hangs. Its lease then expires exactly as a
    dead process's would, and worker-1's recovery loop requeues the job. When the hung thread is
    let go at the end, its next write is refused by the lease fence.
    """

    crash_note = ("simulated crash (in-process broker: a thread cannot be killed): worker-2's heartbeat is stopped "
                  "and its thread hangs; run with --broker amqp://... --store postgresql+psycopg://... "
                  "for a real SIGKILL of a worker process")

    def __init__(self, settings: DemoSettings, policy: Policy) -> None:
        self.settings = settings
        self.producer = StubBroker()
        self.producer.emit_after("process_boot")
        self.middleware = reliable.install(self.producer, store=settings.store_url, policies=policy, metrics=False)
        self.world = World(settings.state_dir, settings.speed)
        self.actors = declare(self.producer, self.world, settings.prefix)
        self.worker = Worker(self.producer, worker_timeout=50, worker_threads=len(ACTORS) + 1)
        self.second = StubBroker()
        self.second.emit_after("process_boot")
        self.second_middleware = reliable.install(self.second, store=settings.store_url, policies=policy,
                                                  recovery=False, metrics=False)
        self.second_world = World(settings.state_dir, settings.speed)
        self.second_actors = declare(self.second, self.second_world, settings.prefix, only=[CRASHING])
        self.second_worker = Worker(self.second, worker_timeout=50, worker_threads=1)
        self._crashed = False

    def start(self) -> None:
        """Start both workers (worker-1 also runs the recovery loop)."""
        self.worker.start()
        self.second_worker.start()

    def enqueue(self, names: Sequence[str]) -> dict[str, str]:
        """Register worker-1's jobs in one transaction (enqueue_many); the crashing one goes to worker-2."""
        messages = story_messages({k: v for k, v in self.actors.items() if k in names and k != CRASHING})
        self.middleware.enqueue_many(self.producer, list(messages.values()))
        ids = {name: m.message_id for name, m in messages.items()}
        if CRASHING in names:
            crashing = story_messages(self.second_actors)[CRASHING]
            self.second.enqueue(crashing)
            ids[CRASHING] = crashing.message_id
        return ids

    def crash(self) -> str:
        """Stop worker-2's heartbeat and hang its thread."""
        self.second_world.freeze()
        self.second_middleware.after_worker_shutdown(self.second, self.second_worker)
        self._crashed = True
        return "worker-2 'crashed': heartbeat stopped, thread hung (simulated; see the note above)"

    def after_story(self) -> str | None:
        """Let worker-2's hung thread go on: its next write must be refused (fencing)."""
        if not self._crashed:
            return None
        self.second_world.thaw()
        return "worker-2's hung thread wakes up and tries to write with its old lease"

    def failures(self) -> list[str]:
        """None: threads of this process do not die unnoticed."""
        return []

    def label(self, worker_id: str | None) -> str:
        """worker-1 or worker-2."""
        if worker_id is None:
            return "-"
        return {self.middleware.worker_id: "worker-1", self.second_middleware.worker_id: "worker-2"}.get(
            worker_id, worker_id)

    def stop(self) -> None:
        """Stop both workers."""
        self.second_world.thaw()
        for worker in (self.second_worker, self.worker):
            worker.stop(timeout=10_000)
        for broker in (self.second, self.producer):
            broker.close()


class ProcessWorkers:
    """Real `python -m dramatiq reliable.demo.app:setup` processes on RabbitMQ; the crash is a SIGKILL."""

    crash_note = "real crash: worker-2's process group gets SIGKILL; a supervisor would start a replacement"

    def __init__(self, settings: DemoSettings, policy: Policy) -> None:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        assert settings.broker_url is not None
        self.settings = settings
        self.producer = RabbitmqBroker(url=settings.broker_url)
        self.middleware = reliable.install(self.producer, store=settings.store_url, policies=policy, metrics=False)
        self.actors = declare(self.producer, World(settings.state_dir, settings.speed), settings.prefix)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._groups: dict[int, str] = {}
        self._labels: dict[str, str] = {}

    def _env(self, name: str) -> dict[str, str]:
        s = self.settings
        assert s.broker_url is not None
        return {**os.environ, "RELIABLE_DEMO_BROKER": s.broker_url, "RELIABLE_DEMO_STORE": s.store_url,
                "RELIABLE_DEMO_POLICY": str(s.policy_path), "RELIABLE_DEMO_STATE": str(s.state_dir),
                "RELIABLE_DEMO_PREFIX": s.prefix, "RELIABLE_DEMO_SPEED": repr(s.speed),
                "RELIABLE_DEMO_WORKER": name}

    def log_path(self, name: str) -> Path:
        """Where a worker's output goes."""
        return self.settings.workdir / f"{name}.log"

    def _spawn(self, name: str, queues: list[str]) -> None:
        with self.log_path(name).open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dramatiq", "reliable.demo.app:setup", "-p", "1", "-t", str(len(ACTORS) + 1),
                 "-Q", *queues], env=self._env(name), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        self._groups[proc.pid] = name

    def start(self) -> None:
        """Start worker-1 (every queue but maintenance) and worker-2 (maintenance only)."""
        self._check_broker()
        prefix = self.settings.prefix
        self._spawn("worker-1", [queue_name(prefix, q) for q in sorted(set(ACTORS.values()) - {"maintenance"})])
        self._spawn("worker-2", [queue_name(prefix, "maintenance")])

    def enqueue(self, names: Sequence[str]) -> dict[str, str]:
        """Register the jobs in one transaction (enqueue_many), then publish them to RabbitMQ."""
        messages = story_messages({k: v for k, v in self.actors.items() if k in names})
        self.middleware.enqueue_many(self.producer, list(messages.values()))
        return {name: m.message_id for name, m in messages.items()}

    def crash(self) -> str:
        """SIGKILL worker-2's process group, then start worker-3 on its queue (as a supervisor would)."""
        proc = self.procs["worker-2"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self._spawn("worker-3", [queue_name(self.settings.prefix, "maintenance")])
        return (f"kill -9 worker-2 (process group {proc.pid}): no shutdown hook ran, its lease is left to expire; "
                "worker-3 started in its place")

    def after_story(self) -> str | None:
        """Nothing: the killed process cannot come back."""
        return None

    def label(self, worker_id: str | None) -> str:
        """The worker process (worker-1/2/3) whose process group holds the pid in `worker_id`."""
        if worker_id is None:
            return "-"
        if worker_id not in self._labels:
            try:
                pid = int(worker_id.split(":")[1])
                self._labels[worker_id] = self._groups.get(os.getpgid(pid), worker_id)
            except (IndexError, ValueError, ProcessLookupError, PermissionError):
                return worker_id
        return self._labels[worker_id]

    def failures(self) -> list[str]:
        """Worker processes that exited unexpectedly (name and exit code)."""
        return [f"{name} exited with {proc.returncode}" for name, proc in self.procs.items()
                if name != "worker-2" and proc.poll() is not None]

    def stop(self) -> None:
        """SIGTERM every worker (SIGKILL after 15 s), close the producer, delete this run's queues."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self._delete_queues()
        self.producer.close()

    def _check_broker(self) -> None:
        import pika

        assert self.settings.broker_url is not None
        try:
            pika.BlockingConnection(pika.URLParameters(self.settings.broker_url)).close()
        except Exception as exc:
            why = f"{type(exc).__name__} {exc}".strip()
            raise ConfigError(f"cannot reach RabbitMQ at {redact_url(self.settings.broker_url)}: {why}") from None

    def _delete_queues(self) -> None:
        import pika

        assert self.settings.broker_url is not None
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.settings.broker_url))
        except Exception:
            return
        try:
            channel = connection.channel()
            for queue in set(ACTORS.values()):
                for suffix in ("", ".DQ", ".XQ"):
                    with contextlib.suppress(Exception):
                        channel.queue_delete(queue_name(self.settings.prefix, queue) + suffix)
        finally:
            with contextlib.suppress(Exception):
                connection.close()


def make_workers(settings: DemoSettings, policy: Policy) -> Workers:
    """The pool for `settings`: real processes when a broker URL is given, else in-process."""
    return ProcessWorkers(settings, policy) if settings.real else StubWorkers(settings, policy)
