"""Issue 42, item 1: an operator's quiet and stop reach a live `reliable worker` child and it acts on them.

Two children on one queue (heartbeat 0.5 s). A job holds one of them (W). Quiet W: its heartbeat picks
the command up, new jobs all run on the other child while W's running job goes on and finishes there.
Stop W: it leaves gracefully (marked exited "stopped"), the supervisor starts a fresh child in its slot
as an operator's stop (not a crash), and the restarts count lands on that slot only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reliable import process_commands
from reliable.operators import Operator
from reliable.states import JobStatus
from reliable.store.processes import get_process, list_processes
from reliable.store.worker_views import fleet

from support import wait_for
from workers import send

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UNITS_APP_DIR = Path(__file__).parent.parent / "integration" / "apps"
ME = Operator("oncall", "test-host", "test")


def test_quiet_and_stop_reach_a_live_worker(producer: Any, supervise: Any, worker_env: dict[str, str],
                                            queue_name: str, tmp_path: Path) -> None:
    broker, store = producer
    supervisor = supervise(worker_env, "--path", str(UNITS_APP_DIR), "-p", "2", "-t", "2", "-Q", queue_name,
                           app="units_app")
    supervisor.wait_ready(2, timeout=60)

    def children() -> dict[str, Any]:
        return {p.worker_id: p for p in list_processes(store, live_only=True)
                if p.supervisor_pid == supervisor.proc.pid}

    wait_for(lambda: len(children()) == 2, "both children on record", timeout=30, context=supervisor.output)
    assert sorted((p.slot, p.restarts) for p in children().values()) == [(0, 0), (1, 0)]

    release = tmp_path / "release"
    held = send(broker, queue_name, "hold", str(release), 120).message_id
    wait_for(lambda: store.get(held).status is JobStatus.RUNNING, "the held job to run", timeout=30,
             context=supervisor.output)
    target = store.get(held).worker_id
    threads = wait_for(lambda: [j.thread for v in fleet(store).live for j in v.held if j.job_id == held and j.thread],
                       "its thread reported by the heartbeat", timeout=10, context=supervisor.output)
    assert threads[0]  # a Dramatiq worker thread's name

    assert process_commands.command(store, target, "quiet", reason="drain before the host goes", identity=ME)
    wait_for(lambda: (get_process(store, target) or pytest.fail("gone")).command_seen_at, "quiet picked up",
             timeout=10, context=supervisor.output)
    quick = [send(broker, queue_name, "units", 1, 0.01).message_id for _ in range(6)]
    wait_for(lambda: all(store.get(j).status is JobStatus.SUCCEEDED for j in quick), "the new jobs to run",
             timeout=60, context=supervisor.output)
    assert {store.get(j).worker_id for j in quick} == set(children()) - {target}, "a quiet process took a job"
    assert store.get(held).status is JobStatus.RUNNING and store.get(held).worker_id == target
    release.touch()
    wait_for(lambda: store.get(held).status is JobStatus.SUCCEEDED, "the quiet process to finish its job",
             timeout=30, context=supervisor.output)

    slot = children()[target].slot
    assert process_commands.command(store, target, "stop", reason="retire this child", identity=ME)
    gone = wait_for(lambda: (p := get_process(store, target)) is not None and p.exited_at is not None and p,
                    "the stopped child to exit", timeout=30, context=supervisor.output)
    assert gone.exit_reason == "stopped" and gone.command == "stop"
    wait_for(lambda: len(children()) == 2, "a fresh child in its slot", timeout=60, context=supervisor.output)
    assert sorted((p.slot, p.restarts) for p in children().values()) == sorted([(slot, 1), (1 - slot, 0)])
    exits = [e for e in supervisor.events("child_exited") if e["kind"] == "operator_stop"]
    assert len(exits) == 1 and exits[0]["returncode"] == 74, supervisor.output()[-3000:]
    assert [e["reason"] for e in supervisor.events("child_started")].count("operator_stop") == 1
    assert not supervisor.events("child_restart_scheduled")  # no crash counted


def test_resume_lets_a_quiet_worker_take_messages_again(producer: Any, supervise: Any, worker_env: dict[str, str],
                                                        queue_name: str) -> None:
    """One child, the only consumer: quieted, its deliveries are put off (the job stays PENDING, the
    deferral recorded with the quiet as its reason); resumed, it runs that job and new ones itself."""
    broker, store = producer
    supervisor = supervise(worker_env, "--path", str(UNITS_APP_DIR), "-p", "1", "-t", "2", "-Q", queue_name,
                           app="units_app")
    supervisor.wait_ready(1, timeout=60)
    (target,) = wait_for(lambda: [p.worker_id for p in list_processes(store, live_only=True)
                                  if p.supervisor_pid == supervisor.proc.pid], "the child on record", timeout=30,
                         context=supervisor.output)
    first = send(broker, queue_name, "units", 1, 0.01).message_id
    wait_for(lambda: store.get(first).status is JobStatus.SUCCEEDED, "a job before the quiet", timeout=30,
             context=supervisor.output)

    assert process_commands.command(store, target, "quiet", reason="drain", identity=ME)
    wait_for(lambda: (get_process(store, target) or pytest.fail("gone")).command_seen_at, "quiet picked up",
             timeout=10, context=supervisor.output)
    held_back = send(broker, queue_name, "units", 1, 0.01).message_id
    wait_for(lambda: any(e.event == "queue_paused_deferred" and e.reason == "this worker process is quiet"
                         for e in store.events(held_back)), "the quiet process to put the delivery off",
             timeout=30, context=supervisor.output)
    assert store.get(held_back).status is JobStatus.PENDING and store.get(held_back).attempt == 0

    assert process_commands.command(store, target, "resume", reason="host kept", identity=ME)
    wait_for(lambda: store.get(held_back).status is JobStatus.SUCCEEDED, "the deferred job to run after the resume",
             timeout=60, context=supervisor.output)
    after = send(broker, queue_name, "units", 1, 0.01).message_id
    wait_for(lambda: store.get(after).status is JobStatus.SUCCEEDED, "a new job after the resume", timeout=30,
             context=supervisor.output)
    assert store.get(held_back).worker_id == target and store.get(after).worker_id == target
    assert (get_process(store, target) or pytest.fail("gone")).exited_at is None
