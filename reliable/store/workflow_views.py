"""A workflow as the store reads it: its statuses, and the read model of its nodes that planning
(`reliable.workflows.planning`) derives states and next steps from.

They live below the store so that the store's workflow tables (`reliable.store.workflows`) can
return them without importing the workflows package, which builds on the store.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NodeView", "Snapshot", "WorkflowStatus"]


class WorkflowStatus:
    """The statuses a workflow can be in (strings, as stored)."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    REVIEW = "REVIEW"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    FINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
    ALL = (RUNNING, PAUSED, STOPPING, STOPPED, REVIEW, SUCCEEDED, FAILED, CANCELLED)


@dataclass(frozen=True)
class NodeView:
    """What planning needs to know of one node."""

    name: str
    parents: tuple[str, ...]
    job_id: str | None  # None: the node has not started in this run
    job_status: str | None  # None: the node's job is not registered yet
    trigger: str = "all_succeeded"
    on_upstream_failure: str = "fail"
    pass_results: bool = False
    result_missing: bool = False  # succeeded, but its result could not be stored (see result_note)
    digest: str = ""


@dataclass(frozen=True)
class Snapshot:
    """A workflow's nodes (in declaration order) and the operator's hold, as read in one transaction."""

    workflow_id: str
    nodes: tuple[NodeView, ...]
    hold: str | None = None
    status: str = WorkflowStatus.RUNNING
    run: int = 1

    def node(self, name: str) -> NodeView:
        """The node called `name`."""
        for each in self.nodes:
            if each.name == name:
                return each
        raise KeyError(name)

    @property
    def children(self) -> dict[str, list[str]]:
        """Each node's children."""
        found: dict[str, list[str]] = {each.name: [] for each in self.nodes}
        for each in self.nodes:
            for parent in each.parents:
                found[parent].append(each.name)
        return found
