"""Forged deliveries that would choose behaviour (issue 30, items 1 and 4), with real RabbitMQ, a
real `dramatiq` worker process, on SQLite and PostgreSQL. The forged messages are published raw with
pika, as an attacker on the broker would.

1. A message's `queue_name` does not choose its job's contract: the actor `charge` is declared on
   a queue the policy makes non-idempotent. Its genuine job times out once and goes to REVIEW; the
   same actor's message published on that queue with `queue_name` naming another queue (whose
   contract would retry it) is refused (`delivery_mismatch`), dead-lettered and never run, with a
   new id (no job: the event goes to the event log) as with an existing job's id (the event on the
   job). Delayed messages (through `<queue>.DQ`) and retries still run.
2. A forged group member (a new id carrying an existing group's completion id) is refused and
   recorded, and never counts at the group's barrier: the completion callback runs only after the
   real members finish.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pika
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import StubBackend

import reliable
from reliable.states import JobStatus
from reliable.store import StateStore

from support import wait_for
from workers import WorkerProcess

pytestmark = pytest.mark.integration

POLICY = """\
version: 1
defaults:
  max_attempts: 4
  backoff: {{base: 100ms, cap: 200ms}}
queues:
  {queue}: {{idempotent: false}}
"""


class App:
    """The test's producer (reliable installed), its store, and the worker's run markers."""

    def __init__(self, broker: RabbitmqBroker, store: StateStore, out: Path, queue: str, rabbitmq_url: str) -> None:
        self.broker, self.store, self.out, self.queue, self.rabbitmq_url = broker, store, out, queue, rabbitmq_url
        self.actors = {name: dramatiq.Actor(lambda *a: None, broker=broker, actor_name=name, queue_name=queue,
                                            priority=0, options={})
                       for name in ("charge", "member", "finished")}

    def runs(self, actor: str, job_id: str) -> int:
        """How many times the worker ran `actor` for `job_id`."""
        return len(list(self.out.glob(f"{actor}-{job_id}-*")))

    def publish_raw(self, body: dict[str, Any]) -> None:
        """Publish `body` on the test's queue with pika, as a producer without reliable would."""
        connection = pika.BlockingConnection(pika.URLParameters(self.rabbitmq_url))
        try:
            connection.channel().basic_publish("", self.queue, json.dumps(body).encode())
        finally:
            connection.close()

    def dead_letters(self) -> list[dict[str, Any]]:
        """The messages in the queue's XQ (left there: the test only looks)."""
        connection = pika.BlockingConnection(pika.URLParameters(self.rabbitmq_url))
        try:
            channel, found = connection.channel(), []
            while True:
                method, _properties, body = channel.basic_get(f"{self.queue}.XQ")
                if method is None:
                    return found
                found.append(json.loads(body))
        finally:
            connection.close()


@pytest.fixture
def app(store_url: str, queue_name: str, rabbitmq_url: str, tmp_path: Path) -> Iterator[App]:
    broker = RabbitmqBroker(url=rabbitmq_url)
    broker.add_middleware(GroupCallbacks(StubBackend()))  # before install: its barriers go to the store
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(queue=queue_name))
    middleware = reliable.install(broker, store=store_url, policies=str(policy), recovery=False, json_logs=False)
    out = tmp_path / "runs"
    out.mkdir()
    try:
        yield App(broker, middleware.store, out, queue_name, rabbitmq_url)
    finally:
        broker.close()
        middleware.store.close()


