"""reliable.compat: every third-party private part behind a version gate; the installed releases are
the verified ones, and each fallback (public API only) does its job too.

A release outside a gate's `VERIFIED_*` fails `test_the_installed_releases_are_verified`: read the
private part in that release, then add it to the set (or let the fallback serve).
"""

from __future__ import annotations

import dramatiq
import pytest
import sqlalchemy
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker
from prometheus_client import values
from rich.console import Console
from rich.table import Table
from rich.text import Text

from reliable.compat import (
    dramatiq_internals,
    pika_internals,
    prometheus_internals,
    release,
    rich_internals,
    sqlalchemy_internals,
)


def _delivery(queue: str = "default") -> MessageProxy:
    return MessageProxy(dramatiq.Message(queue_name=queue, actor_name="a", args=(1,), kwargs={}, options={}))


def test_release_is_major_minor() -> None:
    assert release("2.2.1") == "2.2" and release("15.0.0") == "15.0" and release("1.4") == "1.4"


def test_the_installed_releases_are_verified() -> None:
    assert dramatiq_internals.DRAMATIQ_VERIFIED and dramatiq_internals.PROXY_HOLDS_MESSAGE
    assert pika_internals.ACKS_TOGETHER
    assert prometheus_internals.PROMETHEUS_VERIFIED
    assert rich_internals.RICH_VERIFIED
    assert sqlalchemy_internals.SQLALCHEMY_VERIFIED


def test_a_delivery_s_fields_are_read_without_the_proxy_and_the_same_through_it() -> None:
    delivery = _delivery()
    assert dramatiq_internals.message_fields is dramatiq_internals.fields_read_directly
    direct = dramatiq_internals.fields_read_directly(delivery)
    assert not isinstance(direct, MessageProxy)
    fallback = dramatiq_internals.fields_through_proxy(delivery)
    assert (direct.message_id, direct.args, direct.queue_name) == (fallback.message_id, fallback.args,
                                                                     fallback.queue_name)
    plain = dramatiq.Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={})
    assert dramatiq_internals.message_fields(plain) is plain


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "fallback"])
def test_a_delivery_is_pointed_back_at_its_queue(monkeypatch: pytest.MonkeyPatch, verified: bool) -> None:
    monkeypatch.setattr(dramatiq_internals, "PROXY_HOLDS_MESSAGE", verified)
    delivery = _delivery("forged")
    dramatiq_internals.point_at_queue(delivery, "default")
    assert delivery.queue_name == "default"  # what Dramatiq's worker reads to pick the consumer
    assert delivery.message_id == dramatiq_internals.fields_through_proxy(delivery).message_id


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "fallback"])
def test_the_worker_s_threads(monkeypatch: pytest.MonkeyPatch, verified: bool) -> None:
    monkeypatch.setattr(dramatiq_internals, "DRAMATIQ_VERIFIED", verified)
    worker = dramatiq.Worker(StubBroker(), worker_threads=1)
    threads = dramatiq_internals.worker_threads(worker)
    assert threads is worker.workers if verified else threads == []


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "fallback"])
def test_no_consumer_sends_acknowledgements_together_when_closed(monkeypatch: pytest.MonkeyPatch,
                                                                  verified: bool) -> None:
    monkeypatch.setattr(pika_internals, "ACKS_TOGETHER", verified)
    broker = StubBroker()
    broker.declare_queue("default")
    stub_consumer = broker.consume("default")
    assert pika_internals.rabbitmq_consumer(stub_consumer) is None  # not Dramatiq's RabbitMQ consumer
    tagged = _delivery()
    tagged._tag = 7  # as Dramatiq's _RabbitmqMessage keeps it
    assert pika_internals.delivery_tag(tagged) == (7 if verified else None)


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "fallback"])
def test_multiprocess_values_are_told_apart(monkeypatch: pytest.MonkeyPatch, verified: bool) -> None:
    monkeypatch.setattr(prometheus_internals, "PROMETHEUS_VERIFIED", verified)
    monkeypatch.setattr(values, "ValueClass", values.MutexValue)
    assert prometheus_internals.multiprocess_values() is False
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue())
    assert prometheus_internals.multiprocess_values() is True


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "fallback"])
def test_a_column_s_cells_made_plain(monkeypatch: pytest.MonkeyPatch, verified: bool) -> None:
    monkeypatch.setattr(rich_internals, "RICH_VERIFIED", verified)
    table = Table("checkpoint")
    table.add_row("[/] is data")
    rich_internals.plain_cells(table.columns[0])
    cells = list(table.columns[0].cells)
    assert isinstance(cells[0], Text) if verified else cells == ["[/] is data"]
    if verified:
        console = Console(width=40, record=True)
        console.print(table)
        assert "[/] is data" in console.export_text()


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "fallback"])
def test_a_disconnect_invalidates(monkeypatch: pytest.MonkeyPatch, tmp_path: object, verified: bool) -> None:
    monkeypatch.setattr(sqlalchemy_internals, "SQLALCHEMY_VERIFIED", verified)
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/compat.db", pool_size=2)
    try:
        idle, failed = engine.raw_connection(), engine.raw_connection()
        idle_dbapi = idle.dbapi_connection
        idle.close()  # back in the pool, opened before the disconnect
        sqlalchemy_internals.invalidate_all(engine.pool, failed, RuntimeError("server closed the connection"))
        assert not failed.is_valid
        again = engine.raw_connection()
        # verified: every connection opened before is recycled; the fallback drops only the failed one
        assert (again.dbapi_connection is not idle_dbapi) if verified else (again.dbapi_connection is idle_dbapi)
        again.close()
    finally:
        engine.dispose()
