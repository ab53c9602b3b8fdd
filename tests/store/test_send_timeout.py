"""A producer's send waits out a store outage for its send_timeout, then raises SendTimedOut.

The store is a private PostgreSQL cluster this module stops and starts (never the shared one). A
send started while it is down and given a send_timeout longer than the outage succeeds once the
server is back (the job registered, the message published); a send whose timeout passes first
raises SendTimedOut (a StoreUnavailable) and publishes nothing. Both with the per-call option
(`send_with_options(send_timeout=...)`) and with install's `send_timeout`. The retry loop itself is
tested with an injected clock (`retry_while_unavailable`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from private_postgres import PrivatePostgres, private_postgres

import reliable
from reliable.errors import (
    ActorContractError,
    SendTimedOut,
    StoreError,
    StoreMisconfigured,
    StoreNotMigrated,
    StoreUnavailable,
)
from reliable.middleware import ReliableMiddleware
from reliable.store import StateStore
from reliable.store.retrying import retry_while_unavailable

from support import wait_for

pytestmark = [pytest.mark.integration]




@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[PrivatePostgres, str]]:
    """A private cluster with a migrated store; (cluster, store URL)."""
    with private_postgres() as pg:
        url = pg.create_database("store")
        store = StateStore(url)
        store.upgrade()
        store.close()
        yield pg, url


@pytest.fixture
def pg(cluster: tuple[PrivatePostgres, str]) -> Iterator[tuple[PrivatePostgres, str]]:
    """The cluster, running again after the test whatever it did."""
    yield cluster
    if not cluster[0].running():
        cluster[0].start()


class Retries(logging.Handler):
    """Keeps the warnings of the reliable.store logger (the retry loop's)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def retries() -> Iterator[Retries]:
    handler = Retries()
    logger = logging.getLogger("reliable.store")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def producer(url: str, queue: str, **options: Any) -> tuple[StubBroker, ReliableMiddleware, dramatiq.Actor[Any, Any]]:
    """A producer on a StubBroker with reliable installed, and its actor on `queue` (one per test: the
    module's store is shared)."""
    broker = StubBroker()
    middleware = reliable.install(broker, store=url, recovery=False, metrics=False, json_logs=False, **options)
    broker.declare_queue(queue)

    @dramatiq.actor(broker=broker, queue_name=queue)
    def charge(order: int) -> None:
        pass

    return broker, middleware, charge


def test_a_send_waits_out_an_outage_shorter_than_its_timeout(pg: tuple[PrivatePostgres, str],
                                                             retries: Retries) -> None:
    cluster, url = pg
    queue = "waits"
    broker, middleware, charge = producer(url, queue)
    charge.send(0)  # the pool holds a connection the stop will cut
    cluster.stop()
    outcome: dict[str, Any] = {}

    def send() -> None:
        try:
            outcome["message"] = charge.send_with_options(args=(1,), send_timeout=120)
        except BaseException as exc:
            outcome["error"] = exc

    sender = threading.Thread(target=send)
    started = time.monotonic()
    sender.start()
    # Down for at least three tries (0.25 + 0.5 + 1 s of backoff): the send is waiting, not lucky.
    wait_for(lambda: sum("retrying" in line for line in retries.lines) >= 3, "three retries of the send",
             timeout=30)
    assert "message" not in outcome and "error" not in outcome
    cluster.start()
    sender.join(60)
    waited = time.monotonic() - started
    assert not sender.is_alive() and "error" not in outcome, outcome
    message = outcome["message"]
    job = middleware.store.get(message.message_id)
    assert job.status.value == "PENDING"
    assert "send_timeout" not in job.message["options"]  # for this send only: neither stored...
    published = [dramatiq.Message.decode(broker.queues[queue].get_nowait())
                 for _ in range(broker.queues[queue].qsize())]
    assert len(published) == 2
    assert all("send_timeout" not in m.options for m in (message, *published))  # ...nor published
    assert any("the send waits up to 120s" in line for line in retries.lines)
    assert not any("unacked" in line for line in retries.lines)  # a producer holds no message
    print(f"send waited {waited:.1f}s through the outage, then succeeded")
    middleware.store.close()


@pytest.mark.parametrize("where", ["per call", "install"])
def test_a_send_raises_after_its_timeout(pg: tuple[PrivatePostgres, str], where: str) -> None:
    cluster, url = pg
    timeout = 1.5
    queue = f"raises_{where.replace(' ', '_')}"
    broker, middleware, charge = producer(url, queue, **({"send_timeout": timeout} if where == "install" else {}))
    cluster.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        if where == "install":
            charge.send(2)
        else:
            charge.send_with_options(args=(2,), send_timeout=timeout)
    waited = time.monotonic() - started
    assert isinstance(info.value, SendTimedOut)
    assert f"send_timeout of {timeout:g}s" in str(info.value) and "nothing was sent" in str(info.value)
    assert timeout <= waited < timeout + 8, waited  # + a failing try's own time (connect_timeout 5 s)
    assert broker.queues[queue].qsize() == 0
    cluster.start()
    assert middleware.store.list_jobs(queue=queue) == []  # not registered either
    print(f"send raised SendTimedOut after {waited:.2f}s (send_timeout {timeout}s)")
    middleware.store.close()


def test_a_bad_send_timeout_is_refused(pg: tuple[PrivatePostgres, str]) -> None:
    _cluster, url = pg
    queue = "bad_timeout"
    broker, middleware, charge = producer(url, queue)
    with pytest.raises(ActorContractError, match="message option 'send_timeout' must be a number of seconds"):
        charge.send_with_options(args=(3,), send_timeout="soon")
    assert broker.queues[queue].qsize() == 0
    with pytest.raises(reliable.ConfigError, match="send_timeout must be a number of seconds"):
        producer(url, queue, send_timeout=-1)
    middleware.store.close()


# -- the loop, with an injected clock ----------------------------------------------------------------------

class FakeTime:
    """A clock that `sleep` moves forward."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(errors: list[Exception], result: str = "done") -> Any:
    def call() -> str:
        if errors:
            raise errors.pop(0)
        return result
    return call


def test_the_loop_waits_out_an_outage_until_the_deadline() -> None:
    fake = FakeTime()
    call = failing([StoreUnavailable("down")] * 100)
    with pytest.raises(SendTimedOut, match="send_timeout of 3s"):
        retry_while_unavailable(call, what="send", max_delay=1.0, timeout=3.0, sleep=fake.sleep, clock=fake.clock)
    assert fake.now == pytest.approx(3.0)  # the last try ran at the deadline
    assert fake.sleeps[:3] == [0.25, 0.5, 1.0] and max(fake.sleeps) == 1.0


def test_the_loop_returns_once_the_store_is_back() -> None:
    fake = FakeTime()
    call = failing([StoreUnavailable("down")] * 3)
    assert retry_while_unavailable(call, what="send", max_delay=1.0, timeout=30.0, sleep=fake.sleep,
                                   clock=fake.clock) == "done"
    assert fake.sleeps == [0.25, 0.5, 1.0]


@pytest.mark.parametrize("error", [StoreMisconfigured("wrong password"), StoreNotMigrated("no schema"),
                                   StoreError("a constraint")])
def test_the_loop_raises_a_configuration_error_or_a_failed_statement_at_once(error: Exception) -> None:
    fake = FakeTime()
    with pytest.raises(type(error)):
        retry_while_unavailable(failing([error]), what="send", max_delay=1.0, timeout=30.0, sleep=fake.sleep,
                                clock=fake.clock)
    assert fake.sleeps == []


def test_a_worker_holding_a_message_waits_even_on_a_configuration_error(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTime()
    call = failing([StoreNotMigrated("run `reliable db upgrade`"), StoreUnavailable("down")])
    assert retry_while_unavailable(call, what="claim", max_delay=1.0, hold=True, note=" (message kept unacked)",
                                   sleep=fake.sleep, clock=fake.clock) == "done"
    assert fake.sleeps == [0.25, 0.5]
    [misconfigured, unavailable] = [r for r in caplog.records if r.name == "reliable.store"]
    assert misconfigured.levelno == logging.ERROR and "reliable db upgrade" in misconfigured.getMessage()
    assert "message kept unacked" in unavailable.getMessage()


def test_without_a_timeout_the_loop_never_gives_up() -> None:
    fake = FakeTime()
    call = failing([StoreUnavailable("down")] * 50)
    assert retry_while_unavailable(call, what="finish", max_delay=2.0, hold=True, sleep=fake.sleep,
                                   clock=fake.clock) == "done"
    assert len(fake.sleeps) == 50 and fake.now > 90


def test_a_send_from_inside_a_run_waits_like_the_runs_other_writes(tmp_path: Any) -> None:
    """An actor sending a child holds its own message: the send waits (even on a configuration
    error, logged), as the run's checkpoints and finish do; outside a run it raises at once."""
    from reliable.worker.context import _fast_run

    url = f"sqlite:///{tmp_path / 'r.db'}"
    StateStore(url).upgrade()
    middleware = ReliableMiddleware(url, recovery=False, metrics=False, json_logs=False)
    with pytest.raises(StoreNotMigrated):
        middleware.runtime.send("send", failing([StoreNotMigrated("no schema")]))
    token = _fast_run.set(("parent-job", None))  # type: ignore[arg-type]  # only its presence matters
    try:
        assert middleware.runtime.send("send", failing([StoreNotMigrated("no schema")])) == "done"
    finally:
        _fast_run.reset(token)
    middleware.store.close()
