"""`reliable worker` with real processes, the shared RabbitMQ and a PostgreSQL store.

kill -9 of one child mid-run (replaced, the others untouched, every job done), recycling after N
jobs and over M MB, TERM (graceful, nothing lost), a second TERM (at once; the lease recovers the
jobs), HUP (one child at a time). Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reliable.states import JobStatus
from reliable.store import StateStore

from supervised import Supervised
from support import free_port, scrape, wait_for
from workers import ready, send

pytestmark = pytest.mark.integration

Supervise = Callable[..., Supervised]


def jobs_of(store: StateStore, messages: list[Any]) -> list[Any]:
    return [store.get(m.message_id) for m in messages]


def all_succeeded(store: StateStore, messages: list[Any]) -> bool:
    return all(job.status is JobStatus.SUCCEEDED for job in jobs_of(store, messages))


def claimed_by(store: StateStore, messages: list[Any], pid: int, *states: JobStatus) -> list[Any]:
    """The jobs whose last claim was made by process `pid` (worker ids are host:pid:random), in `states`."""
    return [job for job in jobs_of(store, messages)
            if f":{pid}:" in (job.worker_id or "") and (not states or job.status in states)]


def metric(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def textfile(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_9_of_a_child_restarts_only_it_and_every_job_completes(
        producer: Any, worker_env: dict[str, str], queue_name: str, supervise: Supervise) -> None:
    broker, store = producer
    messages = [send(broker, queue_name, "work", 0.4) for _ in range(40)]
    port = free_port()
    sup = supervise(worker_env, "-p", "2", "-t", "2", "-Q", queue_name, "--metrics-port", str(port),
                    "--metrics-host", "127.0.0.1")
    pids = sup.wait_ready(2)
    victim, other = pids[0], pids[1]

    def just_started_on_victim() -> list[str]:
        # A job claimed less than 0.2 s ago still has 0.2 s to run: the kill lands before its finish
        # is sent (a finish already sent could still commit after a SIGKILL).
        return [job.job_id for job in claimed_by(store, messages, victim, JobStatus.RUNNING)
                if time.time() - (job.started_at or 0) < 0.2]

    interrupted = wait_for(just_started_on_victim, "child 0 starting a job", context=sup.output)
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()

    replacement = wait_for(lambda: sup.ready_pids().get(0) not in (None, victim) and sup.ready_pids()[0],
                           "child 0 replaced and ready", timeout=20, context=sup.output)
    ready_in = time.monotonic() - killed_at
    wait_for(lambda: claimed_by(store, messages, replacement), "the replacement claiming a job", timeout=20,
             context=sup.output)
    consuming_in = time.monotonic() - killed_at
    wait_for(lambda: all_succeeded(store, messages), "every job SUCCEEDED", timeout=60, context=sup.output)
    done_in = time.monotonic() - killed_at

    # Only the killed child was replaced; the other one kept its PID all along.
    started = sup.events("child_started")
    assert [(e["child"], e["reason"]) for e in started] == [(0, "boot"), (1, "boot"), (0, "crash")]
    assert sup.ready_pids()[1] == other and alive(other)
    [exited] = sup.events("child_exited")
    assert (exited["pid"], exited["kind"], exited["cause"]) == (victim, "crash", "killed by SIGKILL")
    # The killed child's jobs were recovered from their lease and ran again.
    for job_id in interrupted:
        job = store.get(job_id)
        assert job.status is JobStatus.SUCCEEDED and job.attempt >= 2
        assert {"lease_expired", "claim_refused"} & {e.event for e in store.events(job_id)}
    samples = scrape(f"http://127.0.0.1:{port}")
    assert metric(samples, "reliable_worker_restarts_total", reason="crash") == 1
    assert metric(samples, "reliable_worker_restarts_total", reason="recycle_jobs") == 0
    assert metric(samples, "reliable_worker_children_up") == 2
    assert metric(samples, "reliable_worker_child_last_exit_code", child="0") == -9
    print(f"\nsupervisor kill -9: 1 crash, 1 restart; replacement ready {ready_in:.2f}s and claiming "
          f"{consuming_in:.2f}s after the kill; {len(interrupted)} interrupted job(s) recovered; all "
          f"{len(messages)} jobs SUCCEEDED {done_in:.1f}s after the kill")


def test_a_child_is_recycled_after_max_jobs_and_no_job_runs_twice(
        producer: Any, worker_env: dict[str, str], queue_name: str, supervise: Supervise, tmp_path: Path) -> None:
    broker, store = producer
    messages = [send(broker, queue_name, "work", 0.02) for _ in range(10)]
    metrics_file, multiproc = tmp_path / "worker.prom", tmp_path / "multiproc"
    multiproc.mkdir()
    sup = supervise({**worker_env, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}, "-p", "1", "-t", "1", "-Q", queue_name,
                    "--max-jobs", "4", "--metrics-file", str(metrics_file))
    wait_for(lambda: all_succeeded(store, messages), "every job SUCCEEDED", timeout=60, context=sup.output)
    recycled = wait_for(lambda: len(sup.events("child_exited")) >= 2 and sup.events("child_exited"),
                        "two recycles", context=sup.output)
    assert all((e["returncode"], e["kind"]) == (75, "recycle_jobs") for e in recycled)
    # A recycle is graceful: the job in flight finished, prefetched messages went back unclaimed.
    assert [job.attempt for job in jobs_of(store, messages)] == [1] * len(messages)
    workers = [job.worker_id for job in jobs_of(store, messages)]
    assert len(set(workers)) >= 3, workers
    wait_for(lambda: textfile(metrics_file).get(("reliable_worker_restarts_total", (("reason", "recycle_jobs"),)),
                                                  0) >= 2, "the textfile counting the recycles", context=sup.output)
    assert metric(textfile(metrics_file), "reliable_worker_restarts_total", reason="crash") == 0
    # Workers' metrics in multiprocess mode: a recycled child's live gauge (reliable_leases_held) stops counting.
    live = wait_for(lambda: sup.ready_pids()[0] not in [e["pid"] for e in recycled] and sup.ready_pids()[0],
                    "the latest child ready")
    wait_for(lambda: (multiproc / f"gauge_livesum_{live}.db").exists(), "the live child's gauge file")
    assert not [e["pid"] for e in recycled if (multiproc / f"gauge_livesum_{e['pid']}.db").exists()]


def test_a_child_over_max_memory_is_recycled_after_its_job(
        producer: Any, worker_env: dict[str, str], queue_name: str, supervise: Supervise) -> None:
    broker, store = producer
    sup = supervise(worker_env, "-p", "1", "-t", "1", "-Q", queue_name, "--max-memory", "250")
    [first] = sup.wait_ready(1).values()
    grow = send(broker, queue_name, "grow", 300)
    exited = wait_for(lambda: sup.events("child_exited"), "the child recycled", timeout=30, context=sup.output)
    assert [(e["pid"], e["returncode"], e["kind"]) for e in exited] == [(first, 76, "recycle_memory")]
    job = store.get(grow.message_id)
    assert job.status is JobStatus.SUCCEEDED and job.attempt == 1
    wait_for(lambda: sup.ready_pids()[0] != first, "a replacement ready", timeout=20, context=sup.output)
    after = send(broker, queue_name, "work", 0.0)
    wait_for(lambda: store.get(after.message_id).status is JobStatus.SUCCEEDED, "the replacement working",
             timeout=20, context=sup.output)
    assert [e["reason"] for e in sup.events("child_started")] == ["boot", "recycle_memory"]


def test_term_stops_gracefully_and_loses_nothing(
        producer: Any, worker_env: dict[str, str], queue_name: str, supervise: Supervise, rabbitmq_url: str) -> None:
    broker, store = producer
    messages = [send(broker, queue_name, "work", 1.5) for _ in range(8)]
    sup = supervise(worker_env, "-p", "2", "-t", "2", "-Q", queue_name)
    pids = sup.wait_ready(2)
    wait_for(lambda: store.count_by_status().get(JobStatus.RUNNING, 0) == 4, "4 jobs running", context=sup.output)
    running = [j.job_id for j in jobs_of(store, messages) if j.status is JobStatus.RUNNING]
    sup.signal(signal.SIGTERM)
    assert sup.wait(30) == 0
    assert not any(alive(pid) for pid in pids.values())
    jobs = {j.job_id: j for j in jobs_of(store, messages)}
    # The running jobs finished (one attempt each); the others are PENDING, their messages back in the queue.
    assert {jobs[j].status for j in running} == {JobStatus.SUCCEEDED}
    assert all(jobs[j].attempt == 1 for j in running)
    waiting = [j for j in jobs.values() if j.job_id not in running]
    assert {j.status for j in waiting} == {JobStatus.PENDING} and all(j.attempt == 0 for j in waiting)
    wait_for(lambda: ready(rabbitmq_url, queue_name) == len(waiting), "the waiting messages back in the queue")
    assert [e["kind"] for e in sup.events("child_exited")] == ["stopped", "stopped"]
    # Quiet boots: no RuntimeWarning from the child's entry point, one timeouts line per child and no
    # consumer_timeout warning for the actors' 600 s time limit (issue 29).
    output = sup.output()
    assert "RuntimeWarning" not in output
    assert output.count("timeouts: RabbitMQ consumer_timeout") == 2 and "consumer_timeout: actor" not in output


def test_a_second_term_stops_at_once_and_the_lease_recovers_the_jobs(
        producer: Any, worker_env: dict[str, str], queue_name: str, supervise: Supervise) -> None:
    broker, store = producer
    messages = [send(broker, queue_name, "work", 3.0) for _ in range(2)]
    sup = supervise(worker_env, "-p", "1", "-t", "2", "-Q", queue_name)
    wait_for(lambda: store.count_by_status().get(JobStatus.RUNNING, 0) == 2, "2 jobs running", context=sup.output)
    sup.signal(signal.SIGTERM)
    wait_for(lambda: sup.events("stop_requested"), "the first TERM handled", context=sup.output)
    sup.signal(signal.SIGTERM)
    assert sup.wait(15) == 1
    assert [e["returncode"] for e in sup.events("child_exited")] == [1]
    assert {j.status for j in jobs_of(store, messages)} == {JobStatus.RUNNING}
    again = supervise(worker_env, "-p", "1", "-t", "2", "-Q", queue_name)
    wait_for(lambda: all_succeeded(store, messages), "the interrupted jobs SUCCEEDED", timeout=60,
             context=again.output)
    assert all(job.attempt == 2 for job in jobs_of(store, messages))


def test_hup_restarts_the_children_one_at_a_time_and_a_killed_supervisor_leaves_no_orphan(
        worker_env: dict[str, str], queue_name: str, supervise: Supervise) -> None:
    port = free_port()
    sup = supervise(worker_env, "-p", "2", "-t", "1", "-Q", queue_name, "--metrics-port", str(port),
                    "--metrics-host", "127.0.0.1")
    before = sup.wait_ready(2)
    sup.signal(signal.SIGHUP)
    wait_for(lambda: all(sup.ready_pids()[slot] != pid for slot, pid in before.items()), "both children replaced",
             timeout=30, context=sup.output)
    events = sup.events()
    after_hup = events[[e["event"] for e in events].index("reload_requested"):]
    order = [(e["event"], e["child"]) for e in after_hup if e["event"] in ("child_exited", "child_ready")]
    assert order == [("child_exited", 0), ("child_ready", 0), ("child_exited", 1), ("child_ready", 1)]
    assert [e["kind"] for e in sup.events("child_exited")] == ["stopped", "stopped"]
    assert metric(scrape(f"http://127.0.0.1:{port}"), "reliable_worker_restarts_total", reason="reload") == 2

    children = sup.ready_pids()
    sup.proc.kill()  # the supervisor only: Linux TERMs each child (PR_SET_PDEATHSIG), which stops gracefully
    sup.proc.wait(10)
    wait_for(lambda: not any(alive(pid) for pid in children.values()), "the orphaned children gone", timeout=30,
             context=sup.output)

