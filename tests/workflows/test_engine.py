"""Workflows end to end on Dramatiq's StubBroker with a real worker, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from typing import Any

import dramatiq
import pytest

import reliable
from reliable.control import Control
from reliable.operators import Operator, OperatorsPolicy
from reliable.recovery import Recovery
from reliable.states import JobStatus
from reliable.store.workflows import WorkflowStore
from reliable.worker import after_commit
from reliable.workflows.engine import RESULT_LIMIT, WorkflowEngine
from reliable.workflows.planning import node_states

Harness = Any


def control(h: Harness, name: str = "alice") -> Control:
    return Control(h.store, broker=h.broker, identity=Operator(name, "test-host", "option"))


def engine(h: Harness) -> WorkflowEngine:
    return WorkflowEngine(h.store, h.broker, middleware=h.middleware)


def status(h: Harness, workflow_id: str) -> str:
    return str(WorkflowStore(h.store).get(workflow_id)["status"])


def states(h: Harness, workflow_id: str) -> dict[str, str]:
    return node_states(WorkflowStore(h.store).snapshot(workflow_id))


class Recorder:
    """Actors for the tests: `step(name, *parents)` returns f"{name}(...)"; nodes listed in `failing`
    raise ValueError (a non-retryable error in the test policy)."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.failing: set[str] = set()
        self.lock = threading.Lock()

        @dramatiq.actor(queue_name="default")
        def step(name: str, *parents: Any) -> str:
            with self.lock:
                self.ran[name] += 1
            if name in self.failing:
                raise ValueError(f"{name} is broken")
            return f"{name}({','.join(map(str, parents))})"

        self.step = step


def diamond(r: Recorder, *, on_upstream_failure: str = "fail") -> reliable.Workflow:
    return reliable.workflow("diamond", [
        reliable.node("a", r.step.message("a")),
        reliable.node("b", r.step.message("b"), after=["a"], pass_results=True),
        reliable.node("c", r.step.message("c"), after=["a"], pass_results=True),
        reliable.node("d", r.step.message("d"), after=["b", "c"], pass_results=True,
                      on_upstream_failure=on_upstream_failure),
        reliable.node("e", r.step.message("e"), after=["d"], on_upstream_failure=on_upstream_failure),
    ])


def test_a_diamond_runs_each_node_once_and_passes_results(harness: Harness) -> None:
    r = Recorder()
    workflow_id = diamond(r).submit(harness.broker)
    rows = WorkflowStore(harness.store)
    # Persisted at submission: every node with its digest, the edges, and only the root's job.
    nodes = rows.nodes(workflow_id)
    assert [n["node"] for n in nodes] == ["a", "b", "c", "d", "e"]
    assert all(len(n["digest"]) == 64 for n in nodes)
    assert sorted(rows.edges(workflow_id)) == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")]
    assert [n["job_status"] for n in nodes] == ["PENDING", None, None, None, None]
    assert [bool(n["job_id"]) for n in nodes] == [True, False, False, False, False]  # chosen when started
    harness.run()
    assert status(harness, workflow_id) == "SUCCEEDED"
    assert r.ran == Counter("abcde")
    results = {n["node"]: n["result"] for n in rows.nodes(workflow_id)}
    assert results["d"] == '"d(b(a()),c(a()))"'  # parents' results appended in declaration order
    jobs = harness.store.list_jobs(workflow_id=workflow_id)
    assert len(jobs) == 5 and all(job.status is JobStatus.SUCCEEDED for job in jobs)
    events = [e["event"] for e in rows.events(workflow_id)]
    assert events == ["workflow_submitted", "workflow_succeeded"]
    assert rows.get(workflow_id)["finished_at"] is not None


