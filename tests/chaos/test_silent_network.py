"""Silent networks: packets dropped on an open connection (no reset) are bounded on every path.

A `Blackhole` proxy sits between the client and the real PostgreSQL or RabbitMQ and stops forwarding
in both directions while its sockets stay open. A send with `send_timeout=3` must end within its
time (plus a generous margin) whichever side goes silent, and leave nothing half done; a real
worker whose store goes silent under a running job must warn from its heartbeat, interrupt the job
after a TTL saying it is handed on, another worker must run it, and the cut-off worker's late
commit must be refused.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from blackhole import Blackhole
from chaos_run import APP_DIR
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.errors import SendTimedOut
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.testing import wait_for

from workers import WorkerProcess

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]

SEND_TIMEOUT = 3.0
#: What a send may take beyond its send_timeout here: the watchdog's tick, one failed try's
#: handling, a loaded machine. Generous on purpose: without the bounds a send waits minutes.
MARGIN = 4.0
LEASE_TTL, HEARTBEAT, RECOVERY_INTERVAL = 4.0, 1.0, 0.5
#: How long a step may take before the test fails (a worker's boot on a loaded machine included):
#: a bound on failure only, the steps are waited for as conditions.
WAIT = 60.0


@pytest.fixture
def store_url(pg_store: StateStore, pg_database: str) -> str:
    """The session's PostgreSQL database, emptied (`pg_store`)."""
    return pg_database


def through(url: str, proxy: Blackhole, port: int) -> str:
    """`url` with its server's port replaced by the proxy's."""
    return url.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxy.port}")


def timed_send(actor: Any) -> tuple[float, BaseException | None, str]:
    """Send with send_timeout=3: how long it took, what it raised, the message id."""
    message = actor.message_with_options(args=(), send_timeout=SEND_TIMEOUT)
    started = time.monotonic()
    try:
        actor.broker.enqueue(message)
    except BaseException as exc:  # reported by the assertions
        return time.monotonic() - started, exc, message.message_id
    return time.monotonic() - started, None, message.message_id


