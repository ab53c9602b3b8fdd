"""A worker killed between committing a success and publishing what follows it (the next pipeline
step, a group's completion callback): what follows was registered with the success, so the
pipeline and the group still complete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import StubBackend

import reliable
from reliable.states import JobStatus

from support import wait_for

pytestmark = pytest.mark.integration


def test_pipeline_completes_after_a_kill_between_commit_and_publish(
        producer: Any, start_worker: Any, queue_name: str, tmp_path: Path) -> None:
    broker, store = producer
    increment = dramatiq.Actor(lambda x: x, broker=broker, actor_name="increment", queue_name=queue_name,
                               priority=0, options={})
    double = dramatiq.Actor(lambda x: x, broker=broker, actor_name="double", queue_name=queue_name,
                            priority=0, options={})
    pipe = dramatiq.pipeline([increment.message(20), double.message()], broker=broker)
    first, second = pipe.messages
    marker = tmp_path / "killed"

    doomed = start_worker(RELIABLE_TEST_KILL_AFTER_COMMIT=marker, app="pipeline_app")
    pipe.run()
    wait_for(lambda: doomed.proc.poll() is not None, "the worker to kill itself after the commit",
             timeout=60, context=doomed.output)
    assert marker.read_text().split() == [first.message_id, "SUCCEEDED"]
    # The window was real: the first step committed, the second was never published, and yet it is
    # in the store, registered in the same transaction.
    assert store.get(first.message_id).status is JobStatus.SUCCEEDED
    registered = store.get(second.message_id)
    assert registered.status is JobStatus.PENDING and registered.parent_job_id == first.message_id
    assert registered.message["args"] == [21]

    survivor = start_worker(RELIABLE_TEST_SWEEP_AFTER=1, app="pipeline_app")
    wait_for(lambda: store.get(second.message_id).status is JobStatus.SUCCEEDED, "the second step to run",
             timeout=60, context=survivor.output)
    assert "redispatched" in [e.event for e in store.events(second.message_id)]
    assert {j.job_id for j in store.list_jobs(workflow_id=first.message_id)} == {first.message_id,
                                                                                 second.message_id}


def test_group_completes_after_a_kill_between_the_last_commit_and_the_callback(
        worker_env: dict[str, str], start_worker: Any, queue_name: str, tmp_path: Path) -> None:
    producer = RabbitmqBroker(url=worker_env["RELIABLE_TEST_BROKER"])
    producer.add_middleware(GroupCallbacks(StubBackend()))  # before install: its barriers go to the store
    middleware = reliable.install(producer, store=worker_env["RELIABLE_TEST_STORE"], recovery=False)
    store = middleware.store
    try:
        def declare(name: str) -> dramatiq.Actor[Any, Any]:
            return dramatiq.Actor(lambda *a: None, broker=producer, actor_name=name, queue_name=queue_name,
                                  priority=0, options={})

        increment, finished = declare("increment"), declare("finished")
        group = dramatiq.group([increment.message(n) for n in range(3)], broker=producer)
        group.add_completion_callback(finished.message("all three"))
        callback_id = group.completion_callbacks[0]["message_id"]
        marker = tmp_path / "killed"

        doomed = start_worker(RELIABLE_TEST_KILL_AFTER_GROUP_COMMIT=marker, app="pipeline_app")
        group.run()
        wait_for(lambda: doomed.proc.poll() is not None, "the worker to kill itself after the last member's commit",
                 timeout=60, context=doomed.output)
        members = [store.get(m.message_id) for m in group.children]
        assert [m.status for m in members] == [JobStatus.SUCCEEDED] * 3
        callback = store.get(callback_id)
        assert callback.status is JobStatus.PENDING, "registered with the last member's success"
        assert callback.parent_job_id == marker.read_text().split()[0]

        survivor = start_worker(RELIABLE_TEST_SWEEP_AFTER=1, app="pipeline_app")
        wait_for(lambda: store.get(callback_id).status is JobStatus.SUCCEEDED, "the completion callback to run",
                 timeout=60, context=survivor.output)
        assert {j.job_id for j in store.list_jobs(workflow_id=members[0].workflow_id)} == \
            {m.job_id for m in members} | {callback_id}
    finally:
        producer.close()
        store.close()
