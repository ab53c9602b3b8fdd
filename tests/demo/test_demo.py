"""`reliable demo` end to end: the real command in a subprocess, its output, and the store it leaves behind."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reliable import StateStore
from reliable.demo.story import EXPECTED, differences
from reliable.states import JobStatus
from reliable.store import NewJob

from support import RABBITMQ_URL, free_port, port_open, require_service, scratch_database, wait_for

RELIABLE = Path(sys.executable).parent / "reliable"
AM_BINARY = "/usr/bin/prometheus-alertmanager"

#: What every run must print (regular expressions): at least one line per step of the story.
STEPS = {
    "jobs enqueued": re.escape("registered in the store (PENDING)"),
    "transient failure retried with backoff": re.escape("(transient: HTTPStatusError"),
    "retry succeeded": re.escape("sync_inventory: SUCCEEDED on attempt 2"),
    "429 honoured": re.escape("HTTP 429, Retry-After"),
    "invalid input fails fast": re.escape("FAILED at once"),
    "ambiguous payment in REVIEW": re.escape("-> REVIEW: the card may have been charged"),
    "export paused by an operator": re.escape("audited in the store: pause requested by demo"),
    "pause observed at a checkpoint": re.escape("observed the pause at its checkpoint -> PAUSED after page"),
    "export resumed from its checkpoint": r"export_report: claimed by worker-1 \(attempt 2, lease 2\): resumes at page",
    "crashed worker's lease expired": re.escape("rebuild_index: lease 1 of worker-2 expired"),
    "crashed job resumed": r"rebuild_index: claimed by worker-\d \(attempt 2, lease 2\): resumes at page \d",
    "job dead-lettered": re.escape("-> DEAD: 3 attempts used up"),
    "alert fired": re.escape("FIRING ReliableDeadLetterGrowth"),
    "runbook rendered": re.escape("runbook of ReliableDeadLetterGrowth, rendered in the sandbox"),
    "dead job requeued": re.escape("audited in the store: requeue by demo"),
    "requeued job succeeded": re.escape("send_webhook: SUCCEEDED on attempt 4"),
    "summary": re.escape("What happened (read back from the store)"),
    "story held": re.escape("Every job ended as the story says"),
}


def run_demo(workdir: Path, store_url: str, *extra: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `reliable demo`; it exits non-zero if its story overran the demo's own time budget."""
    return subprocess.run([str(RELIABLE), "demo", "--no-live", "--store", store_url, "--workdir", str(workdir),
                           *extra], capture_output=True, text=True, timeout=timeout)


def final_states(store_url: str) -> dict[str, tuple[JobStatus, int]]:
    store = StateStore(store_url)
    try:
        return {job.actor: (job.status, job.attempt) for job in store.list_jobs(limit=1000)}
    finally:
        store.close()


def check_story(result: subprocess.CompletedProcess[str], store_url: str) -> None:
    output = result.stdout
    assert result.returncode == 0, f"exit {result.returncode}\n{output[-6000:]}\n{result.stderr[-3000:]}"
    missing = [step for step, pattern in STEPS.items() if not re.search(pattern, output)]
    assert not missing, f"steps not shown: {missing}\n{output[-6000:]}"
    states = final_states(store_url)
    assert states == {e.actor: (e.final, e.attempts) for e in EXPECTED}
    for command in ("reliable jobs list --store", "reliable jobs events", "reliable review list --store",
                    "reliable dlq list --store"):
        assert f"{command}" in output
    assert f"--store {store_url}" in output


def test_default_demo_tells_the_whole_story_on_sqlite(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = run_demo(tmp_path / "work", store_url, timeout=150)
    check_story(result, store_url)
    output = result.stdout
    assert "simulated crash" in output and "for a real SIGKILL" in output, "the simulation must say so"
    assert "a stale record_effect with old lease 1 was refused" in output, "the hung worker's write is fenced"
    store = StateStore(store_url)
    try:
        jobs = {job.actor: job for job in store.list_jobs(limit=100)}
        export = [e for e in store.events(jobs["export_report"].job_id) if e.event in ("pause_requested", "resume")]
        assert [(e.event, e.operator) for e in export] == [("pause_requested", "demo"), ("resume", "demo")]
        assert all(e.reason for e in export)
        for actor in ("export_report", "rebuild_index"):
            effects = store.effects(jobs[actor].job_id)
            assert effects and not any(e.duplicates for e in effects), f"{actor}: a page was written twice"
    finally:
        store.close()


def test_story_differences_are_reported(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'wrong.db'}")
    store.upgrade()
    try:
        store.register(NewJob(job_id="j1", queue="demo_payments", actor="charge_card", message={}))
        problems = differences(store, {"charge_card": "j1"})
    finally:
        store.close()
    assert "charge_card (j1): ended PENDING, expected REVIEW" in problems
    assert "sync_inventory: no job in the store" in problems


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager (Debian's prometheus-alertmanager) on a free port; its URL."""
    require_service("Alertmanager (prometheus-alertmanager)", shutil.which(AM_BINARY) is not None)
    port = free_port()
    config = tmp_path / "am.yml"
    config.write_text("route: {receiver: nobody}\nreceivers: [{name: nobody}]\n")
    proc = subprocess.Popen([AM_BINARY, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url, proc), "alertmanager to start", timeout=20)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _ready(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"alertmanager exited with {proc.returncode}"
    try:
        return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_demo_delivers_its_alerts_to_alertmanager(tmp_path: Path, alertmanager: str) -> None:
    store_url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = run_demo(tmp_path / "work", store_url, "--speed", "3", "--alertmanager", alertmanager, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"Alertmanager {alertmanager}: sent 2" in result.stdout
    alerts = httpx.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
    dead = [a for a in alerts if a["labels"]["alertname"] == "ReliableDeadLetterGrowth"]
    assert dead and dead[0]["labels"]["actor"] == "send_webhook"
    assert dead[0]["annotations"]["runbook_url"].startswith(
        "http://127.0.0.1:9464/runbooks/reliabledeadlettergrowth?queue=")
    assert dead[0]["annotations"]["runbook_url"].endswith("&actor=send_webhook")
    assert "runbook" not in dead[0]["annotations"]  # the rendered runbook is shown by the demo, not sent


@pytest.fixture
def fresh_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (the demo migrates it); dropped afterwards."""
    with scratch_database("reliable_demo_") as url:
        yield url


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_real_demo_on_rabbitmq_and_postgresql_kills_a_worker(tmp_path: Path, fresh_pg_database: str) -> None:
    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    result = run_demo(tmp_path / "work", fresh_pg_database, "--broker", RABBITMQ_URL, timeout=120)
    check_story(result, fresh_pg_database)
    output = result.stdout
    assert "kill -9 worker-2 (process group" in output
    assert "rebuild_index: claimed by worker-3 (attempt 2" in output, "the replacement worker resumed the job"
