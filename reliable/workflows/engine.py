"""Running workflows: submission, advancing after a node's outcome, and operators' commands.

Everything that changes a workflow happens in one transaction holding its lock
(`WorkflowStore.locked`): the nodes' job states are read there, the pure planner decides
(reliable.workflows.planning), the jobs of nodes that became ready are registered PENDING there,
and the workflow's status and events are written there. Messages are published after the commit;
one lost on the way is published again by the sweeper of PENDING jobs, like any job's.

Who advances a workflow: the worker that committed a node's outcome (right after the commit), the
recovery loop (a sweep of running workflows not looked at for `check_after` seconds: the worker may
have died between its commit and the advance), and every workflow command.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dramatiq

from ..dispatch import declare_queue
from ..errors import ControlRefused, ReliableError
from ..store import NewJob, NodeResult, StateStore
from ..store.workflows import LockedWorkflow, NodeRow, WorkflowStore
from .definition import Workflow, WorkflowDefinitionError, input_digest
from .planning import (
    ResumePlan,
    Snapshot,
    WorkflowStatus,
    node_states,
    ready_nodes,
    restart_plan,
    resume_plan,
    workflow_status,
)

if TYPE_CHECKING:
    from ..control import CommandResult, Control
    from ..middleware import ReliableMiddleware

__all__ = [
    "RESULT_LIMIT",
    "WorkflowCommand",
    "WorkflowEngine",
    "find_middleware",
    "node_result",
    "submit",
]

logger = logging.getLogger("reliable.workflows")

#: The largest result (JSON bytes) a node keeps in the store for its children; a larger one is not
#: kept (a child that needs it is BLOCKED, saying so): use Dramatiq's Results for big values.
RESULT_LIMIT = 64 * 1024

#: The job commands a workflow hold sends to its nodes' jobs, by the jobs' state.
_HOLD_COMMANDS: dict[str, dict[str, str]] = {
    "pause": {"PENDING": "pause", "RETRY_WAIT": "pause", "RUNNING": "pause"},
    "stop": {"PENDING": "stop", "RETRY_WAIT": "stop", "PAUSED": "stop", "RUNNING": "stop"},
    "cancel": {"PENDING": "cancel", "RETRY_WAIT": "cancel", "PAUSED": "cancel", "RUNNING": "cancel",
               "STOPPING": "cancel", "STOPPED": "cancel"},
}


def find_middleware(broker: dramatiq.Broker) -> ReliableMiddleware:
    """The ReliableMiddleware installed on `broker` (workflows need its store and actor contracts)."""
    from ..middleware import ReliableMiddleware

    for middleware in broker.middleware:
        if isinstance(middleware, ReliableMiddleware):
            return middleware
    raise ReliableError("reliable is not installed on this broker: call reliable.install(broker, store=...) first")


def submit(workflow: Workflow, *, broker: dramatiq.Broker | None = None, workflow_id: str | None = None,
           operator: str | None = None) -> str:
    """Persist `workflow` in one transaction (nodes, edges, inputs, digests, root jobs), publish its
    roots' messages, and return its id."""
    broker = broker or dramatiq.get_broker()
    middleware = find_middleware(broker)
    workflow_id = workflow_id or uuid.uuid4().hex
    rows: list[dict[str, Any]] = []
    roots: list[NewJob] = []
    owners: set[str] = set()
    for position, each in enumerate(workflow.nodes):
        try:
            actor = broker.get_actor(each.actor)
        except dramatiq.errors.ActorNotFound:
            raise WorkflowDefinitionError(f"workflow {workflow.name!r}, node {each.name!r}: actor {each.actor!r} "
                                          "is not declared on this broker") from None
        if not middleware.tracked(broker, each.actor):
            raise WorkflowDefinitionError(f"workflow {workflow.name!r}, node {each.name!r}: actor {each.actor!r} "
                                          "is not tracked by reliable (reliable=False)")
        code_version = actor.options.get("code_version")
        new_job = _prepare(middleware, broker, workflow_id, each.name, each.queue, each.actor, each.args,
                           each.kwargs, each.options)
        if new_job.owner:
            owners.add(new_job.owner)
        rows.append({"node": each.name, "position": position, "actor": each.actor, "queue": new_job.queue,
                     "message": json.dumps(dict(new_job.message)), "owner": new_job.owner,
                     "checkpoint_schema": new_job.checkpoint_schema,
                     "code_version": None if code_version is None else str(code_version),
                     "digest": input_digest(each, None if code_version is None else str(code_version)),
                     "trigger": each.trigger, "on_upstream_failure": each.on_upstream_failure,
                     "pass_results": each.pass_results, "job_id": new_job.job_id})
        if not each.after:
            roots.append(new_job)
    store = middleware.store
    WorkflowStore(store).create(
        {"workflow_id": workflow_id, "name": workflow.name, "status": WorkflowStatus.RUNNING,
         "owner": owners.pop() if len(owners) == 1 else None, "created_by": operator},
        rows, workflow.edges, roots, detail={"nodes": len(workflow.nodes), "edges": len(workflow.edges)})
    logger.info("workflow %s (%s) submitted: %d nodes, %d roots", workflow_id, workflow.name, len(rows), len(roots))
    _publish(broker, roots, workflow_id)
    return workflow_id


