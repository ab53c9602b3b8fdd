"""Workflow rows: create a workflow with its nodes, edges and first jobs in one transaction, and
change it only while holding its lock (`WorkflowStore.locked`), reading its nodes' job states in
that same transaction.

What a workflow does next is decided by reliable.workflows.planning (pure); this module only reads
and writes, through the store's public unit of work (`StateStore.transaction`). Node jobs are
registered by it (`UnitOfWork.register`), so a node's job is an ordinary job: the state machine,
leases and operators' commands apply to it, and its `enqueued` event reaches listeners after the commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select

from ..errors import ConfigError, ReliableError
from .records import NewJob
from .schema import jobs, workflow_edges, workflow_events, workflow_nodes, workflows
from .store import StateStore
from .unit_of_work import UnitOfWork
from .workflow_views import NodeView, Snapshot, WorkflowStatus

__all__ = ["MIN_PREFIX", "LockedWorkflow", "NodeRow", "WorkflowNotFound", "WorkflowStore"]

#: The fewest characters of a workflow id that name it when no other id starts with them.
MIN_PREFIX = 6


class WorkflowNotFound(ReliableError):
    """No workflow has the given id."""

    def __init__(self, workflow_id: str, *, hint: str | None = None) -> None:
        self.workflow_id = workflow_id
        super().__init__(f"no workflow with id {workflow_id!r}" + (f" ({hint})" if hint else ""))


@dataclass(frozen=True)
class NodeRow:
    """A node as stored: what registering its job needs, and its result."""

    node: str
    job_id: str | None
    actor: str
    queue: str
    message: dict[str, Any]
    owner: str | None
    checkpoint_schema: int | None
    result: str | None  # JSON text


def _event_params(workflow_id: str, event: str, *, from_status: str | None, to_status: str | None, run: int,
                  operator: str | None, source: str | None, reason: str | None,
                  detail: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"workflow_id": workflow_id, "event": event, "from_status": from_status, "to_status": to_status,
            "run": run, "operator": operator, "source": source, "reason": reason,
            "detail": json.dumps(dict(detail), sort_keys=True) if detail else None}


def _read_snapshot(unit: UnitOfWork, workflow_id: str, *, hold: str | None, status: str, run: int) -> Snapshot:
    """The workflow's nodes with their jobs' states and their parents (in each node's `after` order)."""
    params = {"workflow_id": workflow_id}
    nodes = unit.rows("workflow_nodes", params)
    parents: dict[str, list[str]] = {row[0]: [] for row in nodes}
    for parent, child in unit.rows("workflow_edges", params):
        parents[child].append(parent)
    views = tuple(NodeView(name=row[0], job_id=row[1], job_status=row[2], trigger=row[3], on_upstream_failure=row[4],
                           pass_results=bool(row[5]), result_missing=bool(row[6]), digest=row[7],
                           parents=tuple(parents[row[0]]))
                  for row in nodes)
    return Snapshot(workflow_id, views, hold=hold, status=status, run=run)


class LockedWorkflow:
    """One workflow inside a transaction that holds its lock: its snapshot, and the writes allowed."""

    def __init__(self, unit: UnitOfWork, row: Sequence[Any]) -> None:
        self._unit = unit
        self.workflow_id: str = row[0]
        self.name: str = row[1]
        self.status: str = row[2]
        self.hold: str | None = row[3]
        self.run: int = int(row[4])
        #: (from, to) status changes written in this transaction, told to listeners after the commit.
        self.transitions: list[tuple[str, str]] = []
        self.snapshot = self._load()

    def _load(self) -> Snapshot:
        return _read_snapshot(self._unit, self.workflow_id, hold=self.hold, status=self.status, run=self.run)

    def reload(self) -> Snapshot:
        """Read the nodes again (after registering or assigning jobs in this transaction)."""
        self.snapshot = Snapshot(self.workflow_id, self._load().nodes, hold=self.hold, status=self.status,
                                 run=self.run)
        return self.snapshot

    def node_rows(self) -> dict[str, NodeRow]:
        """Every node's stored message and result."""
        rows = self._unit.rows("workflow_node_messages", {"workflow_id": self.workflow_id})
        return {row[0]: NodeRow(node=row[0], message=json.loads(row[1]), owner=row[2], checkpoint_schema=row[3],
                                queue=row[4], actor=row[5], job_id=row[6], result=row[7]) for row in rows}

    def register(self, new_jobs: Sequence[NewJob]) -> None:
        """Register node jobs PENDING in this transaction (a job id that exists is left alone)."""
        self._unit.register(new_jobs)

    def assign(self, node: str, job_id: str | None, *, message: Mapping[str, Any] | None = None,
               digest: str | None = None, code_version: str | None = None) -> None:
        """Set `node`'s job for this run (None: not started yet), its result cleared; with `message`,
        new inputs."""
        self._unit.run("assign_workflow_node", {
            "workflow_id": self.workflow_id, "node": node, "job_id": job_id, "run": self.run,
            "message": None if message is None else json.dumps(dict(message)), "digest": digest,
            "code_version": code_version})

    def save(self, *, status: str, hold: str | None, run: int | None = None) -> None:
        """Write the workflow's status, hold and run (and when it was checked)."""
        self._unit.now()  # the query writes :now as it is: fix the unit's time first
        self._unit.run("update_workflow", {
            "workflow_id": self.workflow_id, "status": status, "hold": hold,
            "run": self.run if run is None else run, "final": status in WorkflowStatus.FINAL})
        self.status, self.hold = status, hold
        if run is not None:
            self.run = run

    def event(self, event: str, *, from_status: str | None = None, to_status: str | None = None,
              operator: str | None = None, source: str | None = None, reason: str | None = None,
              detail: Mapping[str, Any] | None = None) -> None:
        """Append one event to the workflow's history."""
        self._unit.now()  # the query writes :now as it is: fix the unit's time first
        self._unit.run("insert_workflow_event", _event_params(
            self.workflow_id, event, from_status=from_status, to_status=to_status, run=self.run, operator=operator,
            source=source, reason=reason, detail=detail))


class WorkflowStore:
    """The workflow tables of one StateStore."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def create(self, workflow: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]],
               edges: Sequence[tuple[str, str, int]], roots: Sequence[NewJob], *,
               detail: Mapping[str, Any] | None = None) -> None:
        """Store a workflow (its row, nodes, edges, a `submitted` event) and register its root jobs,
        all in one transaction."""
        with self.store.transaction() as unit:
            unit.now()  # every row of the workflow gets the same time (the queries write :now as it is)
            workflow_id = workflow["workflow_id"]
            unit.run("insert_workflow", dict(workflow))
            for row in nodes:
                unit.run("insert_workflow_node", {"workflow_id": workflow_id, **row})
            for parent, child, position in edges:
                unit.run("insert_workflow_edge", {"workflow_id": workflow_id, "parent": parent, "child": child,
                                                  "position": position})
            unit.run("insert_workflow_event", _event_params(
                workflow_id, "workflow_submitted", from_status=None, to_status=workflow["status"], run=1,
                operator=workflow.get("created_by"), source="api", reason=None, detail=detail))
            unit.register(roots)

    @contextmanager
    def locked(self, workflow_id: str) -> Iterator[LockedWorkflow]:
        """The workflow, locked for the transaction of the block (its writes commit together)."""
        with self.store.transaction() as unit:
            row = unit.one("lock_workflow", {"workflow_id": workflow_id})
            if row is None:
                raise WorkflowNotFound(workflow_id)
            yield LockedWorkflow(unit, row)

    # -- reads -----------------------------------------------------------------------------------

    def find(self, workflow_id: str) -> dict[str, Any] | None:
        """The workflow's row, or None."""
        with self.store.read() as conn:
            row = conn.execute(select(workflows).where(workflows.c.workflow_id == workflow_id)).mappings().first()
        return None if row is None else dict(row)

    def get(self, workflow_id: str) -> dict[str, Any]:
        """The workflow's row; WorkflowNotFound if there is none."""
        found = self.find(workflow_id)
        if found is None:
            raise WorkflowNotFound(workflow_id)
        return found

    def resolve(self, given: str, *, linked: bool = True) -> str:
        """The whole id of the workflow `given` names: its id, or a unique prefix of at least
        MIN_PREFIX characters (a trailing "..." as tables print it is ignored). With `linked`, the id
        of jobs linked by workflow_id only (a Dramatiq pipeline or group) counts too.
        WorkflowNotFound when none matches; ConfigError when the prefix is short or ambiguous."""
        given = given.strip().removesuffix("...")
        if self.find(given) is not None or (linked and self.store.list_jobs(workflow_id=given, limit=1)):
            return given
        if len(given) < MIN_PREFIX:
            raise WorkflowNotFound(given, hint=f"a prefix needs at least {MIN_PREFIX} characters")
        found = self.ids_with_prefix(given, limit=3)
        if not found:
            raise WorkflowNotFound(given)
        if len(found) > 1:
            raise ConfigError(f"workflow id prefix {given!r} is ambiguous: {', '.join(found)}...")
        return found[0]

    def ids_with_prefix(self, prefix: str, *, limit: int = 2) -> list[str]:
        """Workflow ids starting with `prefix`."""
        with self.store.read() as conn:
            return list(conn.execute(select(workflows.c.workflow_id).where(
                workflows.c.workflow_id.startswith(prefix, autoescape=True)).limit(limit)).scalars())

    def nodes(self, workflow_id: str) -> list[dict[str, Any]]:
        """The workflow's nodes in declaration order, each with its job's status, attempt and error."""
        stmt = (select(workflow_nodes, jobs.c.status.label("job_status"), jobs.c.attempt,
                       jobs.c.last_error_class, jobs.c.last_error_type, jobs.c.last_error_message, jobs.c.finished_at)
                .select_from(workflow_nodes.outerjoin(jobs, jobs.c.job_id == workflow_nodes.c.job_id))
                .where(workflow_nodes.c.workflow_id == workflow_id).order_by(workflow_nodes.c.position))
        with self.store.read() as conn:
            return [dict(row) for row in conn.execute(stmt).mappings()]

    def edges(self, workflow_id: str) -> list[tuple[str, str]]:
        """(parent, child) pairs, each child's parents in its `after` order."""
        with self.store.read() as conn:
            stmt = (select(workflow_edges.c.parent, workflow_edges.c.child)
                    .where(workflow_edges.c.workflow_id == workflow_id)
                    .order_by(workflow_edges.c.child, workflow_edges.c.position))
            return [(p, c) for p, c in conn.execute(stmt)]

    def snapshot(self, workflow_id: str) -> Snapshot:
        """The workflow as planning sees it, read without the lock (for display and dry runs) with
        the same statements as under it."""
        row = self.get(workflow_id)
        with self.store.transaction() as unit:
            return _read_snapshot(unit, workflow_id, hold=row["hold"], status=row["status"], run=int(row["run"]))

    def listing(self, *, status: Sequence[str] | None = None, names: Sequence[str] | None = None,
                limit: int = 50) -> list[dict[str, Any]]:
        """Workflows, newest first, with how many nodes each has (in any of `status`, named any of `names`)."""
        counts = (select(workflow_nodes.c.workflow_id, func.count().label("nodes"))
                  .group_by(workflow_nodes.c.workflow_id).subquery())
        stmt = (select(workflows, counts.c.nodes)
                .select_from(workflows.outerjoin(counts, counts.c.workflow_id == workflows.c.workflow_id))
                .order_by(workflows.c.created_at.desc(), workflows.c.workflow_id).limit(limit))
        if status:
            stmt = stmt.where(workflows.c.status.in_(list(status)))
        if names:
            stmt = stmt.where(workflows.c.name.in_(list(names)))
        with self.store.read() as conn:
            return [dict(row) for row in conn.execute(stmt).mappings()]

    def events(self, workflow_id: str) -> list[dict[str, Any]]:
        """The workflow's own history, oldest first."""
        stmt = (select(workflow_events).where(workflow_events.c.workflow_id == workflow_id)
                .order_by(workflow_events.c.id))
        with self.store.read() as conn:
            rows = [dict(row) for row in conn.execute(stmt).mappings()]
        for row in rows:
            row["detail"] = json.loads(row["detail"]) if row["detail"] else {}
        return rows

    def unsettled(self, *, checked_before: float, limit: int = 50) -> list[str]:
        """Workflows stored as RUNNING or STOPPING whose nodes were last looked at before
        `checked_before` (the recovery loop advances them: a worker may have died between a node's
        outcome and the advance)."""
        stmt = (select(workflows.c.workflow_id)
                .where(workflows.c.status.in_([WorkflowStatus.RUNNING, WorkflowStatus.STOPPING]),
                       workflows.c.checked_at < checked_before)
                .order_by(workflows.c.checked_at).limit(limit))
        with self.store.read() as conn:
            return list(conn.execute(stmt).scalars())

    def node_of(self, job_id: str) -> tuple[str, str] | None:
        """(workflow_id, node) of the node whose current job is `job_id`."""
        stmt = select(workflow_nodes.c.workflow_id, workflow_nodes.c.node).where(workflow_nodes.c.job_id == job_id)
        with self.store.read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else (row[0], row[1])

    def parent_results(self, job_id: str) -> dict[str, dict[str, Any]]:
        """For the node running `job_id`: each parent's state, result (JSON text) and result note."""
        child = workflow_nodes.alias("child")
        parent = workflow_nodes.alias("parent")
        stmt = (select(parent.c.node, jobs.c.status, parent.c.result, parent.c.result_note)
                .select_from(child.join(workflow_edges, and_(workflow_edges.c.workflow_id == child.c.workflow_id,
                                                             workflow_edges.c.child == child.c.node))
                             .join(parent, and_(parent.c.workflow_id == child.c.workflow_id,
                                                parent.c.node == workflow_edges.c.parent))
                             .outerjoin(jobs, jobs.c.job_id == parent.c.job_id))
                .where(child.c.job_id == job_id))
        with self.store.read() as conn:
            return {row[0]: {"status": row[1], "result": row[2], "result_note": row[3]}
                    for row in conn.execute(stmt)}
