"""`reliable exporter` as a real subprocess against a real store: /metrics matches the store, /healthz."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from _obs_support import exporter, families, sample, scrape
from prometheus_client import CollectorRegistry

from reliable.collector import StoreCollector
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore

from support import CLI, RABBITMQ_URL, free_port, port_open, require_service


def populate(store: StateStore, queue: str = "exports") -> None:
    """Known counts: exports: 3 PENDING, 2 RUNNING, 1 DEAD, 1 REVIEW, 2 SUCCEEDED; reports: 1 PAUSED."""
    store.register_many([NewJob(f"{queue}-{i}", queue, "export", {}) for i in range(9)])
    for i in range(3, 9):
        claim = store.claim(f"{queue}-{i}", worker_id="w", lease_ttl=600)
        if i == 5:
            store.finish(f"{queue}-{i}", claim.lease_id, Event.DEAD_LETTER)
        elif i == 6:
            store.finish(f"{queue}-{i}", claim.lease_id, Event.NEED_REVIEW)
        elif i >= 7:
            store.finish(f"{queue}-{i}", claim.lease_id, Event.SUCCEED)
    store.register(NewJob("reports-0", "reports", "report", {}))
    store.transition("reports-0", Event.PAUSE, operator="alice")


def test_exporter_serves_store_gauges_matching_the_store(store_url: str) -> None:
    store = StateStore(store_url)
    try:
        populate(store)
        oldest_due = min(j.scheduled_at or 0 for j in store.list_jobs(status=["PENDING"]))
        truth = store.count_by_status()
    finally:
        store.close()
    every_state = [arg for s in JobStatus for arg in ("--state", s.value)]
    with exporter(store_url, "--sla", "RUNNING=0.001", *every_state) as base:
        health = httpx.get(f"{base}/healthz", timeout=10)
        samples = scrape(base)
        assert httpx.get(f"{base}/nope", timeout=10).status_code == 404
    assert health.status_code == 200 and health.text == "ok\n"
    assert {"reliable_jobs", "reliable_dead_letter_jobs", "reliable_review_jobs", "reliable_jobs_stuck",
            "reliable_oldest_pending_timestamp_seconds", "reliable_collector_errors_total",
            "reliable_collector_scrape_seconds"} <= families(samples)
    expected = {("PENDING", "exports"): 3, ("RUNNING", "exports"): 2, ("DEAD", "exports"): 1,
                ("REVIEW", "exports"): 1, ("SUCCEEDED", "exports"): 2, ("PAUSED", "reports"): 1}
    exported = {(dict(labels)["state"], dict(labels)["queue"]): v
                for (name, labels), v in samples.items() if name == "reliable_jobs"}
    # every state of every known queue, 0 when empty
    assert exported == {(s.value, q): expected.get((s.value, q), 0) for s in JobStatus for q in ("exports", "reports")}
    assert sum(truth.values()) == sum(exported.values())
    assert sample(samples, "reliable_dead_letter_jobs", queue="exports") == 1
    assert sample(samples, "reliable_review_jobs", queue="exports") == 1
    assert sample(samples, "reliable_dead_letter_jobs", queue="reports") == 0
    assert sample(samples, "reliable_oldest_pending_timestamp_seconds", queue="exports") == pytest.approx(oldest_due)
    assert sample(samples, "reliable_oldest_pending_timestamp_seconds", queue="reports") is None
    assert sample(samples, "reliable_jobs_stuck", state="RUNNING", queue="exports") == 2
    assert sample(samples, "reliable_jobs_stuck", state="PAUSED", queue="reports") == 0
    assert sample(samples, "reliable_collector_errors_total", source="store") == 0
    assert (sample(samples, "reliable_collector_scrape_seconds") or -1) >= 0


def test_default_states_leave_out_final_outcomes(store_url: str) -> None:
    store = StateStore(store_url)
    try:
        populate(store)
        registry = CollectorRegistry()
        registry.register(StoreCollector(store))
        states = {m.labels["state"] for f in registry.collect() if f.name == "reliable_jobs" for m in f.samples}
        stuck = {(m.labels["state"], m.labels["queue"]): m.value for f in registry.collect()
                 if f.name == "reliable_jobs_stuck" for m in f.samples}
    finally:
        store.close()
    assert states == {s.value for s in JobStatus} - {"SUCCEEDED", "FAILED", "CANCELLED"}  # empty ones at 0
    # default SLAs: nothing stuck yet, and every SLA state of every known queue says so
    assert stuck == {(s, q): 0 for s in ("RUNNING", "STOPPING", "PAUSED") for q in ("exports", "reports")}


def test_a_fresh_exporter_reports_zeros_not_absence(store_url: str) -> None:
    """After a restart the gauges of empty states read 0 for every queue the store knows, and for
    the queues named with --queue (a queue whose jobs all finished is no longer in the counted states)."""
    store = StateStore(store_url)
    try:
        store.register(NewJob("p-1", "exports", "export", {}))
    finally:
        store.close()
    with exporter(store_url, "--queue", "mail") as base:
        samples = scrape(base)
    for queue in ("exports", "mail"):
        assert sample(samples, "reliable_dead_letter_jobs", queue=queue) == 0
        assert sample(samples, "reliable_review_jobs", queue=queue) == 0
        assert sample(samples, "reliable_jobs", state="RUNNING", queue=queue) == 0
        assert sample(samples, "reliable_jobs_stuck", state="RUNNING", queue=queue) == 0
    assert sample(samples, "reliable_jobs", state="PENDING", queue="exports") == 1
    assert sample(samples, "reliable_jobs", state="SUCCEEDED", queue="exports") is None  # not a counted state
    assert sample(samples, "reliable_oldest_pending_timestamp_seconds", queue="mail") is None  # no neutral value


def test_sla_rejects_states_without_a_threshold(sqlite_url: str) -> None:
    store = StateStore(sqlite_url)
    with pytest.raises(ValueError, match="PENDING"):
        StoreCollector(store, sla={"PENDING": 10})
    with pytest.raises(ValueError, match="positive"):
        StoreCollector(store, sla={"running": 0})
    store.close()


def test_unreachable_store_gives_503_and_metrics_still_answer() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/nothing_here"
    with exporter(url) as base:
        health = httpx.get(f"{base}/healthz", timeout=20)
        samples = scrape(base)
    assert health.status_code == 503 and health.text.startswith("unhealthy: ")
    assert (sample(samples, "reliable_collector_errors_total", source="store") or 0) >= 1
    assert "reliable_jobs" not in families(samples)


def test_unmigrated_store_is_unhealthy(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()  # an empty SQLite database: no schema
    with exporter(f"sqlite:///{tmp_path}/empty.db") as base:
        health = httpx.get(f"{base}/healthz", timeout=20)
    assert health.status_code == 503 and "reliable db upgrade" in health.text


def test_a_missing_sqlite_file_is_refused_at_start_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    proc = subprocess.run([sys.executable, "-c", CLI, "exporter", "--port", "0", "--store", f"sqlite:///{missing}"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and f"the SQLite file {missing} does not exist" in proc.stderr
    assert not missing.exists()


@pytest.mark.integration
def test_rabbitmq_queue_depths(sqlite_url: str) -> None:
    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    import pika

    queue = f"reliable-obs-{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    channel.queue_declare(queue=queue, durable=False, auto_delete=False)
    channel.queue_declare(queue=f"{queue}.XQ", durable=False, auto_delete=False)
    for i in range(3):
        channel.basic_publish(exchange="", routing_key=queue, body=str(i).encode())
    channel.basic_publish(exchange="", routing_key=f"{queue}.XQ", body=b"dead")
    store = StateStore(sqlite_url)
    try:
        store.register(NewJob("j", queue, "export", {}))
        # The documented cluster form, a dead node first: the nodes are tried in turn.
        cluster = f"amqp://guest:guest@127.0.0.1:{free_port()}/;{RABBITMQ_URL}"
        with exporter(sqlite_url, "--broker", cluster) as base:
            samples = scrape(base)
        down = CollectorRegistry()
        down.register(StoreCollector(store, broker_url="amqp://guest:guest@127.0.0.1:1/"))
        offline = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in down.collect() for s in f.samples}
    finally:
        store.close()
        channel.queue_delete(queue=queue)
        channel.queue_delete(queue=f"{queue}.XQ")
        connection.close()
    assert sample(samples, "reliable_rabbitmq_queue_messages", queue=queue) == 3
    assert sample(samples, "reliable_rabbitmq_queue_messages", queue=f"{queue}.XQ") == 1
    assert sample(samples, "reliable_rabbitmq_queue_messages", queue=f"{queue}.DQ") is None  # absent: ignored
    assert sample(samples, "reliable_collector_errors_total", source="rabbitmq") == 0
    # Broker down: an error is counted and the store gauges are still served.
    assert offline[("reliable_collector_errors", (("source", "rabbitmq"),))] == 1
    assert offline[("reliable_jobs", (("queue", queue), ("state", "PENDING")))] == 1