def test_a_permanent_failure_fails_its_descendants_and_the_workflow_then_resume_reruns_only_them(
        harness: Harness) -> None:
    r = Recorder()
    r.failing = {"c"}
    workflow_id = diamond(r).submit(harness.broker)
    harness.run()
    assert status(harness, workflow_id) == "FAILED"
    assert states(harness, workflow_id) == {"a": "SUCCEEDED", "b": "SUCCEEDED", "c": "FAILED",
                                            "d": "UPSTREAM_FAILED", "e": "UPSTREAM_FAILED"}
    assert r.ran == Counter({"a": 1, "b": 1, "c": 1})
    failed_job = WorkflowStore(harness.store).snapshot(workflow_id).node("c").job_id

    dry = engine(harness).resume(workflow_id, control(harness), reason="fixed c", dry_run=True)
    assert dry.outcome == "dry_run" and dry.plan is not None
    assert dry.plan.keep == ("a", "b") and dry.plan.rerun == ("c", "d", "e")
    assert status(harness, workflow_id) == "FAILED"  # a dry run changes nothing

    r.failing.clear()
    result = engine(harness).resume(workflow_id, control(harness), reason="fixed c")
    assert result.ok, result.message
    harness.join()
    assert status(harness, workflow_id) == "SUCCEEDED"
    assert r.ran == Counter({"a": 1, "b": 1, "c": 2, "d": 1, "e": 1})  # exactly c and its descendants again
    snapshot = WorkflowStore(harness.store).snapshot(workflow_id)
    assert snapshot.node("c").job_id != failed_job and snapshot.run == 2
    assert harness.store.get(failed_job).status is JobStatus.FAILED  # the failed attempt stays as history
    resumed = [e for e in WorkflowStore(harness.store).events(workflow_id) if e["event"] == "workflow_resume"]
    assert resumed[0]["operator"] == "alice" and resumed[0]["reason"] == "fixed c"
    assert resumed[0]["detail"]["rerun"] == ["c", "d", "e"]


def test_skip_by_declaration_and_a_fan_in_after_a_failure_sees_it(harness: Harness) -> None:
    r = Recorder()
    r.failing = {"b"}
    seen: dict[str, Any] = {}

    @dramatiq.actor(queue_name="default")
    def report() -> str:
        job = reliable.current_job()
        seen["states"] = job.parent_states()
        seen["results"] = job.parent_results()
        return "reported"

    workflow_id = reliable.workflow("fan-in", [
        reliable.node("a", r.step.message("a")),
        reliable.node("b", r.step.message("b")),
        reliable.node("c", r.step.message("c"), after=["b"], on_upstream_failure="skip"),
        reliable.node("d", r.step.message("d"), after=["b"]),
        reliable.node("report", report, after=["a", "b", "c", "d"], trigger="all_done"),
    ]).submit(harness.broker)
    harness.run()
    assert states(harness, workflow_id) == {"a": "SUCCEEDED", "b": "FAILED", "c": "SKIPPED", "d": "UPSTREAM_FAILED",
                                            "report": "SUCCEEDED"}
    # Every parent's state, those that never ran included (as `reliable workflow show` derives them).
    assert seen["states"] == {"a": "SUCCEEDED", "b": "FAILED", "c": "SKIPPED", "d": "UPSTREAM_FAILED"}
    assert seen["results"] == {"a": "a()", "b": None, "c": None, "d": None}
    assert status(harness, workflow_id) == "FAILED"  # the fan-in completed; the failure stays visible


def test_changing_one_nodes_inputs_recomputes_exactly_its_subgraph(harness: Harness) -> None:
    r = Recorder()
    workflow_id = diamond(r).submit(harness.broker)
    harness.run()
    assert status(harness, workflow_id) == "SUCCEEDED"
    changed = reliable.workflow("diamond", [
        reliable.node("a", r.step.message("a")),
        reliable.node("b", r.step.message("b"), after=["a"], pass_results=True),
        reliable.node("c", r.step.message("c", "v2"), after=["a"], pass_results=True),
        reliable.node("d", r.step.message("d"), after=["b", "c"], pass_results=True),
        reliable.node("e", r.step.message("e"), after=["d"]),
    ])
    plan = engine(harness).resume(workflow_id, control(harness), reason="new input for c", dry_run=True,
                                  definition=changed)
    assert plan.plan is not None and plan.plan.changed == ("c",) and plan.plan.rerun == ("c", "d", "e")
    done = engine(harness).resume(workflow_id, control(harness), reason="new input for c", definition=changed)
    assert done.ok, done.message
    harness.join()
    assert status(harness, workflow_id) == "SUCCEEDED"
    assert r.ran == Counter({"a": 1, "b": 1, "c": 2, "d": 2, "e": 2})
    results = {n["node"]: n["result"] for n in WorkflowStore(harness.store).nodes(workflow_id)}
    assert results["c"] == '"c(v2,a())"'