def test_a_send_on_a_silent_store_or_broker_ends_within_its_send_timeout(store_url: str, rabbitmq_url: str,
                                                                         queue_name: str) -> None:
    pg, mq = Blackhole(5432), Blackhole(5672)
    broker = RabbitmqBroker(url=through(rabbitmq_url, mq, 5672), confirm_delivery=True)
    producer = reliable.install(broker, store=through(store_url, pg, 5432), recovery=False, metrics=False,
                                json_logs=False, max_connections=2)
    observer = StateStore(store_url, max_connections=1)
    actor = dramatiq.actor(lambda: None, actor_name="silent_send", queue_name=queue_name, broker=broker)
    try:
        assert timed_send(actor)[1] is None  # connections open, queue declared: the path is warm

        pg.silence()
        took, raised, job_id = timed_send(actor)
        pg.heal()
        assert isinstance(raised, SendTimedOut), raised
        assert took < SEND_TIMEOUT + MARGIN, f"the send took {took:.1f}s on a silent store"
        # Nothing half done: no job, or (its commit crossed the deadline) a job its events account for.
        job = observer.find(job_id)
        assert job is None or [e.event for e in observer.events(job_id)][:1] == ["enqueued"]

        mq.silence()
        took, raised, job_id = timed_send(actor)
        mq.heal()
        assert isinstance(raised, SendTimedOut), raised
        assert took < SEND_TIMEOUT + MARGIN, f"the send took {took:.1f}s on a silent broker"
        # Registered before the publish: durable, PENDING with its event; the sweeper publishes it.
        assert observer.get(job_id).status is JobStatus.PENDING
        assert [e.event for e in observer.events(job_id)] == ["enqueued"]
        assert "sweeper publishes it" in str(raised)

        assert timed_send(actor)[1] is None  # both paths healed: sends go through again
    finally:
        broker.close()
        producer.store.close()
        observer.close()
        pg.close()
        mq.close()


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(300)
def test_a_worker_cut_off_from_its_store_hands_its_job_on(store_url: str, rabbitmq_url: str, queue_name: str,
                                                          tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    pg = Blackhole(5432)
    env = {"RELIABLE_TEST_BROKER": rabbitmq_url, "RELIABLE_TEST_QUEUE": queue_name,
           "RELIABLE_SILENT_DIR": str(records), "RELIABLE_TEST_LEASE_TTL": str(LEASE_TTL),
           "RELIABLE_TEST_HEARTBEAT": str(HEARTBEAT), "RELIABLE_TEST_RECOVERY_INTERVAL": str(RECOVERY_INTERVAL)}
    # One thread, one prefetched delivery: while its late commit waits for the store, the cut-off
    # worker has no room to take the handed-on delivery (one with room would hold it, its claim
    # waiting for the store like its other writes, until the store answers again).
    cut_off = WorkerProcess({**env, "RELIABLE_TEST_STORE": through(store_url, pg, 5432),
                             "dramatiq_queue_prefetch": "1"}, tmp_path / "cut_off.log",
                            threads=1, app="silent_app", app_dir=APP_DIR)
    other: WorkerProcess | None = None
    broker = RabbitmqBroker(url=rabbitmq_url)
    producer = reliable.install(broker, store=store_url, recovery=False, metrics=False, json_logs=False,
                                max_connections=1)
    observer = StateStore(store_url, max_connections=1)
    bodies = records / "bodies.log"
    job_id = ""

    def diagnosis() -> str:  # the tail of each log, then the job's history
        events = [(e.event, e.lease_id) for e in observer.events(job_id)] if job_id else []
        return (f"--- cut-off worker\n{cut_off.output()[-4000:]}\n--- other worker\n"
                f"{other.output()[-4000:] if other else ''}\n--- {_lines(bodies)}\n--- events {events}")

    try:
        message = dramatiq.Message(queue_name=queue_name, actor_name="silent_body", args=(), kwargs={}, options={})
        broker.enqueue(message)
        job_id = message.message_id
        wait_for(lambda: _lines(bodies), "the first attempt to run", timeout=WAIT, context=cut_off.output)
        assert _lines(bodies)[0][:2] == [job_id, "1"]
        (records / "release-2").touch()  # the attempt that takes over returns at once

        pg.silence()
        silenced = time.monotonic()
        other = WorkerProcess({**env, "RELIABLE_TEST_STORE": store_url}, tmp_path / "other.log", threads=2,
                              app="silent_app", app_dir=APP_DIR)
        wait_for(lambda: "being handed on" in cut_off.output(), "the cut-off worker to give the job up",
                 timeout=WAIT, context=diagnosis)
        gave_up = time.monotonic() - silenced
        log = cut_off.output()
        assert f"heartbeat failed: the store at postgresql://127.0.0.1:{pg.port}/" in log, log[-3000:]
        assert f"job {job_id}: lease 1 not renewed for" in log
        wait_for(lambda: observer.get(job_id).status is JobStatus.SUCCEEDED, "another worker to run the job",
                 timeout=WAIT, context=diagnosis)
        assert observer.get(job_id).lease_id == 2
        # The cut-off worker logs "being handed on", then interrupts its thread: on a loaded machine
        # the other worker may finish the job before that thread records the interrupt.
        wait_for(lambda: _lines(records / "interrupts.log"), "the cut-off attempt to record its interrupt",
                 timeout=WAIT, context=diagnosis)
        assert [line[:2] for line in _lines(records / "interrupts.log")] == [[job_id, "1"]]

        pg.heal()  # the cut-off worker's late success and its lease_unrenewed event reach the store

        def late_events() -> list[Any]:
            events = observer.events(job_id)
            kinds = {(e.event, e.lease_id) for e in events}
            return events if {("lease_unrenewed", 1), ("stale_commit_rejected", 1)} <= kinds else []

        events = wait_for(late_events, "the late commit refused and the interruption recorded", timeout=WAIT,
                          context=diagnosis)
        assert observer.get(job_id).status is JobStatus.SUCCEEDED and observer.get(job_id).lease_id == 2
        unrenewed = next(e for e in events if e.event == "lease_unrenewed")
        assert "handed on" in (unrenewed.reason or "")
        assert any(e.event.startswith("lease_expired") for e in events)
        assert [line[:2] for line in _lines(bodies)] == [[job_id, "1"], [job_id, "2"]]
        print(f"\nsilent store: the cut-off worker gave its job up {gave_up:.1f}s after the silence began "
              f"(lease ttl {LEASE_TTL:g}s, heartbeat {HEARTBEAT:g}s)")
    finally:
        pg.heal()
        cut_off.stop()
        if other is not None:
            other.stop()
        broker.close()
        producer.store.close()
        observer.close()
        pg.close()


def test_the_blackhole_holds_bytes_while_silent_and_forwards_them_after() -> None:
    """The proxy itself: silent means no answer and no reset; healed, the held bytes go through."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    echoed: list[bytes] = []

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1024):
                echoed.append(data)
                conn.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    proxy = Blackhole(port)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
            client.sendall(b"one")
            assert client.recv(16) == b"one"
            proxy.silence()
            client.sendall(b"two")
            client.settimeout(0.5)
            with pytest.raises(TimeoutError):
                client.recv(16)  # neither an answer nor a reset
            proxy.heal()
            client.settimeout(5)
            assert client.recv(16) == b"two"
    finally:
        proxy.close()
        server.close()
