"""consumer_timeout alignment on a RabbitMQ node of the test's own whose consumer_timeout is 5 s."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable
from reliable.errors import BrokerConfigError
from reliable.rabbitmq import ReliableRabbitmqBroker
from reliable.states import JobStatus
from reliable.store import StateStore

from cluster_ledger import Ledger, producer, send
from rabbit_nodes import RabbitNode
from support import wait_for
from workers import WorkerProcess

pytestmark = pytest.mark.integration
TIMED_OUT = "delivery acknowledgement on channel"


def test_a_job_longer_than_the_consumer_timeout_completes_once(
        short_timeout_node: RabbitNode, start_app: Callable[..., WorkerProcess], ledger_store: str,
        cluster_queue: str) -> None:
    ledger = Ledger(ledger_store)
    try:
        with producer([short_timeout_node.url], ledger_store, consumer_timeout=5) as broker:
            job_id = send(broker, cluster_queue, "slow", 8.0)
        worker = start_app([short_timeout_node.url], threads=2, RELIABLE_TEST_CONSUMER_TIMEOUT="5")
        wait_for(lambda: ledger.unfinished() == 0 and ledger.runs(), "the slow job to finish", timeout=60,
                 context=worker.output)
        # The broker did take the delivery back mid-run, and the store fenced the redelivered copy.
        wait_for(lambda: "claim_refused" in ledger.events(job_id), "the redelivered copy to be refused",
                 timeout=20, context=worker.output)
        assert TIMED_OUT in worker.output()
        assert ledger.runs() == {job_id: 1}
        status = ledger.scalar("SELECT status FROM reliable_jobs WHERE job_id = :j", j=job_id)
        assert status == JobStatus.SUCCEEDED.value
        boot_warning = ("consumer_timeout: actor 'slow': time_limit 60s (waiting behind a prefetch of 4 on 2 threads, "
                        "up to 180s unacked) exceeds")
        assert boot_warning in worker.output()
    finally:
        ledger.close()


def test_a_delay_longer_than_the_consumer_timeout_is_reheld_and_runs_once_at_its_eta(
        short_timeout_node: RabbitNode, start_app: Callable[..., WorkerProcess], ledger_store: str,
        cluster_queue: str) -> None:
    ledger = Ledger(ledger_store)
    try:
        worker = start_app([short_timeout_node.url], threads=2, RELIABLE_TEST_CONSUMER_TIMEOUT="5")
        with producer([short_timeout_node.url], ledger_store, consumer_timeout=5) as broker:
            eta = time.time() + 10.0
            job_id = send(broker, cluster_queue, "record", delay=10_000)
        wait_for(lambda: ledger.runs(), "the delayed job to run", timeout=45, context=worker.output)
        wait_for(lambda: ledger.unfinished() == 0, "the job to be terminal", timeout=10, context=worker.output)
        ran_at = ledger.scalar("SELECT min(at) FROM ledger")
        assert ran_at >= eta - 0.05  # eta in ms on the producer's clock; same host
        assert ledger.runs() == {job_id: 1}
        output = worker.output()
        assert output.count(f"message {job_id} re-held") >= 2  # held at most 3 s each time
        assert TIMED_OUT not in output  # never held past the broker's timeout
    finally:
        ledger.close()


def _worker_of(broker: dramatiq.Broker) -> dramatiq.Worker:
    return dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)


def _sqlite_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    StateStore(url).upgrade()
    return url


def test_a_queue_declared_classic_stops_the_boot_with_a_clear_error(
        short_timeout_node: RabbitNode, cluster_queue: str, tmp_path: Path) -> None:
    classic = RabbitmqBroker(url=short_timeout_node.url)  # Dramatiq's own broker declares classic queues
    try:
        classic.declare_queue(cluster_queue, ensure=True)
    finally:
        classic.close()
    broker = ReliableRabbitmqBroker(url=[short_timeout_node.url], consumer_timeout=5)
    middleware = reliable.install(broker, store=_sqlite_store(tmp_path), recovery=False, metrics=False,
                                  json_logs=False)
    try:
        dramatiq.actor(lambda: None, actor_name="noop", queue_name=cluster_queue, broker=broker)
        started = time.monotonic()
        with pytest.raises(BrokerConfigError) as refused:
            _worker_of(broker).start()
        assert time.monotonic() - started < 10  # refused at once, not after a retry loop
        assert f"declare queue '{cluster_queue}'" in str(refused.value)
        assert "inequivalent arg 'x-queue-type'" in str(refused.value)
        assert "delete_queue" in str(refused.value)
        with pytest.raises(BrokerConfigError):  # a producer is told the same
            send(broker, cluster_queue, "noop")
    finally:
        broker.close()
        middleware.store.close()


@pytest.mark.parametrize("case", ["delivery_limit", "strict_timeouts"])
def test_a_policy_or_timing_that_does_not_fit_stops_the_boot(
        short_timeout_node: RabbitNode, cluster_queue: str, tmp_path: Path, case: str) -> None:
    options = {"delivery_limit": 5} if case == "delivery_limit" else {"strict_timeouts": True}
    broker = ReliableRabbitmqBroker(url=[short_timeout_node.url], consumer_timeout=5, **options)
    middleware = reliable.install(broker, store=_sqlite_store(tmp_path), recovery=False, metrics=False,
                                  json_logs=False)
    try:
        # The default policy allows 5 attempts; Dramatiq's default time limit is 10 min.
        dramatiq.actor(lambda: None, actor_name="noop", queue_name=cluster_queue, broker=broker)
        with pytest.raises(BrokerConfigError) as refused:
            _worker_of(broker).start()
        expected = ("may make 5 attempts, not below the broker's delivery_limit 5" if case == "delivery_limit"
                    else "time_limit 600s (waiting behind a prefetch of 2 on 1 threads, up to 1800s unacked) "
                                                          "exceeds the consumer_timeout 5s")
        assert expected in str(refused.value)
    finally:
        broker.close()
        middleware.store.close()