def test_a_changed_code_version_recomputes_its_node(harness: Harness) -> None:
    runs: Counter[str] = Counter()

    @dramatiq.actor(queue_name="default", code_version="1")
    def versioned(x: int) -> int:
        runs["versioned"] += 1
        return x * 2

    @dramatiq.actor(queue_name="default")
    def plus_one(x: int) -> int:
        runs["plus_one"] += 1
        return x + 1

    def define() -> reliable.Workflow:
        return reliable.workflow("versions", [
            reliable.node("first", plus_one.message(1)),
            reliable.node("double", versioned, after=["first"], pass_results=True),
        ])

    workflow_id = define().submit(harness.broker)
    harness.run()
    assert runs == Counter({"plus_one": 1, "versioned": 1})
    same = engine(harness).resume(workflow_id, control(harness), reason="nothing changed", dry_run=True,
                                  definition=define())
    assert same.outcome == "refused" and "SUCCEEDED" in same.message
    versioned.options["code_version"] = "2"  # the code was changed and redeployed
    result = engine(harness).resume(workflow_id, control(harness), reason="new code", definition=define())
    assert result.ok and result.plan is not None and result.plan.rerun == ("double",)
    harness.join()
    assert runs == Counter({"plus_one": 1, "versioned": 2})


def test_a_different_shape_is_refused_with_what_differs(harness: Harness) -> None:
    r = Recorder()
    workflow_id = diamond(r).submit(harness.broker)
    harness.run()
    other = reliable.workflow("diamond", [reliable.node("a", r.step.message("a")),
                                          reliable.node("z", r.step.message("z"), after=["a"])])
    refused = engine(harness).resume(workflow_id, control(harness), reason="x", definition=other)
    assert refused.outcome == "refused" and "nodes added: ['z']" in refused.message
    assert WorkflowStore(harness.store).events(workflow_id)[-1]["event"] == "command_refused"


def test_pause_holds_every_node_and_resume_continues(harness: Harness) -> None:
    r = Recorder()
    workflow_id = diamond(r).submit(harness.broker)
    paused = engine(harness).hold("pause", workflow_id, control(harness), reason="maintenance window")
    assert paused.ok and paused.status == "PAUSED"
    assert [j.outcome for j in paused.jobs] == ["done"]  # the root's PENDING job paused
    harness.run()
    assert r.ran == Counter() and status(harness, workflow_id) == "PAUSED"
    resumed = engine(harness).resume(workflow_id, control(harness), reason="window over")
    assert resumed.ok and resumed.plan is not None and resumed.plan.resume == ("a",) and resumed.plan.rerun == ()
    harness.join()
    assert status(harness, workflow_id) == "SUCCEEDED" and r.ran == Counter("abcde")
    names = [e["event"] for e in WorkflowStore(harness.store).events(workflow_id)]
    assert names[:3] == ["workflow_submitted", "workflow_pause_requested", "workflow_paused"]
    job_a = WorkflowStore(harness.store).snapshot(workflow_id).node("a").job_id
    audited = [e for e in harness.store.events(job_a) if e.event in ("pause", "resume")]
    assert [e.operator for e in audited] == ["alice", "alice"]
    assert all(e.detail.get("workflow_id") == workflow_id for e in audited)


def test_cancel_ends_the_workflow_and_restart_runs_it_all_again(harness: Harness) -> None:
    r = Recorder()
    workflow_id = diamond(r).submit(harness.broker)
    cancelled = engine(harness).hold("cancel", workflow_id, control(harness), reason="wrong day")
    assert cancelled.ok and cancelled.status == "CANCELLED"
    assert set(states(harness, workflow_id).values()) == {"CANCELLED"}
    harness.run()
    assert r.ran == Counter()
    again = engine(harness).hold("pause", workflow_id, control(harness), reason="x")
    assert again.outcome == "refused" and "CANCELLED" in again.message
    restarted = engine(harness).restart(workflow_id, control(harness), reason="right day now")
    assert restarted.ok and restarted.plan is not None and len(restarted.plan.rerun) == 5
    harness.join()
    assert status(harness, workflow_id) == "SUCCEEDED" and r.ran == Counter("abcde")