def _prepare(middleware: ReliableMiddleware, broker: dramatiq.Broker, workflow_id: str, node: str, queue: str,
             actor: str, args: Sequence[Any], kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> NewJob:
    """The job a node registers, as the middleware registers any message (contract, owner, links)."""
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=queue, actor_name=actor, args=tuple(args), kwargs=dict(kwargs),
        options={**options, "workflow_id": workflow_id, "workflow_node": node},
        message_id=uuid.uuid4().hex, message_timestamp=int(time.time() * 1000))
    prepared = middleware._new_job(broker, message, None)
    if prepared is None:
        raise WorkflowDefinitionError(f"node {node!r}: actor {actor!r} is not tracked by reliable")
    return prepared[0]


def node_result(job_id: str, value: Any) -> NodeResult:
    """A node's return value as stored for its children: JSON up to RESULT_LIMIT bytes, or a note."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as exc:
        return NodeResult(job_id, None, f"the result is not JSON ({type(value).__name__}: {exc})")
    if len(text.encode()) > RESULT_LIMIT:
        return NodeResult(job_id, None, f"the result is {len(text.encode())} bytes, over the {RESULT_LIMIT}-byte "
                                        "limit for results kept in the store (use Dramatiq's Results)")
    return NodeResult(job_id, text)


def _each(control: Control, command: str, job_id: str, reason: str | None) -> CommandResult:
    """One job command of a workflow command: a refusal (audited on the job by Control) is a result."""
    from ..control import CommandResult

    try:
        result: CommandResult = getattr(control, command)(job_id, reason=reason)
    except ControlRefused as exc:
        return CommandResult(command, job_id, "refused", str(exc))
    return result


def _publish(broker: dramatiq.Broker | None, new_jobs: Iterable[NewJob], workflow_id: str) -> None:
    if broker is None:
        return
    for job in new_jobs:
        data = dict(job.message)
        try:
            declare_queue(broker, job.queue)
            broker.enqueue(dramatiq.Message(**{**data, "options": dict(data.get("options") or {})}))
        except Exception:  # registered: the sweeper of PENDING jobs publishes it
            logger.warning("workflow %s: publishing job %s failed; the recovery loop will", workflow_id,
                           job.job_id, exc_info=True)


@dataclass(frozen=True)
class WorkflowCommand:
    """What a workflow command did: its outcome, the workflow's status after it, the plan (resume,
    restart) and each job command it sent."""

    command: str
    workflow_id: str
    outcome: str  # done | dry_run | refused
    message: str
    status: str | None = None
    plan: ResumePlan | None = None
    jobs: tuple[CommandResult, ...] = ()
    started: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Whether the command was (or, in a dry run, would be) carried out."""
        return self.outcome != "refused"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"command": self.command, "workflow_id": self.workflow_id, "outcome": self.outcome,
                "message": self.message, "status": self.status,
                "plan": None if self.plan is None else self.plan.as_dict(),
                "jobs": [job.as_dict() for job in self.jobs], "started": list(self.started)}


