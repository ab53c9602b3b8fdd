"""Node states, workflow status and resume plans: pure, checked on hand-made cases and on random
DAGs with random outcomes (hypothesis)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from reliable.workflows.definition import descendants
from reliable.workflows.planning import (
    ACTIVE,
    FAILURES,
    SETTLED,
    NodeView,
    Snapshot,
    node_states,
    ready_nodes,
    restart_plan,
    resume_plan,
    workflow_status,
)


def snap(nodes: Mapping[str, tuple[Sequence[str], str | None]], *, hold: str | None = None,
         **extra: Mapping[str, object]) -> Snapshot:
    """A snapshot from {name: (parents, job status or None)}; extra[name] overrides NodeView fields."""
    views = tuple(NodeView(name=name, parents=tuple(parents), job_id=f"job-{name}", job_status=status,
                           digest=f"d-{name}", **extra.get(name, {}))  # type: ignore[arg-type]
                  for name, (parents, status) in nodes.items())
    return Snapshot("wf", views, hold=hold)


DIAMOND = {"a": ((), "SUCCEEDED"), "b": (("a",), "SUCCEEDED"), "c": (("a",), "FAILED"),
           "d": (("b", "c"), None), "e": (("d",), None)}


def test_a_failure_settles_everything_downstream_at_once() -> None:
    s = snap(DIAMOND)
    assert node_states(s) == {"a": "SUCCEEDED", "b": "SUCCEEDED", "c": "FAILED", "d": "UPSTREAM_FAILED",
                              "e": "UPSTREAM_FAILED"}
    assert workflow_status(s) == "FAILED" and ready_nodes(s) == []


def test_skip_is_per_node_and_propagates() -> None:
    s = snap(DIAMOND, d={"on_upstream_failure": "skip"})
    assert node_states(s)["d"] == "SKIPPED" and node_states(s)["e"] == "UPSTREAM_FAILED"


def test_all_done_waits_for_every_parent_to_settle_then_runs_despite_failures() -> None:
    running = snap({"a": ((), "FAILED"), "b": ((), "RUNNING"), "r": (("a", "b"), None)}, r={"trigger": "all_done"})
    assert node_states(running)["r"] == "WAITING" and workflow_status(running) == "RUNNING"
    done = snap({"a": ((), "FAILED"), "b": ((), "SUCCEEDED"), "r": (("a", "b"), None)}, r={"trigger": "all_done"})
    assert ready_nodes(done) == ["r"]


def test_a_missing_result_blocks_only_children_that_need_it() -> None:
    nodes = {"a": ((), "SUCCEEDED"), "b": (("a",), None), "c": (("a",), None)}
    s = snap(nodes, a={"result_missing": True}, b={"pass_results": True})
    assert node_states(s) == {"a": "SUCCEEDED", "b": "BLOCKED", "c": "READY"}


def test_holds() -> None:
    pending = {"a": ((), "SUCCEEDED"), "b": (("a",), None)}
    assert ready_nodes(snap(pending, hold="pause")) == []
    assert workflow_status(snap(pending, hold="pause")) == "PAUSED"
    assert workflow_status(snap(pending, hold="stop")) == "STOPPED"
    assert node_states(snap(pending, hold="cancel"))["b"] == "CANCELLED"
    assert workflow_status(snap(pending, hold="cancel")) == "CANCELLED"
    assert workflow_status(snap({"a": ((), "RUNNING")}, hold="stop")) == "STOPPING"
    assert workflow_status(snap({"a": ((), "REVIEW"), "b": (("a",), None)})) == "REVIEW"


def test_resume_plan_keeps_succeeded_and_reruns_failed_with_descendants() -> None:
    plan = resume_plan(snap(DIAMOND))
    assert plan.refusal is None
    assert (plan.keep, plan.rerun, plan.resume) == (("a", "b"), ("c", "d", "e"), ())
    changed = resume_plan(snap(DIAMOND), {"b": "new", "a": "d-a"})
    assert changed.changed == ("b",) and changed.keep == ("a",) and changed.rerun == ("b", "c", "d", "e")


def test_resume_plan_refusals() -> None:
    assert "REVIEW" in (resume_plan(snap({"a": ((), "REVIEW")})).refusal or "")
    assert "nothing to resume" in (resume_plan(snap({"a": ((), "RUNNING")})).refusal or "")
    assert "SUCCEEDED" in (resume_plan(snap({"a": ((), "SUCCEEDED")})).refusal or "")
    busy = resume_plan(snap({"a": ((), "FAILED"), "b": ((), "RUNNING"), "c": (("a", "b"), None)}),
                       {"b": "changed"})
    assert "still active" in (busy.refusal or "")


def test_paused_and_stopped_jobs_resume_unless_they_cannot() -> None:
    nodes = {"a": ((), "PAUSED"), "b": ((), "STOPPED"), "c": (("b",), None)}
    assert resume_plan(snap(nodes)).resume == ("a", "b")
    plan = resume_plan(snap(nodes), resumable={"a"})
    assert plan.resume == ("a",) and plan.rerun == ("b", "c")


def test_restart_reruns_everything_once_nothing_is_active() -> None:
    assert restart_plan(snap(DIAMOND)).rerun == ("a", "b", "c", "d", "e")
    assert "still active" in (restart_plan(snap({"a": ((), "PENDING")})).refusal or "")


JOB_OUTCOMES = ["SUCCEEDED", "FAILED", "DEAD", "CANCELLED", "PAUSED", "STOPPED", "RUNNING", "PENDING", "REVIEW"]


@st.composite
def dags(draw: st.DrawFn) -> Snapshot:
    size = draw(st.integers(1, 9))
    names = [f"n{i}" for i in range(size)]
    nodes: dict[str, tuple[Sequence[str], str | None]] = {}
    extra: dict[str, dict[str, object]] = {}
    for index, name in enumerate(names):
        parents = draw(st.lists(st.sampled_from(names[:index]), unique=True, max_size=3)) if index else []
        nodes[name] = (parents, None)
        extra[name] = {"trigger": draw(st.sampled_from(["all_succeeded", "all_done"])),
                       "on_upstream_failure": draw(st.sampled_from(["fail", "skip"]))}
    # Give jobs to a prefix of the nodes in an order the engine could have reached: a node has a job
    # only if its parents allowed it to start.
    snapshot = snap(nodes, **extra)
    for _ in range(size):
        ready = ready_nodes(snapshot)
        if not ready or not draw(st.booleans()):
            break
        chosen = draw(st.sampled_from(ready))
        outcome = draw(st.sampled_from(JOB_OUTCOMES))
        nodes[chosen] = (nodes[chosen][0], outcome)
        snapshot = snap(nodes, **extra)
    return snapshot


@settings(max_examples=300, deadline=None)
@given(dags())
def test_random_dags_invariants(snapshot: Snapshot) -> None:
    states = node_states(snapshot)
    status = workflow_status(snapshot, states)
    children = snapshot.children
    # A node never starts before its parents allow it.
    for view in snapshot.nodes:
        if view.job_status is not None and view.trigger == "all_succeeded":
            assert all(states[p] == "SUCCEEDED" for p in view.parents)
    # Final statuses only when nothing can move any more.
    if status in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert not set(states.values()) & ACTIVE and "READY" not in states.values()
        assert set(states.values()) <= SETTLED
    if status == "SUCCEEDED":
        assert set(states.values()) == {"SUCCEEDED"}
    if set(states.values()) & FAILURES and status in ("SUCCEEDED", "CANCELLED"):
        raise AssertionError(f"a failure is hidden: {states} -> {status}")
    plan = resume_plan(snapshot)
    if plan.refusal is None:
        rerun, keep = set(plan.rerun), set(plan.keep)
        assert not rerun & keep and not rerun & set(plan.resume)
        failed = {n for n, s in states.items() if s in ("FAILED", "DEAD", "CANCELLED")}
        assert rerun == descendants(children, failed)  # exactly the failed nodes and their descendants
        assert keep == {n for n, s in states.items() if s == "SUCCEEDED"} - rerun


def test_resume_of_a_blocked_node_reruns_the_parent_whose_result_was_not_kept() -> None:
    nodes = {"a": ((), "SUCCEEDED"), "b": (("a",), None), "c": ((), "SUCCEEDED")}
    plan = resume_plan(snap(nodes, a={"result_missing": True}, b={"pass_results": True}))
    assert plan.refusal is None and plan.rerun == ("a", "b") and plan.keep == ("c",)


def test_resume_starts_ready_nodes_nobody_started() -> None:
    plan = resume_plan(snap({"a": ((), "SUCCEEDED"), "b": (("a",), None)}))
    assert plan.refusal is None and plan.rerun == () and plan.keep == ("a",)