def test_commands_need_authorization_on_every_node_and_a_refusal_is_audited(harness: Harness, tmp_path: Any) -> None:
    r = Recorder()
    workflow_id = diamond(r).submit(harness.broker)
    policy = tmp_path / "operators.yaml"
    policy.write_text("operators:\n  bob: [viewer]\nroles:\n  viewer: []\n")
    bob = Control(harness.store, broker=harness.broker, operators=OperatorsPolicy.load(str(policy)),
                  identity=Operator("bob", "h", "option"))
    refused = engine(harness).hold("cancel", workflow_id, bob, reason="because")
    assert refused.outcome == "refused" and "bob" in refused.message
    event = WorkflowStore(harness.store).events(workflow_id)[-1]
    assert event["event"] == "command_refused" and event["operator"] == "bob"
    assert event["detail"]["command"] == "cancel"
    with pytest.raises(reliable.ReasonRequired):
        engine(harness).hold("pause", workflow_id, control(harness), reason="")


def test_a_result_too_large_blocks_the_child_that_needs_it(harness: Harness) -> None:
    @dramatiq.actor(queue_name="default")
    def big() -> str:
        return "x" * (RESULT_LIMIT + 1)

    @dramatiq.actor(queue_name="default")
    def child(value: str) -> None:
        raise AssertionError("must not run")

    workflow_id = reliable.workflow("big", [reliable.node("big", big),
                                            reliable.node("child", child, after=["big"], pass_results=True)]
                                    ).submit(harness.broker)
    harness.run()
    assert states(harness, workflow_id) == {"big": "SUCCEEDED", "child": "BLOCKED"}
    assert status(harness, workflow_id) == "FAILED"
    note = WorkflowStore(harness.store).nodes(workflow_id)[0]["result_note"]
    assert f"over the {RESULT_LIMIT}-byte limit" in note


