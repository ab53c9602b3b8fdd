"""The exporter and `reliable web` say why a RabbitMQ query failed: the nodes (host:port), the
exception's class and message and, for a mistake, its fix; never the password. A broker URL pika
cannot parse stops `reliable exporter` and `reliable web` at their start with one line. Real RabbitMQ."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from prometheus_client import CollectorRegistry

from reliable.collector import StoreCollector
from reliable.errors import BrokerConfigError
from reliable.store import NewJob, StateStore
from reliable.web.queues import broker_depths_of

from support import free_port, port_open, require_service

pytestmark = [pytest.mark.integration]

PASSWORD = "h9-Wr0ng-pw"
BIN = Path(sys.executable).parent


def scrape_once(store_url: str, broker_url: str) -> float:
    """One collection with `broker_url`; the count of failed RabbitMQ queries it reports."""
    store = StateStore(store_url)
    try:
        store.register(NewJob("j", "exports", "export", {}))
        registry = CollectorRegistry()
        registry.register(StoreCollector(store, broker_url=broker_url))
        samples = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples}
    finally:
        store.close()
    return samples[("reliable_collector_errors", (("source", "rabbitmq"),))]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_exporter_says_a_login_was_refused_and_the_fix(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    assert scrape_once(sqlite_url, f"amqp://guest:{PASSWORD}@127.0.0.1:5672/") == 1
    [line] = [w for w in warnings_of(caplog) if "RabbitMQ query failed" in w]
    assert ("collector: RabbitMQ query failed: RabbitMQ at 127.0.0.1:5672 refused the login of user 'guest' "
            "(ProbableAuthenticationError: ConnectionClosedByBroker: (403) 'ACCESS_REFUSED") in line
    assert "check the user and password in the broker URL" in line
    assert PASSWORD not in caplog.text


def test_the_exporter_names_host_port_and_cause_of_an_outage(sqlite_url: str,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    assert scrape_once(sqlite_url, f"amqp://guest:guest@127.0.0.1:{port}/") == 1
    [line] = [w for w in warnings_of(caplog) if "RabbitMQ query failed" in w]
    assert line == (f"collector: RabbitMQ query failed: RabbitMQ at 127.0.0.1:{port}: AMQPConnectionError: "
                    "AMQPConnectorSocketConnectError: ConnectionRefusedError(111, 'Connection refused')")


def test_reliable_web_says_why_the_depths_could_not_be_read(caplog: pytest.LogCaptureFixture) -> None:
    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    broker = RabbitmqBroker(url=f"amqp://guest:{PASSWORD}@127.0.0.1:5672/%2Fnosuchvhost")
    try:
        assert broker_depths_of(broker, ["exports"]) is None  # the store's figures are still answered
    finally:
        broker.close()
    [line] = [w for w in warnings_of(caplog) if "depths could not be read" in w]
    assert "RabbitMQ at 127.0.0.1:5672 refused the login of user 'guest'" in line  # the login is checked first
    assert PASSWORD not in caplog.text
    vhost = RabbitmqBroker(url="amqp://guest:guest@127.0.0.1:5672/%2Fnosuchvhost")
    try:
        assert broker_depths_of(vhost, ["exports"]) is None
    finally:
        vhost.close()
    assert "refused virtual host '/nosuchvhost' to user 'guest'" in warnings_of(caplog)[-1]


def test_a_broker_url_pika_cannot_parse_stops_exporter_and_web_at_start(sqlite_url: str) -> None:
    url = f"redis://app:{PASSWORD}@127.0.0.1:6379/0"
    with pytest.raises(BrokerConfigError, match="unsupported RabbitMQ URL: Unexpected URL scheme 'redis'"):
        StoreCollector(StateStore(sqlite_url), broker_url=url)
    for args in (["exporter", "--store", sqlite_url, "--broker", url, "--port", str(free_port())],
                 ["web", "--store", sqlite_url, "--broker", url, "--port", str(free_port())]):
        done = subprocess.run([str(BIN / "reliable"), *args], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, (args[0], done.stderr[-2000:])
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("error: unsupported RabbitMQ URL: Unexpected URL scheme 'redis'"), line
        assert "write amqp://user:password@host:5672/vhost" in line
        assert PASSWORD not in done.stdout + done.stderr
