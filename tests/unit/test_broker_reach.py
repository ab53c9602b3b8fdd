"""`reliable.rabbitmq.reach`: a failed broker query as one redacted line; a mistake told from an outage
(the real services: tests/integration/test_broker_setup_errors.py, tests/observability/test_broker_query_errors.py)."""

from __future__ import annotations

import ssl

import pika
import pytest
from pika.adapters.utils.connection_workflow import AMQPConnectorSocketConnectError
from pika.exceptions import AMQPConnectionError, ProbableAccessDeniedError, ProbableAuthenticationError

from reliable.errors import BrokerConfigError
from reliable.rabbitmq.reach import describe_failure, explain, misconfiguration, parse_url

NODES = [pika.URLParameters("amqp://app:pw-h9@rmq-1:5672/%2Fshop"),
         pika.URLParameters("amqp://app:pw-h9@rmq-2:5673/%2Fshop")]
#: What pika raises when nothing listens (as BlockingConnection does: the socket error wrapped twice).
REFUSED = "AMQPConnectionError: AMQPConnectorSocketConnectError: ConnectionRefusedError(111, 'Connection refused')"


def refused() -> AMQPConnectionError:
    return AMQPConnectionError(AMQPConnectorSocketConnectError(ConnectionRefusedError(111, "Connection refused")))


def test_an_error_with_an_empty_message_is_described_by_its_arguments() -> None:
    assert str(refused()) == ""  # what made the exporter log "RabbitMQ query failed: " with nothing after
    assert describe_failure(refused()) == REFUSED
    assert describe_failure(AMQPConnectionError()) == "AMQPConnectionError"


def test_a_described_failure_never_holds_a_password() -> None:
    text = describe_failure(ValueError("cannot use amqp://app:pw-h9@rmq-1:5672/ (password=pw-h9)"))
    assert "pw-h9" not in text and text.startswith("ValueError: cannot use amqp://app:***@rmq-1:5672/")


def test_mistakes_get_their_fix_and_an_outage_none() -> None:
    login = misconfiguration(ProbableAuthenticationError("ACCESS_REFUSED"), NODES)
    assert login is not None and login.startswith("RabbitMQ at rmq-1:5672, rmq-2:5673 refused the login of user 'app'")
    vhost = misconfiguration(ProbableAccessDeniedError("NOT_ALLOWED"), NODES)
    assert vhost is not None and "refused virtual host '/shop' to user 'app'" in vhost
    tls = misconfiguration(ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), NODES)
    assert tls is not None and "TLS handshake failed" in tls
    assert misconfiguration(refused(), NODES) is None
    assert explain(refused(), NODES) == f"RabbitMQ at rmq-1:5672, rmq-2:5673: {REFUSED}"
    for line in (login, vhost, tls):
        assert "pw-h9" not in line


def test_a_url_pika_cannot_parse_is_one_line_without_the_url() -> None:
    for url, says in (("redis://app:pw-h9@host:6379/0", "Unexpected URL scheme 'redis'"),
                      ("amqp://app:pw-h9@host:notaport/", "Port could not be cast to integer value")):
        with pytest.raises(BrokerConfigError) as info:
            parse_url(url)
        assert str(info.value).startswith(f"unsupported RabbitMQ URL: {says}"), info.value
        assert "pw-h9" not in str(info.value) and "\n" not in str(info.value)
    assert [p.port for p in parse_url("amqp://a:b@h1:5672/; amqp://a:b@h2:5673/")] == [5672, 5673]
