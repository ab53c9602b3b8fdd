"""A worker's boot says its timings in ONE line: twelve actors on Dramatiq's default 600 s time limit
under the default prefetch log no warning (it was one `consumer_timeout` WARNING per actor per child)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.rabbitmq.boot import check_broker


def _boot(rabbitmq_url: str, sqlite_url: str, caplog: pytest.LogCaptureFixture, **actor_options: object) -> list[
        logging.LogRecord]:
    broker = RabbitmqBroker(url=rabbitmq_url)
    middleware = reliable.install(broker, store=sqlite_url, recovery=False, metrics=False, json_logs=False)
    try:
        for i in range(12):
            dramatiq.actor(lambda: None, actor_name=f"step{i}", queue_name="boot_timeouts", broker=broker,
                           **actor_options)
        caplog.set_level(logging.INFO, logger="reliable.rabbitmq")
        worker = SimpleNamespace(queue_prefetch=16, worker_threads=8)  # Dramatiq's defaults: 8 threads, 2 x 8
        check_broker(broker, middleware, worker)
    finally:
        broker.close()
        middleware.store.close()
    return [r for r in caplog.records if r.name == "reliable.rabbitmq"]


def test_the_default_time_limit_is_one_info_line_per_boot(rabbitmq_url: str, sqlite_url: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    records = _boot(rabbitmq_url, sqlite_url, caplog)
    assert [r.levelname for r in records] == ["INFO"], [r.getMessage() for r in records]
    line = records[0].getMessage()
    assert line.startswith("timeouts: RabbitMQ consumer_timeout 1800s") and "600s (12 actors)" in line


def test_a_time_limit_beyond_the_consumer_timeout_is_still_a_warning(rabbitmq_url: str, sqlite_url: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    records = _boot(rabbitmq_url, sqlite_url, caplog, time_limit=3_600_000)
    assert [r.levelname for r in records] == ["INFO"] + ["WARNING"] * 12
    assert records[0].getMessage().endswith("; 12 risks (warnings follow)")
    assert records[1].getMessage().startswith("consumer_timeout: actor 'step0': time_limit 3600s")
