"""A frozen worker past its lease cannot commit; a message the broker lost is re-dispatched."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from reliable.states import JobStatus

from support import wait_for
from workers import purge, send

pytestmark = pytest.mark.integration


def test_frozen_worker_commit_is_refused_after_reassignment(producer: Any, start_worker: Any,
                                                            queue_name: str) -> None:
    broker, store = producer
    message = send(broker, queue_name, "units", 20, 0.2)
    job_id = message.message_id
    frozen = start_worker(RELIABLE_TEST_LEASE_TTL=2, RELIABLE_TEST_HEARTBEAT=0.5)
    wait_for(lambda: (store.get(job_id).checkpoint or 0) >= 2, "the first worker to checkpoint", timeout=30,
             context=frozen.output)
    frozen.signal(signal.SIGSTOP)
    first = store.get(job_id)
    assert first.status is JobStatus.RUNNING and first.lease_id == 1

    # The frozen process still holds an AMQP consumer, so RabbitMQ may hand it the re-dispatched
    # message too; the sweeper publishes again when no claim follows within sweep_after.
    rescuer = start_worker(RELIABLE_TEST_LEASE_TTL=2, RELIABLE_TEST_HEARTBEAT=0.5,
                           RELIABLE_TEST_RECOVERY_INTERVAL=0.5, RELIABLE_TEST_SWEEP_AFTER=2)
    wait_for(lambda: store.get(job_id).status is JobStatus.SUCCEEDED, "the second worker to finish", timeout=60,
             context=rescuer.output)
    done = store.get(job_id)
    assert done.worker_id != first.worker_id and done.lease_id == 2 and done.attempt == 2

    frozen.signal(signal.SIGCONT)
    wait_for(lambda: any(e.event == "stale_commit_rejected" for e in store.events(job_id)),
             "the thawed worker's write to be refused", timeout=20, context=frozen.output)

    final = store.get(job_id)
    assert final.status is JobStatus.SUCCEEDED and final.worker_id == done.worker_id and final.checkpoint == 20
    history = store.events(job_id)
    stale = [e for e in history if e.event == "stale_commit_rejected"]
    assert stale[0].lease_id == 1 and stale[0].worker_id == first.worker_id
    # Where SIGSTOP landed decides the thawed worker's first write: a unit's record_effect is
    # refused and the unit noted (effect_unrecorded, under the old lease: its effect may have
    # happened there); a checkpoint is refused and nothing is noted. Both are correct.
    noted = [e for e in history if e.event == "effect_unrecorded"]
    assert all(e.lease_id == 1 and e.worker_id == first.worker_id for e in noted), noted
    assert [e.event for e in history if e.event not in ("checkpoint", "stale_commit_rejected", "redispatched",
                                                        "claim_refused", "duplicate_effect",
                                                        "effect_unrecorded")] == [
        "enqueued", "claim", "lease_expired", "claim", "succeed"]
    units = [e for e in store.effects(job_id) if not e.op_key.split(":")[-1].startswith("start")]
    assert len(units) == 20, "each unit applied once across both workers"


def test_sweeper_redispatches_a_message_the_broker_lost(producer: Any, start_worker: Any, queue_name: str,
                                                        rabbitmq_url: str) -> None:
    broker, store = producer
    message = send(broker, queue_name, "noop")
    assert purge(rabbitmq_url, queue_name) == 1, "the message is gone from RabbitMQ"
    assert store.get(message.message_id).status is JobStatus.PENDING
    worker = start_worker(RELIABLE_TEST_SWEEP_AFTER=1, RELIABLE_TEST_RECOVERY_INTERVAL=0.5)
    wait_for(lambda: store.get(message.message_id).status is JobStatus.SUCCEEDED, "the swept job", timeout=30,
             context=worker.output)
    events = [e.event for e in store.events(message.message_id)]
    assert events == ["enqueued", "redispatched", "claim", "succeed"]
