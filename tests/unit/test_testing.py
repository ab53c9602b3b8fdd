"""reliable.testing's own refusals and limits (examples/test_reliable_app.py shows it at work)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

import reliable
from reliable.errors import ClaimRefused, ConfigError
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.testing import Harness, middleware_of, sqlite_store_url, wait_for


def test_sqlite_store_url_is_migrated(tmp_path: Path) -> None:
    url = sqlite_store_url(tmp_path)
    assert url == f"sqlite:///{tmp_path / 'reliable.db'}"
    store = StateStore(url)
    try:
        store.check_schema()  # raises StoreNotMigrated on an empty file
    finally:
        store.close()


def test_a_broker_without_reliable_is_named() -> None:
    with pytest.raises(ConfigError, match="reliable is not installed on this broker"):
        middleware_of(StubBroker())


def test_wait_for_returns_the_value_or_names_what_it_waited_for() -> None:
    assert wait_for(lambda: 42, "the answer") == 42
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for nothing\nlog tail"):
        wait_for(lambda: None, "nothing", timeout=0.05, interval=0.01, context=lambda: "log tail")


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    broker = StubBroker()
    reliable.install(broker, store=sqlite_store_url(tmp_path), recovery=False, json_logs=False)
    harness = Harness(broker)
    yield harness
    harness.close()


def test_one_worker_at_a_time(harness: Harness) -> None:
    with harness.worker(), pytest.raises(RuntimeError, match="already running"), harness.worker():
        pass


def test_run_until_idle_names_the_queue_still_busy(harness: Harness) -> None:
    @dramatiq.actor(broker=harness.broker, queue_name="later")
    def later() -> None:
        pass

    message = later.send_with_options(delay=60_000)
    with pytest.raises(TimeoutError, match=r"the queues \['later'\] still had messages after 0.2s"):
        harness.run_until_idle(timeout=0.2)
    assert harness.state(message.message_id) is JobStatus.PENDING


def test_a_crash_needs_a_job_a_worker_could_claim(harness: Harness) -> None:
    @dramatiq.actor(broker=harness.broker, queue_name="once")
    def once() -> None:
        pass

    job_id = once.send().message_id
    harness.run_until_idle()
    assert harness.history(job_id) == ["enqueued", "claim", "succeed"]
    with pytest.raises(ClaimRefused):
        harness.crash(job_id)


def test_run_until_idle_needs_a_stub_broker(tmp_path: Path) -> None:
    broker = dramatiq.Broker()
    reliable.install(broker, store=sqlite_store_url(tmp_path), recovery=False, json_logs=False)
    with pytest.raises(ConfigError, match="needs Dramatiq's StubBroker, not Broker"):
        Harness(broker).run_until_idle()
    middleware_of(broker).store.close()