def test_the_recovery_loop_advances_a_workflow_whose_worker_died_before_advancing_it(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    r = Recorder()
    monkeypatch.setattr(after_commit, "advance_workflow", lambda runtime, metrics, broker, workflow_id: None)
    workflow_id = diamond(r).submit(harness.broker)
    harness.run()
    assert r.ran == Counter("a") and states(harness, workflow_id)["b"] == "READY"  # nobody started b and c
    recovery = Recovery(harness.store, harness.broker, harness.middleware.policy, sweep_after=0.0)
    for _ in range(4):  # each pass starts the next layer (the monkeypatch keeps workers from doing it)
        report = recovery.run_once()
        assert report.workflows == 1
        harness.join()
    assert status(harness, workflow_id) == "SUCCEEDED" and r.ran == Counter("abcde")


def test_a_fan_in_of_many_parents_finishing_at_once_starts_once(harness: Harness) -> None:
    r = Recorder()
    parents = [f"p{i}" for i in range(12)]
    workflow_id = reliable.workflow("wide", [
        *(reliable.node(name, r.step.message(name)) for name in parents),
        reliable.node("join", r.step.message("join"), after=parents),
    ]).submit(harness.broker)
    harness.run()
    assert status(harness, workflow_id) == "SUCCEEDED"
    assert r.ran["join"] == 1
    join_job = WorkflowStore(harness.store).snapshot(workflow_id).node("join").job_id
    assert [e.event for e in harness.store.events(join_job)].count("enqueued") == 1


def test_workflow_nodes_must_be_tracked_actors(harness: Harness) -> None:
    @dramatiq.actor(queue_name="default", reliable=False)
    def untracked() -> None:
        pass

    with pytest.raises(reliable.workflows.WorkflowDefinitionError, match="not tracked by reliable"):
        reliable.workflow("x", [reliable.node("u", untracked)]).submit(harness.broker)
    assert WorkflowStore(harness.store).listing() == []


def test_dramatiq_does_not_warn_that_a_nodes_value_is_discarded(harness: Harness,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    r = Recorder()

    @dramatiq.actor(queue_name="default")
    def plain() -> int:
        return 1

    reliable.workflow("w", [reliable.node("a", r.step.message("a"))]).submit(harness.broker)
    plain.send()
    harness.run()
    warnings = [rec.getMessage() for rec in caplog.records if "returned a value that is not None" in rec.getMessage()]
    assert len(warnings) == 1 and "'plain'" in warnings[0]  # the node's value was stored, not discarded


def test_metrics_count_workflow_transitions_and_the_collector_counts_open_workflows(harness: Harness) -> None:
    from prometheus_client import CollectorRegistry

    from reliable.collector import StoreCollector
    from reliable.metrics import Metrics

    registry = CollectorRegistry()
    harness.middleware.metrics = Metrics(registry)
    r = Recorder()
    paused = diamond(r).submit(harness.broker)
    engine(harness).hold("pause", paused, control(harness), reason="hold it")
    done = reliable.workflow("one", [reliable.node("a", r.step.message("a"))]).submit(harness.broker)
    harness.run()
    assert status(harness, done) == "SUCCEEDED"
    assert registry.get_sample_value("reliable_workflow_transitions_total", {"to_status": "SUCCEEDED"}) == 1
    gauges = {tuple(sample.labels.values()): sample.value for family in StoreCollector(harness.store).collect()
              if family.name == "reliable_workflows" for sample in family.samples}
    assert gauges[("PAUSED",)] == 1 and gauges[("RUNNING",)] == 0 and ("SUCCEEDED",) not in gauges


# -- found by review -------------------------------------------------------------------------------


def test_a_plan_made_stale_meanwhile_is_refused_without_hanging(harness: Harness,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    r = Recorder()
    r.failing = {"c"}
    workflow_id = diamond(r).submit(harness.broker)
    harness.run()
    eng = engine(harness)
    real = eng.rows.snapshot

    def stale(wid: str) -> Any:  # the plan is made while b still looks FAILED
        snapshot = real(wid)
        return dataclasses.replace(snapshot, nodes=tuple(
            dataclasses.replace(n, job_status="FAILED") if n.name == "b" else n for n in snapshot.nodes))

    monkeypatch.setattr(eng.rows, "snapshot", stale)
    result = eng.resume(workflow_id, control(harness), reason="x")
    assert result.outcome == "refused" and "changed while the plan was made" in result.message
    assert WorkflowStore(harness.store).events(workflow_id)[-1]["event"] == "command_refused"


def test_a_reconciled_review_node_lets_its_workflow_go_on(harness: Harness) -> None:
    calls: list[int] = []

    @dramatiq.actor(queue_name="default", idempotent=False)
    def charge() -> None:
        calls.append(1)
        raise ConnectionResetError("closed after the request was sent")

    r = Recorder()
    workflow_id = reliable.workflow("pay", [reliable.node("pay", charge),
                                            reliable.node("receipt", r.step.message("receipt"), after=["pay"])]
                                    ).submit(harness.broker)
    harness.run()
    assert status(harness, workflow_id) == "REVIEW"
    refused = engine(harness).resume(workflow_id, control(harness), reason="continue")
    assert refused.outcome == "refused" and "reconcile" in refused.message
    job = WorkflowStore(harness.store).snapshot(workflow_id).node("pay").job_id
    assert job is not None
    control(harness).reconcile(job, resolution="succeeded", reason="the charge went through")
    harness.join()
    assert status(harness, workflow_id) == "SUCCEEDED" and r.ran == Counter(["receipt"]) and calls == [1]


def test_a_node_job_retried_by_an_operator_moves_its_failed_workflow_on(harness: Harness) -> None:
    r = Recorder()
    r.failing = {"a"}
    workflow_id = reliable.workflow("w", [reliable.node("a", r.step.message("a")),
                                          reliable.node("b", r.step.message("b"), after=["a"])]).submit(harness.broker)
    harness.run()
    assert status(harness, workflow_id) == "FAILED"
    r.failing.clear()
    job = WorkflowStore(harness.store).snapshot(workflow_id).node("a").job_id
    assert job is not None
    harness.worker.pause()  # else the worker may run the restarted job before the status is read
    control(harness).restart(job, reason="fixed")
    assert status(harness, workflow_id) == "RUNNING"  # advanced by the job command itself
    harness.worker.resume()
    harness.join()
    assert status(harness, workflow_id) == "SUCCEEDED" and r.ran == Counter({"a": 2, "b": 1})


def test_a_forged_message_cannot_pose_as_a_node_that_has_not_started(harness: Harness) -> None:
    r = Recorder()
    r.failing = {"a"}
    workflow_id = reliable.workflow("w", [reliable.node("a", r.step.message("a")),
                                          reliable.node("b", r.step.message("b"), after=["a"])]).submit(harness.broker)
    assert WorkflowStore(harness.store).snapshot(workflow_id).node("b").job_id is None  # nothing to aim at
    forged = dramatiq.Message(queue_name="default", actor_name="step", args=("evil",), kwargs={},
                              options={"workflow_id": workflow_id, "workflow_node": "b"},
                              message_id="f" * 32, message_timestamp=int(time.time() * 1000))
    harness.broker.enqueue(forged)
    harness.run()
    assert states(harness, workflow_id) == {"a": "FAILED", "b": "UPSTREAM_FAILED"}
    assert WorkflowStore(harness.store).nodes(workflow_id)[1]["result"] is None


def test_a_cancel_is_not_weakened_by_a_later_pause(harness: Harness) -> None:
    r = Recorder()
    gate = threading.Event()

    @dramatiq.actor(queue_name="default")
    def slow() -> None:
        gate.wait(10)

    workflow_id = reliable.workflow("w", [reliable.node("s", slow),
                                          reliable.node("t", r.step.message("t"), after=["s"])]).submit(harness.broker)
    harness.worker.start()
    wait_running = WorkflowStore(harness.store)
    from support import wait_for

    wait_for(lambda: states(harness, workflow_id)["s"] == "RUNNING", "the node to run")
    assert wait_running.get(workflow_id)["status"] == "RUNNING"
    cancelling = engine(harness).hold("cancel", workflow_id, control(harness), reason="wrong input")
    assert cancelling.ok and cancelling.status == "STOPPING"
    weaker = engine(harness).hold("pause", workflow_id, control(harness), reason="just pause")
    assert weaker.outcome == "refused" and "being cancelled" in weaker.message
    gate.set()
    harness.join()
    assert r.ran == Counter()


def test_a_definition_may_not_move_a_node_to_another_actor_or_queue(harness: Harness) -> None:
    r = Recorder()
    r.failing = {"a"}

    @dramatiq.actor(queue_name="payments")
    def charge(name: str) -> str:
        return "charged"

    workflow_id = reliable.workflow("w", [reliable.node("a", r.step.message("a"))]).submit(harness.broker)
    harness.run()
    moved = reliable.workflow("w", [reliable.node("a", charge.message("a"))])
    refused = engine(harness).resume(workflow_id, control(harness), reason="x", definition=moved)
    assert refused.outcome == "refused" and "actor/queue charge/payments, stored step/default" in refused.message


def test_results_are_passed_in_after_order(harness: Harness) -> None:
    r = Recorder()
    workflow_id = reliable.workflow("order", [
        reliable.node("b", r.step.message("b")),
        reliable.node("c", r.step.message("c")),
        reliable.node("d", r.step.message("d"), after=["c", "b"], pass_results=True),
    ]).submit(harness.broker)
    harness.run()
    assert {n["node"]: n["result"] for n in WorkflowStore(harness.store).nodes(workflow_id)}["d"] == '"d(c(),b())"'


def test_resume_of_a_non_idempotent_node_that_ran_needs_the_duplicate_flag(harness: Harness) -> None:
    @dramatiq.actor(queue_name="default", idempotent=False)
    def charge() -> None:
        raise ValueError("card declined")

    workflow_id = reliable.workflow("pay", [reliable.node("pay", charge)]).submit(harness.broker)
    harness.run()
    assert status(harness, workflow_id) == "FAILED"
    refused = engine(harness).resume(workflow_id, control(harness), reason="retry the charge")
    assert refused.outcome == "refused" and "not idempotent" in refused.message and "'pay'" in refused.message
    allowed = engine(harness).resume(workflow_id, control(harness), reason="checked: not charged",
                                     allow_duplicates=True, dry_run=True)
    assert allowed.outcome == "dry_run" and allowed.plan is not None and allowed.plan.rerun == ("pay",)
