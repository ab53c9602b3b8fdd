"""What a workflow's nodes are, what the workflow is, and what to do next: pure, no I/O.

A node that has a job is in its job's state (the job state machine decides everything about it).
A node without a job yet is in a derived state: WAITING for its parents, READY (its parents allow it
to start: the engine registers its job), UPSTREAM_FAILED or SKIPPED (a parent failed for good and
the node waits for all parents to succeed: it never runs), BLOCKED (a parent's result it needs
could not be stored), or CANCELLED (the workflow was cancelled before it started).

The workflow's status is derived from its nodes (`workflow_status`): no barrier waits forever,
because a permanent failure settles every node downstream of it at once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from ..states import FAILED_FOR_GOOD, JobStatus
from ..store.workflow_views import NodeView, Snapshot, WorkflowStatus
from .graph import descendants, topological

__all__ = [
    "ACTIVE",
    "FAILURES",
    "NodeView",
    "ResumePlan",
    "Snapshot",
    "WorkflowStatus",
    "node_states",
    "ready_nodes",
    "restart_plan",
    "resume_plan",
    "workflow_status",
]

WAITING, READY, UPSTREAM_FAILED, SKIPPED, BLOCKED = "WAITING", "READY", "UPSTREAM_FAILED", "SKIPPED", "BLOCKED"
CANCELLED = JobStatus.CANCELLED.value

#: Node states in which the node's job may still run or is running.
ACTIVE: frozenset[str] = frozenset(s.value for s in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.RETRY_WAIT,
                                                      JobStatus.STOPPING))

#: Node states that make the workflow FAILED once nothing is active.
FAILURES: frozenset[str] = frozenset({*(s.value for s in FAILED_FOR_GOOD), UPSTREAM_FAILED, SKIPPED, BLOCKED})

#: Node states that are final for this run (a parent in one of them has "finished").
SETTLED: frozenset[str] = FAILURES | {JobStatus.SUCCEEDED.value, CANCELLED}


def node_states(snapshot: Snapshot) -> dict[str, str]:
    """Every node's state, in declaration order (see the module's docstring)."""
    views = {each.name: each for each in snapshot.nodes}
    derived: dict[str, str] = {}
    for name in topological({each.name: each.parents for each in snapshot.nodes}):
        derived[name] = _state(views[name], derived, views, snapshot.hold)
    return {each.name: derived[each.name] for each in snapshot.nodes}


def _state(view: NodeView, derived: Mapping[str, str], views: Mapping[str, NodeView], hold: str | None) -> str:
    if view.job_status is not None:
        return view.job_status
    parents = [derived[parent] for parent in view.parents]
    if view.trigger == "all_done":
        allowed = all(state in SETTLED for state in parents)
    else:
        if any(state in FAILURES for state in parents):
            return SKIPPED if view.on_upstream_failure == "skip" else UPSTREAM_FAILED
        if any(state == CANCELLED for state in parents):
            return CANCELLED
        allowed = all(state == JobStatus.SUCCEEDED.value for state in parents)
    if hold == "cancel":
        return CANCELLED
    if not allowed:
        return WAITING
    if view.pass_results and any(views[parent].result_missing for parent in view.parents):
        return BLOCKED
    return READY


def ready_nodes(snapshot: Snapshot) -> list[str]:
    """The nodes whose jobs to register now (none while the workflow is held)."""
    if snapshot.hold is not None:
        return []
    return [name for name, state in node_states(snapshot).items() if state == READY]


def workflow_status(snapshot: Snapshot, states: Mapping[str, str] | None = None) -> str:
    """The workflow's status from its nodes' states and the hold (READY nodes count as active:
    the engine registers them in the same transaction)."""
    states = node_states(snapshot) if states is None else states
    values = set(states.values())
    hold = snapshot.hold
    if values & ACTIVE or (READY in values and hold is None):
        return WorkflowStatus.STOPPING if hold in ("stop", "cancel") else WorkflowStatus.RUNNING
    if JobStatus.REVIEW.value in values:
        return WorkflowStatus.REVIEW
    unsettled = values - SETTLED
    if hold == "cancel" and not unsettled:
        return WorkflowStatus.CANCELLED
    if unsettled:
        if JobStatus.PAUSED.value in values or hold == "pause":
            return WorkflowStatus.PAUSED
        return WorkflowStatus.STOPPED  # STOPPED nodes, or nodes held back by a stop
    if values & FAILURES:
        return WorkflowStatus.FAILED
    if CANCELLED in values:
        return WorkflowStatus.CANCELLED
    return WorkflowStatus.SUCCEEDED


@dataclass(frozen=True)
class ResumePlan:
    """What a resume (or restart) does, node by node; `refusal` says why it cannot, if it cannot.

    - keep: succeeded nodes whose results stay;
    - resume: PAUSED or STOPPED jobs resumed as jobs (same job, from their checkpoint);
    - rerun: nodes that run again as new jobs (failed, cancelled, changed, and what depends on them);
    - changed: nodes whose inputs or code version changed (a subset of rerun).
    """

    keep: tuple[str, ...] = ()
    resume: tuple[str, ...] = ()
    rerun: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    refusal: str | None = None
    states: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """The plan as JSON-ready data."""
        return {"keep": list(self.keep), "resume": list(self.resume), "rerun": list(self.rerun),
                "changed": list(self.changed), "refusal": self.refusal}


_RERUN_STATES = frozenset({*(s.value for s in FAILED_FOR_GOOD), JobStatus.CANCELLED.value})


def resume_plan(snapshot: Snapshot, digests: Mapping[str, str] | None = None,
                resumable: Collection[str] | None = None) -> ResumePlan:
    """Resume a workflow: re-run only its failed and cancelled nodes and what depends on them, resume
    its paused or stopped jobs from their checkpoints, keep every succeeded node's result, except
    where `digests` (a node's new input digest) differ from the stored ones: those nodes and their
    descendants are recomputed.

    `resumable`: the paused or stopped nodes whose jobs may resume as jobs (Control's dry run says);
    the others run again as new jobs. None: all of them may.
    """
    states = node_states(snapshot)
    status = workflow_status(snapshot, states)
    changed = sorted(name for name, digest in (digests or {}).items() if snapshot.node(name).digest != digest)
    review = _review_refusal(states)
    if review:
        return ResumePlan(refusal=review, states=states)
    active = [name for name, state in states.items() if state in ACTIVE]
    if active and snapshot.hold is None and not changed:
        return ResumePlan(refusal=f"the workflow is {status}: nothing to resume", states=states)
    if status == WorkflowStatus.SUCCEEDED and not changed:
        return ResumePlan(refusal="the workflow SUCCEEDED: nothing to resume (restart runs it all again)",
                          states=states)
    held = [name for name, state in states.items() if state in (JobStatus.PAUSED.value, JobStatus.STOPPED.value)]
    stuck = [name for name in held if resumable is not None and name not in resumable]
    # A BLOCKED node needs a result its parent could not keep: that parent runs again.
    unkept = [parent for name, state in states.items() if state == BLOCKED
              for parent in snapshot.node(name).parents if snapshot.node(parent).result_missing]
    roots = [name for name, state in states.items() if state in _RERUN_STATES] + changed + stuck + unkept
    rerun = descendants(snapshot.children, roots)
    busy = sorted(set(active) & rerun)
    if busy:
        return ResumePlan(refusal=f"node(s) {', '.join(busy)} would run again but are still active: "
                                  "stop or cancel the workflow first", states=states)
    resume = [name for name in held if name not in rerun]
    keep = [name for name, state in states.items() if state == JobStatus.SUCCEEDED.value and name not in rerun]
    order = [each.name for each in snapshot.nodes]
    return ResumePlan(keep=tuple(keep), resume=tuple(resume), rerun=tuple(n for n in order if n in rerun),
                      changed=tuple(changed), states=states)


def restart_plan(snapshot: Snapshot) -> ResumePlan:
    """Restart a workflow from scratch: every node runs again as a new job. Refused while any node
    is active (stop or cancel the workflow first) or in REVIEW."""
    states = node_states(snapshot)
    busy = [name for name, state in states.items() if state in ACTIVE]
    if busy:
        return ResumePlan(refusal=f"node(s) {', '.join(busy)} still active: stop or cancel the workflow first",
                          states=states)
    review = _review_refusal(states)
    if review:
        return ResumePlan(refusal=review, states=states)
    return ResumePlan(rerun=tuple(each.name for each in snapshot.nodes), states=states)


def _review_refusal(states: Mapping[str, str]) -> str | None:
    review = [name for name, state in states.items() if state == JobStatus.REVIEW.value]
    if not review:
        return None
    return (f"node(s) {', '.join(review)} in REVIEW: reconcile them first "
            "(`reliable reconcile JOB_ID --as succeeded|cancelled`)")

