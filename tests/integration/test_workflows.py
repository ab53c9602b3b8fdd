"""Workflows with real `dramatiq` workers on RabbitMQ + PostgreSQL (issue 15's acceptance tests).

The app (apps/workflow_app.py) counts every attempt of every node in a table of the test's own
database, so "ran exactly once" and "never ran" are counted, not inferred from the store:

- a 20-node DAG where one node fails for good ends FAILED with exactly that node's descendants
  never run; `reliable workflow resume` (the CLI, a real subprocess) after the fix runs exactly that
  node and its descendants, every other node keeping its job and result; `--dry-run` changes nothing;
- a new input for one node recomputes exactly its subgraph (WorkflowEngine.resume with the new
  definition, then the CLI with `--definition workflow_app:changed`);
- SIGKILL of the worker while nodes run: a new worker finishes the workflow, no node is started
  twice, and each node's side effect is applied once (its operation key absorbs the killed
  attempt's replay, which the store reports as a duplicate where it had been recorded).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import dramatiq
import pytest
from sqlalchemy import create_engine, select, text

from reliable.control import Control
from reliable.operators import Operator
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import effects
from reliable.store.workflows import WorkflowStore
from reliable.workflows.engine import WorkflowEngine, find_middleware
from reliable.workflows.planning import node_states

from support import CLI, wait_for
from workers import APPS, WorkerProcess

pytestmark = pytest.mark.integration

#: The 20-node DAG of workflow_app.define, by layer.
NODES = ["src", "a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3", "c0", "c1", "c2", "c3", "d0", "d1", "e0", "e1",
         "side0", "side1", "side2"]
#: What depends on b1 (b1 waits for a1, a2): c1, then d0 (c0, c1), then e0.
B1_AND_DESCENDANTS = ["b1", "c1", "d0", "e0"]
#: What depends on a3: b2 (a2, a3) and b3 (a3, a0), c2, c3, d1 (c2, c3), e1.
A3_AND_DESCENDANTS = ["a3", "b2", "b3", "c2", "c3", "d1", "e1"]
SLOW_NODES = ["src", "p0", "p1", "p2", "p3", "p4", "p5", "join", "q0", "q1", "q2", "end"]

TABLES = """
CREATE TABLE wf_runs (id bigserial PRIMARY KEY, node text NOT NULL, job_id text NOT NULL, attempt int NOT NULL,
                      value text, pid int, replay boolean NOT NULL DEFAULT false);
CREATE TABLE wf_broken (node text PRIMARY KEY);
CREATE TABLE wf_applied (op_key text PRIMARY KEY, node text NOT NULL, job_id text NOT NULL, hits int NOT NULL);
"""


@pytest.fixture
def db(worker_env: dict[str, str]) -> Iterator[Any]:
    """The counting tables of workflow_app in the test's database (an engine on it)."""
    engine = create_engine(worker_env["RELIABLE_TEST_STORE"])
    drop = "DROP TABLE IF EXISTS wf_runs, wf_broken, wf_applied"
    with engine.begin() as conn:
        conn.execute(text(drop))
        for statement in filter(str.strip, TABLES.split(";")):
            conn.execute(text(statement))
    yield engine
    with engine.begin() as conn:
        conn.execute(text(drop))
    engine.dispose()


@pytest.fixture
def app(worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """workflow_app imported in the test process (its broker, reliable installed, is the producer:
    no worker runs here); the global broker is put back afterwards."""
    previous = dramatiq.get_broker()
    for key, value in worker_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(APPS))
    sys.modules.pop("workflow_app", None)
    module = importlib.import_module("workflow_app")
    try:
        yield module
    finally:
        sys.modules.pop("workflow_app", None)
        module.broker.close()
        find_middleware(module.broker).store.close()
        dramatiq.set_broker(previous)


def store_of(app: ModuleType) -> StateStore:
    store: StateStore = find_middleware(app.broker).store
    return store


