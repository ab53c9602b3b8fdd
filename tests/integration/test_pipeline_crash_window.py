"""A worker killed between committing a pipeline step's success and publishing the next step:
the next step was registered with the success, so the pipeline still completes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dramatiq
import pytest

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
