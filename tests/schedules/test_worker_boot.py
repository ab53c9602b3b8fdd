"""Schedules in a worker (StubBroker): stored with their templates at boot, fired by the recovery thread."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

import reliable
from reliable import ConfigError, Schedule
from reliable.errors import ActorContractError
from reliable.middleware import ReliableMiddleware
from reliable.schedules import storage
from reliable.states import JobStatus

from support import wait_for


@pytest.fixture
def broker() -> Iterator[StubBroker]:
    made = StubBroker()
    dramatiq.set_broker(made)
    yield made
    made.close()


def install(broker: StubBroker, url: str, schedules: Any) -> ReliableMiddleware:
    return reliable.install(broker, store=url, schedules=schedules, recovery_interval=0.05, json_logs=False,
                            metrics=False)


def test_boot_stores_templates_and_the_recovery_thread_fires_slots(broker: StubBroker, sqlite_url: str) -> None:
    runs: list[int] = []
    middleware = install(broker, sqlite_url, [Schedule("every-second", "count", every=1, kwargs={"n": 7})])

    @dramatiq.actor(queue_name="sched", owner="team-s", idempotent=False)
    def count(n: int) -> None:
        runs.append(n)

    worker = dramatiq.Worker(broker, worker_timeout=50)
    worker.start()
    try:
        row = storage.get_schedule(middleware.store, "every-second")
        assert (row.actor, row.queue, row.template["owner"]) == ("count", "sched", "team-s")
        options = row.template["message"]["options"]
        assert options["reliable_contract"] == {"idempotent": False, "owner": "team-s"}  # the declared contract
        assert "trace_id" not in options and "message_id" not in row.template["message"]
        wait_for(lambda: len(runs) >= 2, "two slots fired and run", timeout=20)
    finally:
        worker.stop()
    slots = storage.list_slots(middleware.store, "every-second")
    assert len(slots) >= 2 and len({s.slot_at for s in slots}) == len(slots)
    assert all(s.slot_at == int(s.slot_at) for s in slots)
    assert runs[:2] == [7, 7]
    done = [s for s in slots if s.status is JobStatus.SUCCEEDED]
    assert done and middleware.store.get(done[0].job_id).owner == "team-s"


def test_an_unknown_actor_stops_the_boot(broker: StubBroker, sqlite_url: str) -> None:
    install(broker, sqlite_url, [Schedule("orphan", "nobody", every=60)])
    worker = dramatiq.Worker(broker, worker_timeout=50)
    with pytest.raises(ActorContractError, match="schedule 'orphan': no actor named 'nobody'"):
        worker.start()
    worker.stop()


def test_an_untracked_actor_is_refused(broker: StubBroker, sqlite_url: str) -> None:
    install(broker, sqlite_url, [Schedule("plain", "untracked", every=60)])

    @dramatiq.actor(queue_name="sched", reliable=False)
    def untracked() -> None:
        """Not tracked."""

    worker = dramatiq.Worker(broker, worker_timeout=50)
    with pytest.raises(ConfigError, match="schedule 'plain': actor 'untracked' is declared with reliable=False"):
        worker.start()
    worker.stop()


def test_bad_schedules_fail_at_install(broker: StubBroker, sqlite_url: str, tmp_path: Any) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text("schedules:\n  - name: a\n    actor: b\n    cron: '61 * * * *'\n")
    with pytest.raises(ConfigError, match=r"schedules.yaml:4: bad cron expression: minute: 61 is out of range"):
        install(broker, sqlite_url, str(path))
