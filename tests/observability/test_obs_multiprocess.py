"""Metrics across real worker processes (prometheus_client multiprocess mode), added up by the exporter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _obs_support import exporter, sample, scrape

from reliable.states import JobStatus
from reliable.store import StateStore

# One worker process: real store, real Metrics listener, real claims and completions.
WORKER = """
import os, sys
from prometheus_client import CollectorRegistry
from reliable.metrics import Metrics
from reliable.states import Event
from reliable.store import NewJob, StateStore

url, prefix, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
metrics = Metrics(CollectorRegistry())
store = StateStore(url, listeners=[metrics])
store.register_many([NewJob(f"{prefix}-{i}", "mp", "crunch", {}) for i in range(count)])
for i in range(count):
    claim = store.claim(f"{prefix}-{i}", worker_id=f"pid-{os.getpid()}", lease_ttl=60)
    store.save_checkpoint(f"{prefix}-{i}", claim.lease_id, i, lease_ttl=60)
    store.finish(f"{prefix}-{i}", claim.lease_id, Event.SUCCEED if i % 4 else Event.FAIL)
metrics.heartbeat(0.01, renewed=count, lost=0)
store.close()
"""

SETUP = "import sys; from reliable.metrics import setup_multiprocess; setup_multiprocess(sys.argv[1])"


def test_two_worker_processes_are_added_up_by_the_exporter(store_url: str, tmp_path: Path) -> None:
    directory = tmp_path / "prom"
    directory.mkdir()
    (directory / "counter_999999.db").write_bytes(b"stale from a previous run")
    (directory / "keep.txt").write_text("not ours")
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    subprocess.run([sys.executable, "-c", SETUP, str(directory)], env=env, check=True, timeout=60)
    assert sorted(p.name for p in directory.iterdir()) == ["keep.txt"]  # only prometheus files wiped

    env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, store_url, f"w{n}", str(count)], env=env)
               for n, count in ((1, 5), (2, 8))]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    assert len(list(directory.glob("counter_*.db"))) == 2  # one file per worker process

    store = StateStore(store_url)
    try:
        truth = store.count_by_status()
    finally:
        store.close()
    assert truth == {JobStatus.SUCCEEDED: 9, JobStatus.FAILED: 4}

    with exporter(store_url, "--state", "SUCCEEDED", "--state", "FAILED",
                  env={"PROMETHEUS_MULTIPROC_DIR": str(directory)}) as base:
        samples = scrape(base)
    labels = {"actor": "crunch", "queue": "mp"}
    assert sample(samples, "reliable_attempts_total", outcome="succeed", **labels) == truth[JobStatus.SUCCEEDED]
    assert sample(samples, "reliable_attempts_total", outcome="fail", **labels) == truth[JobStatus.FAILED]
    assert sample(samples, "reliable_jobs", state="SUCCEEDED", queue="mp") == truth[JobStatus.SUCCEEDED]
    assert sample(samples, "reliable_jobs", state="FAILED", queue="mp") == truth[JobStatus.FAILED]
    assert sample(samples, "reliable_transitions_total", event="claim", to_state="RUNNING", **labels) == 13
    assert sample(samples, "reliable_transitions_total", event="enqueued", to_state="PENDING", **labels) == 13
    assert sample(samples, "reliable_checkpoints_total", **labels) == 13
    assert sample(samples, "reliable_attempt_duration_seconds_count", outcome="succeed", **labels) == 9
    assert sample(samples, "reliable_attempt_duration_seconds_bucket", outcome="succeed", le="+Inf", **labels) == 9
    assert sample(samples, "reliable_dispatch_latency_seconds_count", **labels) == 13
    assert sample(samples, "reliable_lease_renewals_total") == 13
    assert sample(samples, "reliable_heartbeat_latency_seconds_count") == 2


# A worker process that boots a real Dramatiq Worker and stops before any message arrives.
BOOT_ONLY = """
import sys
import dramatiq
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker
from prometheus_client import CollectorRegistry
import reliable
from reliable.metrics import Metrics

broker = StubBroker()
broker.emit_after("process_boot")
dramatiq.set_broker(broker)
reliable.install(broker, store=sys.argv[1], recovery=False, metrics=Metrics(CollectorRegistry()))

@dramatiq.actor(queue_name="mail")
def send() -> None: ...

@dramatiq.actor(queue_name="mail", reliable=False)
def untracked() -> None: ...

worker = Worker(broker, worker_threads=1)
worker.start()
worker.stop()
"""


def test_counters_of_tracked_actors_exist_at_zero_from_worker_boot(sqlite_url: str, tmp_path: Path) -> None:
    """`increase(reliable_stale_commits_total[15m]) > 0` needs a 0 sample before the first event."""
    directory = tmp_path / "prom"
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    subprocess.run([sys.executable, "-c", SETUP, str(directory)], env=env, check=True, timeout=60)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    subprocess.run([sys.executable, "-c", BOOT_ONLY, sqlite_url], env=env, check=True, timeout=120)
    with exporter(sqlite_url, env={"PROMETHEUS_MULTIPROC_DIR": str(directory)}) as base:
        samples = scrape(base)
    labels = {"actor": "send", "queue": "mail"}
    for name in ("reliable_stale_commits_total", "reliable_duplicate_effects_total", "reliable_dead_letters_total",
                 "reliable_lease_expiries_total", "reliable_retry_budget_exhausted_total"):
        assert sample(samples, name, **labels) == 0, name
    for event, state in (("succeed", "SUCCEEDED"), ("fail", "FAILED"), ("dead_letter", "DEAD"),
                         ("need_review", "REVIEW")):
        assert sample(samples, "reliable_transitions_total", event=event, to_state=state, **labels) == 0, event
    assert sample(samples, "reliable_stale_commits_total", actor="untracked", queue="mail") is None
    assert sample(samples, "reliable_heartbeat_failures_total") == 0