class WorkflowEngine:
    """Advances workflows and runs operators' commands on them.

    `broker`: publishes the jobs that start (None: the sweeper of PENDING jobs publishes them).
    `middleware`: needed only to recompute nodes from a new definition (resume with changed inputs).
    `on_transition(workflow_id, from_status, to_status)`: called after the commit of each status
    change (the worker's metrics count them).
    """

    def __init__(self, store: StateStore, broker: dramatiq.Broker | None = None, *,
                 middleware: ReliableMiddleware | None = None,
                 on_transition: Callable[[str, str, str], None] | None = None) -> None:
        self.store = store
        self.broker = broker
        self.middleware = middleware
        self.on_transition = on_transition
        self.rows = WorkflowStore(store)

    @contextmanager
    def _locked(self, workflow_id: str) -> Iterator[LockedWorkflow]:
        """The workflow locked for one transaction; its status changes told after the commit."""
        with self.rows.locked(workflow_id) as locked:
            yield locked
        for before, after in locked.transitions:
            if self.on_transition is not None:
                try:
                    self.on_transition(workflow_id, before, after)
                except Exception:  # an observer never breaks a workflow
                    logger.exception("workflow %s: transition listener failed", workflow_id)

    # -- advancing -------------------------------------------------------------------------------

    def advance(self, workflow_id: str) -> str:
        """Start the nodes whose parents allow it and settle the workflow's status; the status."""
        with self._locked(workflow_id) as locked:
            started = self._start_ready(locked)
            status = self._settle(locked, locked.hold)
        _publish(self.broker, started, workflow_id)
        return status

    def advance_stale(self, *, older_than: float, limit: int = 50) -> int:
        """Advance running workflows not looked at for `older_than` seconds; how many were."""
        cutoff = self.store.now() - older_than
        done = 0
        for workflow_id in self.rows.unsettled(checked_before=cutoff, limit=limit):
            try:
                self.advance(workflow_id)
                done += 1
            except ReliableError as exc:
                logger.warning("workflow %s: advance failed: %s", workflow_id, exc)
        return done

    def _start_ready(self, locked: LockedWorkflow) -> list[NewJob]:
        ready = ready_nodes(locked.snapshot)
        if not ready:
            return []
        rows = locked.node_rows()
        new_jobs = [self._job_for(locked.snapshot, rows, name) for name in ready]
        locked.register(new_jobs)
        locked.reload()
        if new_jobs:
            logger.info("workflow %s: started %s", locked.workflow_id, ", ".join(ready))
        return new_jobs

    @staticmethod
    def _job_for(snapshot: Snapshot, rows: Mapping[str, NodeRow], name: str) -> NewJob:
        view = snapshot.node(name)
        row = rows[name]
        data = dict(row.message)
        data["message_id"] = row.job_id
        data["message_timestamp"] = int(time.time() * 1000)
        if view.pass_results:
            results = [None if (text := rows[parent].result) is None else json.loads(text)
                       for parent in view.parents]
            data["args"] = [*list(data.get("args") or ()), *results]
        return NewJob(job_id=row.job_id, queue=row.queue, actor=row.actor, message=data, owner=row.owner,
                      workflow_id=snapshot.workflow_id, trace_id=(data.get("options") or {}).get("trace_id"),
                      checkpoint_schema=row.checkpoint_schema)

    @staticmethod
    def _settle(locked: LockedWorkflow, hold: str | None) -> str:
        """Derive the workflow's status under `hold` and store both (an event when the status changed)."""
        snapshot = Snapshot(locked.workflow_id, locked.snapshot.nodes, hold=hold, status=locked.status,
                            run=locked.run)
        states = node_states(snapshot)
        status = workflow_status(snapshot, states)
        before = locked.status
        if status != before:
            failed = sorted(name for name, state in states.items() if state in ("FAILED", "DEAD"))
            locked.event(f"workflow_{status.lower()}", from_status=before, to_status=status,
                         detail={"failed_nodes": failed} if failed else None)
            locked.transitions.append((before, status))
            logger.info("workflow %s: %s -> %s", locked.workflow_id, before, status)
        locked.save(status=status, hold=hold)
        return status

    # -- commands --------------------------------------------------------------------------------

    def hold(self, command: str, workflow_id: str, control: Control, *, reason: str | None,
             dry_run: bool = False) -> WorkflowCommand:
        """pause / stop / cancel a workflow: no node starts while the hold stands, and each node job
        gets the same command (audited on the job by Control); the workflow records who and why."""
        from ..control import require_reason

        require_reason(command, reason)
        snapshot = self.rows.snapshot(workflow_id)
        refusal = self._authorize(command, workflow_id, control, reason, dry_run=dry_run)
        if refusal is not None:
            return refusal
        if snapshot.status in WorkflowStatus.FINAL:
            return self._refuse(command, workflow_id, control, reason, f"the workflow is {snapshot.status}",
                                dry_run=dry_run)
        commands = _HOLD_COMMANDS[command]
        targets = [(view.job_id, commands[view.job_status]) for view in snapshot.nodes
                   if view.job_status in commands]
        if dry_run:
            jobs = tuple(getattr(control, name)(job_id, reason=reason, dry_run=True) for job_id, name in targets)
            return WorkflowCommand(command, workflow_id, "dry_run",
                                   f"would {command} the workflow: {len(targets)} job(s) get {command}, no node "
                                   "starts until it is resumed" if command != "cancel" else
                                   f"would cancel the workflow: {len(targets)} job(s) cancelled, no node starts",
                                   status=snapshot.status, jobs=jobs)
        identity = control.identity
        with self._locked(workflow_id) as locked:
            locked.event(f"workflow_{command}_requested", operator=identity.name, source=identity.source,
                         reason=reason, detail={"jobs": len(targets)})
            self._settle(locked, command)
        scoped = control.with_detail(workflow_id=workflow_id)
        results = tuple(_each(scoped, name, job_id, reason) for job_id, name in targets)
        status = self.advance(workflow_id)
        refused = [r for r in results if not r.ok]
        message = f"{command} requested: {len(results) - len(refused)} job(s) acted on"
        if refused:
            message += f", {len(refused)} refused"
        return WorkflowCommand(command, workflow_id, "done", message, status=status, jobs=results)

    def resume(self, workflow_id: str, control: Control, *, reason: str | None, dry_run: bool = False,
               definition: Workflow | None = None) -> WorkflowCommand:
        """Resume: re-run only the failed and cancelled nodes and their descendants (new jobs),
        resume paused and stopped jobs from their checkpoints, keep every succeeded node; with
        `definition` (the workflow as now declared: same nodes and edges), nodes whose inputs or
        code version changed are recomputed with their descendants."""
        return self._rerun("resume", workflow_id, control, reason=reason, dry_run=dry_run, definition=definition)

    def restart(self, workflow_id: str, control: Control, *, reason: str | None,
                dry_run: bool = False) -> WorkflowCommand:
        """Run every node again as a new job (refused while any node is active or in REVIEW)."""
        return self._rerun("restart", workflow_id, control, reason=reason, dry_run=dry_run, definition=None)

    def _rerun(self, command: str, workflow_id: str, control: Control, *, reason: str | None, dry_run: bool,
               definition: Workflow | None) -> WorkflowCommand:
        from ..control import require_reason

        require_reason(command, reason)
        refusal = self._authorize(command, workflow_id, control, reason, dry_run=dry_run)
        if refusal is not None:
            return refusal
        changes = self._changes(workflow_id, definition) if definition is not None else {}
        digests = {name: digest for name, (digest, _, _) in changes.items()}
        snapshot = self.rows.snapshot(workflow_id)
        resumable = {view.name for view in snapshot.nodes if view.job_status in ("PAUSED", "STOPPED")
                     and control.resume(view.job_id, reason=reason, dry_run=True).ok}
        plan = restart_plan(snapshot) if command == "restart" else resume_plan(snapshot, digests, resumable)
        if plan.refusal is not None:
            return self._refuse(command, workflow_id, control, reason, plan.refusal, dry_run=dry_run, plan=plan)
        summary = (f"keep {len(plan.keep)} node(s), resume {len(plan.resume)} job(s), "
                   f"run {len(plan.rerun)} node(s) again")
        if dry_run:
            return WorkflowCommand(command, workflow_id, "dry_run", f"would {command}: {summary}",
                                   status=snapshot.status, plan=plan)
        identity = control.identity
        with self._locked(workflow_id) as locked:
            current = restart_plan(locked.snapshot) if command == "restart" else \
                resume_plan(locked.snapshot, digests, resumable)
            if current.as_dict() != plan.as_dict():  # a node moved since the plan was made
                return self._refuse(command, workflow_id, control, reason,
                                    "the workflow changed while the plan was made; try again", dry_run=False,
                                    plan=current)
            run = locked.run + 1
            locked.save(status=locked.status, hold=None, run=run)
            for name in plan.rerun:
                new_message = changes.get(name)
                locked.assign(name, uuid.uuid4().hex, digest=new_message[0] if new_message else None,
                              message=new_message[1] if new_message else None,
                              code_version=new_message[2] if new_message else None)
            locked.event(f"workflow_{command}", operator=identity.name, source=identity.source, reason=reason,
                         detail=plan.as_dict())
            locked.reload()
        scoped = control.with_detail(workflow_id=workflow_id)
        replaced = tuple(_each(scoped, "cancel", view.job_id, reason) for view in snapshot.nodes
                         if view.name in plan.rerun and view.job_status in ("PAUSED", "STOPPED"))
        resumed = tuple(_each(scoped, "resume", view.job_id, reason) for view in snapshot.nodes
                        if view.name in plan.resume)
        status = self.advance(workflow_id)
        return WorkflowCommand(command, workflow_id, "done", f"{command}d: {summary}", status=status, plan=plan,
                               jobs=replaced + resumed, started=plan.rerun)

    def _changes(self, workflow_id: str, definition: Workflow) -> dict[str, tuple[str, dict[str, Any], str | None]]:
        """Per node of `definition`: (digest, message to register, code version), checked to have
        the stored workflow's nodes and edges."""
        if self.middleware is None or self.broker is None:
            raise ReliableError("recomputing changed nodes needs the application's broker (reliable installed)")
        stored = {row["node"]: row for row in self.rows.nodes(workflow_id)}
        declared = {each.name for each in definition.nodes}
        if declared != set(stored) or set(definition.edges) != set(self.rows.edges(workflow_id)):
            added, removed = sorted(declared - set(stored)), sorted(set(stored) - declared)
            raise WorkflowDefinitionError(
                f"workflow {workflow_id}: the definition's shape differs from the stored one (nodes added: "
                f"{added or 'none'}, removed: {removed or 'none'}, or edges changed); submit it as a new workflow")
        changes: dict[str, tuple[str, dict[str, Any], str | None]] = {}
        for each in definition.nodes:
            actor = self.broker.get_actor(each.actor)
            version = actor.options.get("code_version")
            version = None if version is None else str(version)
            new_job = _prepare(self.middleware, self.broker, workflow_id, each.name, each.queue, each.actor,
                               each.args, each.kwargs, each.options)
            changes[each.name] = (input_digest(each, version), dict(new_job.message), version)
        return changes

    def _authorize(self, command: str, workflow_id: str, control: Control, reason: str | None, *,
                   dry_run: bool) -> WorkflowCommand | None:
        """A refusal unless the operator may run `command` on every node's queue and owner."""
        from ..errors import NotAuthorized

        try:
            for row in self.rows.nodes(workflow_id):
                control.operators.check(control.identity.name, command, row["queue"], row["owner"])
        except NotAuthorized as exc:
            return self._refuse(command, workflow_id, control, reason, str(exc), dry_run=dry_run)
        return None

    def _refuse(self, command: str, workflow_id: str, control: Control, reason: str | None, message: str, *,
                dry_run: bool, plan: ResumePlan | None = None) -> WorkflowCommand:
        status = self.rows.get(workflow_id)["status"]
        if not dry_run:
            identity = control.identity
            with self.rows.locked(workflow_id) as locked:
                locked.event("command_refused", operator=identity.name, source=identity.source, reason=reason,
                             detail={"command": command, "refusal": message})
        return WorkflowCommand(command, workflow_id, "refused", message, status=status, plan=plan)