def runs(db: Any) -> Counter[str]:
    """How many attempts each node made (rows the actor wrote as it started)."""
    with db.connect() as conn:
        return Counter(dict(conn.execute(text("SELECT node, count(*) FROM wf_runs GROUP BY node")).all()))


def nodes(store: StateStore, workflow_id: str) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in WorkflowStore(store).nodes(workflow_id)}


def status(store: StateStore, workflow_id: str) -> str:
    return str(WorkflowStore(store).get(workflow_id)["status"])


def finished(store: StateStore, workflow_id: str, expected: str, *, run: int = 1) -> bool:
    head = WorkflowStore(store).get(workflow_id)
    return bool(head["status"] == expected and head["run"] == run)


def cli(worker_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`reliable ARGS` as a real subprocess, with the app importable (for --definition)."""
    env = {**os.environ, **worker_env, "PYTHONPATH": str(APPS), "RELIABLE_OPERATOR": "it-operator"}
    return subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True, text=True, timeout=60)


def workflow_cli(worker_env: dict[str, str], command: str, workflow_id: str, *args: str) -> \
        subprocess.CompletedProcess[str]:
    return cli(worker_env, "workflow", command, workflow_id, "--store", worker_env["RELIABLE_TEST_STORE"],
               "--broker", worker_env["RELIABLE_TEST_BROKER"], *args)


def table(counts: Counter[str], order: list[str]) -> str:
    return " ".join(f"{name}={counts[name]}" for name in order)


@pytest.mark.slow
def test_a_failed_node_fails_exactly_its_descendants_and_a_cli_resume_reruns_exactly_them(
        app: ModuleType, db: Any, start_worker: Any, worker_env: dict[str, str]) -> None:
    store = store_of(app)
    with db.begin() as conn:
        conn.execute(text("INSERT INTO wf_broken (node) VALUES ('b1')"))
    worker = start_worker(app="workflow_app")
    started = time.monotonic()
    workflow_id = app.define().submit(app.broker)
    wait_for(lambda: finished(store, workflow_id, "FAILED"), "the workflow to end FAILED", timeout=30,
             context=worker.output)
    failed_in = time.monotonic() - started

    # Exactly b1's descendants never ran; every other node ran exactly once (b1 too: it failed).
    before = runs(db)
    assert before == Counter({name: 1 for name in NODES if name not in B1_AND_DESCENDANTS[1:]})
    states = node_states(WorkflowStore(store).snapshot(workflow_id))
    assert states == {name: ("FAILED" if name == "b1" else "UPSTREAM_FAILED" if name in B1_AND_DESCENDANTS
                             else "SUCCEEDED") for name in NODES}
    rows = nodes(store, workflow_id)
    assert rows["b1"]["last_error_class"] == "invalid_input" and rows["b1"]["attempt"] == 1  # not retried
    # Results reach children through the store, in each child's after= order (b3: a3's, then a0's).
    assert rows["d0"]["result"] is None and rows["e1"]["result"] == \
        '"e1[v1](d1[v1](c2[v1](b2[v1](a2[v1](src[v1]()),a3[v1](src[v1]()))),' \
        'c3[v1](b3[v1](a3[v1](src[v1]()),a0[v1](src[v1]())))))"'
    events_before = WorkflowStore(store).events(workflow_id)
    assert [e["event"] for e in events_before] == ["workflow_submitted", "workflow_failed"]
    assert events_before[-1]["detail"] == {"failed_nodes": ["b1"]}

    # --dry-run prints the plan and changes nothing.
    dry = workflow_cli(worker_env, "resume", workflow_id, "--reason", "b1 fixed", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would resume: keep 16 node(s), resume 0 job(s), run 4 node(s) again" in dry.stdout
    assert "  run again (4): b1, c1, d0, e0" in dry.stdout
    assert nodes(store, workflow_id) == rows
    assert WorkflowStore(store).events(workflow_id) == events_before
    assert WorkflowStore(store).get(workflow_id)["run"] == 1

    # The fix, then the operator's resume: exactly b1 and its descendants run (again, for b1).
    with db.begin() as conn:
        conn.execute(text("DELETE FROM wf_broken"))
    resumed_at = time.monotonic()
    done = workflow_cli(worker_env, "resume", workflow_id, "--reason", "b1 fixed", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "done" and result["plan"]["rerun"] == B1_AND_DESCENDANTS
    wait_for(lambda: finished(store, workflow_id, "SUCCEEDED", run=2), "the resumed workflow to succeed",
             timeout=30, context=worker.output)
    resumed_in = time.monotonic() - resumed_at
    after = runs(db)
    assert after - before == Counter(B1_AND_DESCENDANTS)
    assert after == Counter({name: 2 if name == "b1" else 1 for name in NODES})

    # Every other node kept its job and its result; the rerun nodes got new jobs.
    now = nodes(store, workflow_id)
    for name in NODES:
        if name in B1_AND_DESCENDANTS:
            assert now[name]["job_id"] != rows[name]["job_id"] and now[name]["run"] == 2
        else:
            assert (now[name]["job_id"], now[name]["result"], now[name]["run"]) == \
                (rows[name]["job_id"], rows[name]["result"], 1), name
    assert now["e0"]["result"] == '"e0[v1](d0[v1](c0[v1](b0[v1](a0[v1](src[v1]()),a1[v1](src[v1]()))),' \
        'c1[v1](b1[v1](a1[v1](src[v1]()),a2[v1](src[v1]())))))"'
    assert store.get(rows["b1"]["job_id"]).status is JobStatus.FAILED  # the failed attempt stays as history
    assert all(j.status is JobStatus.SUCCEEDED for j in store.list_jobs(workflow_id=workflow_id, limit=50)
               if j.job_id != rows["b1"]["job_id"])
    resume_event = [e for e in WorkflowStore(store).events(workflow_id) if e["event"] == "workflow_resume"]
    assert [(e["operator"], e["reason"]) for e in resume_event] == [("it-operator", "b1 fixed")]
    print(f"\n20-node DAG, b1 failing: FAILED in {failed_in:.2f}s; executions per node before resume: "
          f"{table(before, NODES)}; after resume: {table(after, NODES)}; resumed to SUCCEEDED in {resumed_in:.2f}s")


@pytest.mark.slow
def test_a_changed_input_recomputes_exactly_its_subgraph(
        app: ModuleType, db: Any, start_worker: Any, worker_env: dict[str, str]) -> None:
    store = store_of(app)
    worker = start_worker(app="workflow_app")
    workflow_id = app.define().submit(app.broker)
    wait_for(lambda: finished(store, workflow_id, "SUCCEEDED"), "the workflow to succeed", timeout=30,
             context=worker.output)
    first = runs(db)
    assert first == Counter(NODES)
    rows = nodes(store, workflow_id)

    # From the application: the definition with a new input for a3.
    engine = WorkflowEngine(store, app.broker, middleware=find_middleware(app.broker))
    control = Control(store, broker=app.broker, identity=Operator("it-test", "test-host", "option"))
    new_a3 = app.define({"a3": "v2"})
    plan = engine.resume(workflow_id, control, reason="a3 has a new input", dry_run=True, definition=new_a3)
    assert plan.outcome == "dry_run" and plan.plan is not None
    assert plan.plan.changed == ("a3",) and list(plan.plan.rerun) == A3_AND_DESCENDANTS
    assert nodes(store, workflow_id) == rows
    started = time.monotonic()
    result = engine.resume(workflow_id, control, reason="a3 has a new input", definition=new_a3)
    assert result.ok, result.message
    wait_for(lambda: finished(store, workflow_id, "SUCCEEDED", run=2), "the recomputed workflow to succeed",
             timeout=30, context=worker.output)
    recomputed_in = time.monotonic() - started
    second = runs(db)
    assert second - first == Counter(A3_AND_DESCENDANTS)
    now = nodes(store, workflow_id)
    for name in NODES:
        if name in A3_AND_DESCENDANTS:
            assert "a3[v2]" in now[name]["result"] and now[name]["job_id"] != rows[name]["job_id"], name
        else:
            assert (now[name]["job_id"], now[name]["result"]) == (rows[name]["job_id"], rows[name]["result"]), name
    with db.connect() as conn:
        assert conn.execute(text("SELECT value FROM wf_runs WHERE node = 'a3' ORDER BY id")).scalars().all() == \
            ["v1", "v2"]

    # From the CLI, as an operator would: --definition workflow_app:changed (a3 stays v2, side1 -> v2).
    dry = workflow_cli(worker_env, "resume", workflow_id, "--reason", "side1 too", "--dry-run",
                       "--definition", "workflow_app:changed")
    assert dry.returncode == 0, dry.stderr
    assert "  run again (2): side1, side2" in dry.stdout and "  changed (1): side1" in dry.stdout
    assert runs(db) == second
    done = workflow_cli(worker_env, "resume", workflow_id, "--reason", "side1 too", "--definition",
                        "workflow_app:changed")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: finished(store, workflow_id, "SUCCEEDED", run=3), "the second recomputation to succeed",
             timeout=30, context=worker.output)
    third = runs(db)
    assert third - second == Counter(["side1", "side2"])
    assert nodes(store, workflow_id)["side2"]["result"] == '"side2[v1](side1[v2](side0[v1](src[v1]())))"'
    print(f"\nchanged inputs: executions per node after submit: {table(first, NODES)}; after a3 -> v2 "
          f"(engine): {table(second, NODES)} (recomputed in {recomputed_in:.2f}s); after side1 -> v2 (CLI "
          f"--definition): {table(third, NODES)}")


def busy_sessions(store: StateStore) -> int:
    """Other sessions of this database running a statement or inside a transaction."""
    query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND state <> 'idle'")
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def running_nodes(store: StateStore, workflow_id: str) -> list[str]:
    by_job = {n["job_id"]: n["node"] for n in WorkflowStore(store).nodes(workflow_id)}
    return sorted(by_job[j.job_id] for j in store.list_jobs(workflow_id=workflow_id, status=[JobStatus.RUNNING])
                  if j.job_id in by_job)


def applied_nodes(db: Any) -> set[str]:
    with db.connect() as conn:
        return set(conn.execute(text("SELECT node FROM wf_applied")).scalars())


def recorded_nodes(store: StateStore, workflow_id: str) -> set[str]:
    """Nodes whose current job recorded its effect in the store (record_effect committed)."""
    by_job = {n["job_id"]: n["node"] for n in WorkflowStore(store).nodes(workflow_id)}
    with store.engine.connect() as conn:
        recorded = conn.execute(select(effects.c.job_id).where(effects.c.job_id.in_(list(by_job)))).scalars()
        return {by_job[job_id] for job_id in recorded}


def frozen_mid_fan_out(store: StateStore, db: Any, worker: WorkerProcess, workflow_id: str) -> bool:
    """Freeze `worker` (SIGSTOP); keep it frozen if, among the RUNNING fan-out nodes, one has applied
    and recorded its side effect and another has not applied it yet (the kill then interrupts both
    kinds), else let it go on."""
    worker.signal(signal.SIGSTOP)
    running = set(running_nodes(store, workflow_id))
    if running & recorded_nodes(store, workflow_id) and running - applied_nodes(db):
        return True
    worker.signal(signal.SIGCONT)
    return False


@pytest.mark.slow
def test_sigkill_mid_workflow_loses_nothing_and_applies_no_node_twice(
        app: ModuleType, db: Any, start_worker: Any) -> None:
    store = store_of(app)
    settings = {"RELIABLE_TEST_LEASE_TTL": 2, "RELIABLE_TEST_HEARTBEAT": 0.5, "RELIABLE_TEST_RECOVERY_INTERVAL": 0.5,
                "RELIABLE_TEST_SWEEP_AFTER": 1}
    doomed: WorkerProcess = start_worker(app="workflow_app", **settings)
    started = time.monotonic()
    workflow_id = app.define_slow(0.5).submit(app.broker)
    # Kill during the fan-out (p_i applies its effect after 0.1 + 0.2 i s, then works 0.5 s more),
    # frozen first so what is seen RUNNING is still running when SIGKILL lands.
    wait_for(lambda: frozen_mid_fan_out(store, db, doomed, workflow_id),
             "a fan-out node RUNNING with its effect recorded, another not applied", timeout=30, context=doomed.output)
    doomed.kill()
    killed_at = time.monotonic()
    # What the kill interrupted: read once the dead worker's database sessions are idle or gone (a
    # statement sent just before the freeze may still commit).
    wait_for(lambda: busy_sessions(store) == 0, "the killed worker's database sessions to end")
    interrupted = running_nodes(store, workflow_id)
    applied_at_kill = applied_nodes(db)
    assert set(interrupted) & applied_at_kill and set(interrupted) - applied_at_kill, (interrupted, applied_at_kill)

    survivor = start_worker(app="workflow_app", **settings)
    wait_for(lambda: finished(store, workflow_id, "SUCCEEDED"), "the workflow to succeed after the kill",
             timeout=45, context=survivor.output)
    recovered_in = time.monotonic() - killed_at
    total = time.monotonic() - started

    rows = nodes(store, workflow_id)
    assert set(node_states(WorkflowStore(store).snapshot(workflow_id)).values()) == {"SUCCEEDED"}
    # No node started twice: one job per node, each registered (enqueued) once.
    jobs = store.list_jobs(workflow_id=workflow_id, limit=100)
    assert sorted(j.job_id for j in jobs) == sorted(n["job_id"] for n in rows.values())
    assert all(j.status is JobStatus.SUCCEEDED for j in jobs)
    for job in jobs:
        assert [e.event for e in store.events(job.job_id)].count("enqueued") == 1, job.job_id
    # Each node's side effect applied once, under its job's operation key.
    with db.connect() as conn:
        applied = {r.node: r for r in conn.execute(text("SELECT node, job_id, op_key, hits FROM wf_applied"))}
        attempts = {r.node: (r.n, r.replays) for r in conn.execute(text(
            "SELECT node, count(*) AS n, count(*) FILTER (WHERE replay) AS replays FROM wf_runs GROUP BY node"))}
    with store.engine.connect() as conn:
        duplicates = {r.job_id: r.duplicates for r in conn.execute(select(effects.c.job_id, effects.c.duplicates))}
    assert sorted(applied) == sorted(SLOW_NODES)
    for name in SLOW_NODES:
        row = applied[name]
        assert row.job_id == rows[name]["job_id"] and row.op_key == f"{row.job_id}:apply", name
        assert duplicates[row.job_id] == attempts[name][1], name  # the store counted each replay the actor saw
        if name not in interrupted:
            assert attempts[name] == (1, 0) and row.hits == 1, name
    # The interrupted nodes ran a second attempt of the same job once their lease expired; the
    # killed attempt's effect was either never applied, or applied and then seen as a replay.
    outcome: dict[str, str] = {}
    for name in interrupted:
        assert attempts[name][0] == 2 and rows[name]["attempt"] == 2, name
        assert "lease_expired" in [e.event for e in store.events(rows[name]["job_id"])], name
        if name in applied_at_kill:
            assert applied[name].hits == 2, name
            outcome[name] = ("applied, replay detected" if attempts[name][1] == 1 else
                             "applied, killed before its record: the key absorbed the replay")
        else:
            assert applied[name].hits == 1 and attempts[name][1] == 0, name
            outcome[name] = "not applied before the kill"
    assert "applied, replay detected" in outcome.values()
    print(f"\nSIGKILL mid-workflow: {len(interrupted)} node(s) RUNNING at the kill: {outcome}; workflow "
          f"SUCCEEDED {recovered_in:.2f}s after the kill (lease TTL 2s), {total:.2f}s after submission; "
          f"attempts per node: {table(Counter({n: attempts[n][0] for n in SLOW_NODES}), SLOW_NODES)}")