@pytest.fixture
def worker(app: App, store_url: str, tmp_path: Path) -> Iterator[Callable[[], WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        env = {"RELIABLE_TEST_BROKER": app.rabbitmq_url, "RELIABLE_TEST_STORE": store_url,
               "RELIABLE_TEST_QUEUE": app.queue, "RELIABLE_TEST_POLICY": str(tmp_path / "policy.yaml"),
               "RELIABLE_TEST_OUT": str(app.out)}
        started.append(WorkerProcess(env, tmp_path / f"worker-{len(started)}.log", app="forgery_app"))
        return started[-1]

    yield start
    for process in started:
        process.stop()


def forged(queue_name: str, actor: str, args: list[Any], *, message_id: str | None = None,
           options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A message body as a plain Dramatiq producer writes it."""
    return {"queue_name": queue_name, "actor_name": actor, "args": args, "kwargs": {}, "options": options or {},
            "message_id": message_id or str(uuid.uuid4()), "message_timestamp": int(time.time() * 1000)}


def mismatch_lines(log: str, job_id: str) -> list[dict[str, Any]]:
    """The worker's JSON event lines of a `delivery_mismatch` of `job_id`."""
    found = []
    for line in log.splitlines():
        if '"delivery_mismatch"' in line and job_id in line and line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == "delivery_mismatch" and record.get("job_id") == job_id:
                found.append(record)
    return found


def test_a_message_queue_name_does_not_choose_the_contract(app: App, worker: Callable[[], WorkerProcess]) -> None:
    charge = app.actors["charge"]
    genuine = charge.send("timeout").message_id
    delayed = charge.send_with_options(args=("ok",), delay=1500).message_id  # through <queue>.DQ
    retried = charge.send("refused-once").message_id  # its retry waits on <queue>.DQ too
    registered = charge.send("ok").message_id
    # The same actor's message on its queue, naming another queue (whose contract is idempotent:
    # 4 runs, DEAD), with a new id and with the id of a registered job.
    new_id = forged("default", "charge", ["timeout"])
    app.publish_raw(new_id)
    app.publish_raw(forged("default", "charge", ["ok"], message_id=registered))
    process = worker()

    wait_for(lambda: app.store.get(genuine).status is JobStatus.REVIEW, "the genuine job's REVIEW", timeout=60,
             context=process.output)
    jobs = (delayed, retried, registered)
    wait_for(lambda: all(app.store.get(job_id).status is JobStatus.SUCCEEDED for job_id in jobs),
             "the delayed, retried and registered jobs to succeed", timeout=60, context=process.output)
    assert app.runs("charge", genuine) == 1
    assert (app.runs("charge", delayed), app.runs("charge", registered), app.runs("charge", retried)) == (1, 1, 2)
    assert app.store.get(retried).attempt == 2

    wait_for(lambda: len(app.dead_letters()) == 2, "both forged messages in the XQ", timeout=30,
             context=process.output)
    assert sorted(m["message_id"] for m in app.dead_letters()) == sorted([new_id["message_id"], registered])
    assert app.store.find(new_id["message_id"]) is None, "never registered, on `default` or anywhere"
    assert app.runs("charge", new_id["message_id"]) == 0
    lines = wait_for(lambda: mismatch_lines(process.output(), new_id["message_id"]) or None,
                     "the forged message's event line", timeout=30, context=process.output)
    assert lines[0]["detail"]["differs"] == ["queue"] and lines[0]["queue"] == "default"
    assert f"came from queue '{app.queue}'" in lines[0]["reason"]
    event = next(e for e in app.store.events(registered) if e.event == "delivery_mismatch")
    assert event.detail["differs"] == ["queue"] and event.detail["queue"] == "default"
    assert app.store.get(registered).queue == app.queue and app.store.get(registered).attempt == 1


def test_a_forged_group_member_is_refused_and_the_callback_waits(app: App, worker: Callable[[], WorkerProcess],
                                                                 tmp_path: Path) -> None:
    release = tmp_path / "release"
    member, finished = app.actors["member"], app.actors["finished"]
    group = dramatiq.group([member.message(str(release)), member.message("")], broker=app.broker)
    group.add_completion_callback(finished.message("all done"))
    callback_id = group.completion_callbacks[0]["message_id"]
    slow, quick = (m.message_id for m in group.children)
    process = worker()
    group.run()
    wait_for(lambda: app.store.get(quick).status is JobStatus.SUCCEEDED and app.runs("member", slow) == 1,
             "the quick member done, the slow one running", timeout=60, context=process.output)

    # A member the group never had, with the group's completion id and callbacks, as a copy of a real member.
    registered = app.store.get(quick).message["options"]
    options = {key: registered[key] for key in ("group_completion_uuid", "group_completion_callbacks")}
    intruder = forged(app.queue, "member", [""], options=options)
    app.publish_raw(intruder)
    lines = wait_for(lambda: mismatch_lines(process.output(), intruder["message_id"]) or None,
                     "the forged member's event line", timeout=30, context=process.output)
    assert lines[0]["detail"]["differs"] == ["options.group"]
    wait_for(lambda: [m["message_id"] for m in app.dead_letters()] == [intruder["message_id"]],
             "the forged member in the XQ", timeout=30, context=process.output)
    assert app.runs("member", intruder["message_id"]) == 0 and app.store.find(intruder["message_id"]) is None
    assert app.store.find(callback_id) is None and app.runs("finished", callback_id) == 0, \
        "the callback waits for the slow member"
    assert app.store.get(slow).status is JobStatus.RUNNING

    release.touch()
    wait_for(lambda: app.runs("finished", callback_id) == 1 and
             app.store.get(callback_id).status is JobStatus.SUCCEEDED,
             "the completion callback after the real members", timeout=60, context=process.output)
    assert app.store.get(slow).status is JobStatus.SUCCEEDED
    ended, called = app.store.get(slow).finished_at, app.store.get(callback_id).started_at
    assert ended is not None and called is not None and ended <= called
