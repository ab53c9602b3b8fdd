"""Real worker processes for the integration and chaos tests (waiting: `support.wait_for`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import dramatiq
import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker

APPS = Path(__file__).parent / "integration" / "apps"


def purge(rabbitmq_url: str, queue: str) -> int:
    """Drop every ready message of `queue`; how many were dropped."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        return int(connection.channel().queue_purge(queue).method.message_count)
    finally:
        connection.close()


def dead_letters(rabbitmq_url: str, queue: str) -> list[bytes]:
    """The bodies in `queue`'s dead-letter queue (left there, unacked: the caller only looks)."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        channel = connection.channel()
        bodies = []
        while True:
            method, _properties, body = channel.basic_get(f"{queue}.XQ")
            if method is None:
                return bodies
            bodies.append(body)
    finally:
        connection.close()  # unacked: back in the XQ


class WorkerProcess:
    """A real `dramatiq` CLI worker (its own process group) running an app module of `app_dir`.

    The default is tests/integration/apps/units_app; the app reads its settings from `env`.
    """

    def __init__(self, env: dict[str, str], log: Path, processes: int = 1, threads: int = 8, *,
                 app: str = "units_app", app_dir: Path = APPS) -> None:
        self.log_path = log
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dramatiq", app, "-p", str(processes), "-t", str(threads),
             "-Q", env["RELIABLE_TEST_QUEUE"]],
            cwd=app_dir, env={**os.environ, **env, "PYTHONPATH": str(app_dir)}, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the whole process group (the CLI's main process and its workers)."""
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL everything: no shutdown hook runs, unacked messages go back to RabbitMQ."""
        self.signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def stop(self) -> None:
        """A graceful stop (SIGTERM), then SIGKILL if it takes too long."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self._log.closed:
            self._log.close()

    def output(self) -> str:
        """What the worker printed so far."""
        return self.log_path.read_text(errors="replace")


def send(broker: RabbitmqBroker, queue: str, actor: str, *args: Any) -> dramatiq.Message[Any]:
    """Enqueue a message for an actor this process does not declare."""
    return broker.enqueue(dramatiq.Message(queue_name=queue, actor_name=actor, args=args, kwargs={}, options={}))
