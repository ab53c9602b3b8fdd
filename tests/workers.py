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

import reliable

APPS = Path(__file__).parent / "integration" / "apps"
#: The tree whose `reliable` this test run imports: a worker process imports the same one (not the
#: copy an editable install points at, when the tests run from another checkout).
TREE = Path(reliable.__file__).resolve().parent.parent


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
            cwd=app_dir, env={**os.environ, **env, "PYTHONPATH": os.pathsep.join((str(app_dir), str(TREE)))},
            stdout=self._log,
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


def ready(rabbitmq_url: str, queue: str) -> int:
    """How many of `queue`'s messages RabbitMQ holds ready (not delivered to a consumer)."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


def send(broker: RabbitmqBroker, queue: str, actor: str, *args: Any) -> dramatiq.Message[Any]:
    """Enqueue a message for an actor this process does not declare."""
    return broker.enqueue(dramatiq.Message(queue_name=queue, actor_name=actor, args=args, kwargs={}, options={}))


def checkpointed(store: Any, job_ids: list[str], at_least: int) -> bool:
    """Every one of `job_ids` RUNNING with a checkpoint of at least `at_least`."""
    from reliable.states import JobStatus

    jobs = [store.get(job_id) for job_id in job_ids]
    return all(j.status is JobStatus.RUNNING and (j.checkpoint or 0) >= at_least for j in jobs)


def resumed_after(store: Any, job_ids: list[str], killed_at: float) -> dict[str, float] | None:
    """Seconds from `killed_at` (the store's clock) to the start of each job's next attempt, once
    every job has one (None before); the crash-recovery tests' kill-to-resume figure."""
    resumed = {}
    for job_id in job_ids:
        later = [a for a in store.attempts(job_id) if a.started_at > killed_at]
        if not later:
            return None
        resumed[job_id] = later[0].started_at - killed_at
    return resumed


def resumed_from(store: Any, job_id: str, killed_at: float) -> int:
    """The checkpoint the job's first attempt after `killed_at` started from (the units app records
    `start-<attempt>` with it as its result)."""
    import json

    from sqlalchemy import select

    from reliable.store.schema import effects

    later = next(a for a in store.attempts(job_id) if a.started_at > killed_at)
    key = f"{job_id}:start-{later.attempt}"
    with store.engine.connect() as conn:
        result = conn.execute(select(effects.c.result).where(effects.c.job_id == job_id,
                                                             effects.c.op_key == key)).scalar()
    return int(json.loads(result)) if result is not None else -1


def resumed_from_checkpoints(store: Any, job_ids: list[str], killed_at: float, *, checkpoint: int,
                             context: Any) -> dict[str, float]:
    """Wait until every job resumed after a kill at `killed_at` (bounded: well below a 30 s lease
    TTL); check each resumed from at least `checkpoint`, released because its holder was seen dead
    (`holder_dead: pid_gone`). The seconds from the kill to each resume."""
    from support import wait_for

    resumed = wait_for(lambda: resumed_after(store, job_ids, killed_at), "every job resumed", timeout=25,
                       context=context)
    for job_id in job_ids:
        start = wait_for(lambda j=job_id: resumed_from(store, j, killed_at) + 1, "the attempt's start recorded") - 1
        assert start >= checkpoint, f"{job_id} resumed from {start}, not from its checkpoint"
        [released] = store.events(job_id, events=["lease_expired"])
        assert released.detail is not None and released.detail["holder_dead"] == "pid_gone", released
    return resumed
